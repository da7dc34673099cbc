"""Fine-tuning to other classes: the blobs whose shape follows the class (or keypoint) count, and their values
when the initial weights come from a model of other classes.

`count_layouts(cfg)` says where each such blob of the config's model holds its classes, in Caffe2 layout
(`tfdet.modeling.detectron_names`): `cls_score` rows, `bbox_pred` (4 rows a class), `mask_fcn_logits` (a channel,
or RESOLUTION^2 rows of the FC output) and its fixed bilinear upsampling, RetinaNet's `retnet_cls_pred`
(anchor-major: channel a * C + c, as Detectron's test_retinanet reshapes it) and `retnet_bbox_pred`; the keypoint
predictor (`kps_score*`) follows KRCNN.NUM_KEYPOINTS. A box or mask head may be class-agnostic
(MODEL.CLS_AGNOSTIC_BBOX_REG: 2 classes' rows, background and foreground; MRCNN.CLS_SPECIFIC_MASK False: 1 class;
RETINANET.CLASS_SPECIFIC_BBOX False: 4 channels an anchor).

`ClassTransfer.resolve` takes every count blob both models hold, equal shapes included. The source's class count
is its first class blob's (`cls_score`, `retnet_cls_pred`); the model's initialisation comes from Detectron's
initialisers (cls_score N(0, 0.01), bbox_pred N(0, 0.001), mask logits MRCNN.CONV_INIT, RetinaNet's prior-probability
bias, zero biases). Class names match with case and surrounding or repeated whitespace ignored ("Traffic  Light" is
COCO's "traffic light"; "__background__" is class 0 of both); a name the source holds twice (after that folding)
is not used.
* A blob class-specific on one side and class-agnostic on the other keeps the model's initialisation, as detectron2
  keeps a new layer of another shape (one line per blob, both shapes).
* Another class (or keypoint) count: the model's initialisation, but for the entries of the model classes whose
  name the source has too, copied from the source (one line per blob, both shapes and the copied classes).
* The same class count: when both sides' names are known, same-name rows are moved to their model index and the
  other classes get the model's initialisation, in every class blob (one line for them all, naming the moved and
  the re-initialised classes; rows whose classes are the source's in its order load as they are); when either
  side's names are unknown the rows load by index (one line saying so).
Every other mismatch is left for the caller to refuse.
"""

import dataclasses

import numpy as np

from tfdet.modeling.retinanet import num_anchors

CLASSES = "classes"
KEYPOINTS = "keypoints"


@dataclasses.dataclass(frozen=True)
class CountLayout:
    """Where a blob holds its classes (or keypoints), Caffe2 layout: along each of `axes`, `groups` repeats (the
    anchors, outer) of (count - `first`) blocks of `unit` entries; class c >= `first` owns entries
    g * (count - first) * unit + (c - first) * unit + k. `copyable` False: never copied by name (fixed bilinear
    kernels, keypoints). `agnostic_count`: the count whose shape a class-agnostic head of this blob has (None: never
    class-agnostic); `model_agnostic`: the config's head is class-agnostic."""

    family: str
    axes: tuple = (0,)
    unit: int = 1
    groups: int = 1
    first: int = 0
    copyable: bool = True
    agnostic_count: int | None = None
    model_agnostic: bool = False

    def count(self, size):
        """The class count a size along a count axis means, or None when no count gives that size."""
        per_class = self.groups * self.unit
        if size % per_class or size // per_class < 1:
            return None
        return size // per_class + self.first

    def counts(self, source_shape, model_shape):
        """(source count, model count) when the shapes differ only along the count axes, else None."""
        if len(source_shape) != len(model_shape):
            return None
        if any(s != m for axis, (s, m) in enumerate(zip(source_shape, model_shape)) if axis not in self.axes):
            return None
        source_counts = {self.count(source_shape[axis]) for axis in self.axes}
        model_counts = {self.count(model_shape[axis]) for axis in self.axes}
        if len(source_counts) != 1 or len(model_counts) != 1 or None in source_counts | model_counts:
            return None
        return source_counts.pop(), model_counts.pop()

    def indices(self, c, count):
        """The entries of class `c` along the count axis of a blob for `count` classes (empty below `first`)."""
        if c < self.first:
            return np.zeros(0, dtype=np.int64)
        block = (count - self.first) * self.unit
        offsets = np.arange(self.groups)[:, None] * block + (c - self.first) * self.unit + np.arange(self.unit)
        return offsets.ravel()


def _weight_and_bias(prefix, weight):
    """{prefix_w: weight's layout, prefix_b: the bias's (the weight's blocks along axis 0)}."""
    return {f"{prefix}_w": weight, f"{prefix}_b": dataclasses.replace(weight, axes=(0,))}


def count_layouts(cfg):
    """{blob name: CountLayout} of the config's blobs whose shape follows NUM_CLASSES or NUM_KEYPOINTS, or would
    with a class-specific head."""
    layouts = {}
    if cfg.MODEL.TYPE == "retinanet":
        retina, level = cfg.RETINANET, cfg.FPN.RPN_MIN_LEVEL
        first = 0 if retina.SOFTMAX else 1  # sigmoid: no background channel
        classes = CountLayout(CLASSES, groups=num_anchors(cfg), first=first)
        layouts.update(_weight_and_bias(f"retnet_cls_pred_fpn{level}", classes))
        box = CountLayout(CLASSES, unit=4, groups=num_anchors(cfg), first=1, agnostic_count=2,
                          model_agnostic=not retina.CLASS_SPECIFIC_BBOX)  # fmt: skip
        layouts.update(_weight_and_bias(f"retnet_bbox_pred_fpn{level}", box))
        return layouts
    layouts.update(_weight_and_bias("cls_score", CountLayout(CLASSES)))
    box = CountLayout(CLASSES, unit=4, agnostic_count=2, model_agnostic=cfg.MODEL.CLS_AGNOSTIC_BBOX_REG)
    layouts.update(_weight_and_bias("bbox_pred", box))
    if cfg.MODEL.MASK_ON:
        mrcnn = cfg.MRCNN
        unit = mrcnn.RESOLUTION**2 if mrcnn.USE_FC_OUTPUT else 1  # FC rows are (class, y, x)
        mask = CountLayout(CLASSES, unit=unit, agnostic_count=1, model_agnostic=not mrcnn.CLS_SPECIFIC_MASK)
        layouts.update(_weight_and_bias("mask_fcn_logits", mask))
        if mrcnn.UPSAMPLE_RATIO > 1 and not mrcnn.USE_FC_OUTPUT:
            bilinear = dataclasses.replace(mask, axes=(0, 1), copyable=False)
            layouts.update(_weight_and_bias("mask_fcn_logits_up", bilinear))
    if cfg.MODEL.KEYPOINTS_ON:
        krcnn = cfg.KRCNN
        upsample = krcnn.UP_SCALE > 1
        # ConvTranspose weights are (in, out, kh, kw) in Caffe2, convs (out, in, kh, kw)
        predictor = CountLayout(KEYPOINTS, axes=(1,) if krcnn.USE_DECONV_OUTPUT else (0,), copyable=False)
        layouts.update(_weight_and_bias("kps_score_lowres" if upsample else "kps_score", predictor))
        if upsample:
            layouts.update(_weight_and_bias("kps_score", CountLayout(KEYPOINTS, axes=(0, 1), copyable=False)))
    return layouts


def _fold(name):
    return " ".join(str(name).split()).casefold()


def same_name_classes(source_names, model_names):
    """[(source class, model class, name)] of the model's classes whose (folded) name the source has once."""
    folded = [_fold(name) for name in source_names]
    index = {name: c for c, name in enumerate(folded) if folded.count(name) == 1}
    return [(index[_fold(name)], c, name) for c, name in enumerate(model_names) if _fold(name) in index]


def _shape(array):
    return tuple(int(d) for d in np.shape(array))


def _copy_rows(layout, source, model, pairs, source_count, model_count):
    """`model` (a copy) with the entries of model class c taken from source class s, for each (s, c, name) pair."""
    value = np.array(model, copy=True)
    axis = layout.axes[0]
    target, origin = np.moveaxis(value, axis, 0), np.moveaxis(np.asarray(source), axis, 0)
    for s, c, _ in pairs:
        target[layout.indices(c, model_count)] = origin[layout.indices(s, source_count)]
    return value


def _pairs_text(pairs):
    return ", ".join(f"{n!r} {s}->{c}" for s, c, n in pairs) or "none"


@dataclasses.dataclass
class ClassTransfer:
    """Fine-tuning a model (count layouts of its config, its class names or None) from weights of other classes;
    `lines` says what `resolve` did."""

    layouts: dict
    class_names: tuple | None = None
    lines: list = dataclasses.field(default_factory=list)

    @classmethod
    def for_config(cls, cfg, class_names=None):
        return cls(count_layouts(cfg), tuple(class_names) if class_names else None)

    def source_num_classes(self, shapes):
        """The class count of a source given its {blob name: Caffe2 shape}, from its first class blob; None
        when it has none of this config's class blobs."""
        for name, layout in self.layouts.items():
            if layout.family == CLASSES and name in shapes:
                return layout.count(shapes[name][layout.axes[0]])
        return None

    def resolve(self, blobs, source_names=None):
        """New Caffe2-layout values for `blobs` {name: (source value, model value)}, every blob with a layout here
        that both models hold (equal shapes included; others may be given and are refused when their shapes
        differ). Returns ({name: value} of the blobs that do not load as the source has them, [names refused])
        and appends its lines (see the module)."""
        shapes = {name: _shape(source) for name, (source, _) in blobs.items()}
        expected = {CLASSES: self.source_num_classes(shapes), KEYPOINTS: self._keypoint_count(blobs)}
        resolved, refused, same_count = {}, [], {}
        for name, (source, model) in blobs.items():
            layout = self.layouts.get(name)
            found = layout.counts(_shape(source), _shape(model)) if layout else None
            if found is None:
                refused += [name] if _shape(source) != _shape(model) else []
            elif self._agnostic(layout, found[0], expected[CLASSES]):
                if found[0] != found[1]:
                    resolved[name] = self._keep(name, source, model, layout.model_agnostic)
            elif found[0] != expected[layout.family]:
                refused.append(name)  # another count than the source's other blobs: not a class-count change
            elif found[0] != found[1]:
                resolved[name] = self._new_value(name, source, model, *found, source_names)
            elif layout.family == CLASSES and layout.copyable:
                same_count[name] = (source, model)
        resolved.update(self._by_name(same_count, source_names, expected[CLASSES]))
        return resolved, refused

    def _keypoint_count(self, blobs):
        """The source's keypoint count when its keypoint blobs agree on one, else None."""
        counts = set()
        for name, (source, model) in blobs.items():
            layout = self.layouts.get(name)
            if layout is not None and layout.family == KEYPOINTS:
                found = layout.counts(_shape(source), _shape(model))
                counts |= {found[0]} if found else set()
        return counts.pop() if len(counts) == 1 else None

    @staticmethod
    def _agnostic(layout, source_count, source_classes):
        """Whether the model's or the source's head of this blob is class-agnostic."""
        if layout.agnostic_count is None:
            return False
        return layout.model_agnostic or source_count == layout.agnostic_count != source_classes

    def _keep(self, name, source, model, model_agnostic):
        """The model's value of a blob class-specific on one side, class-agnostic on the other; one line."""
        kinds = ("class-specific", "class-agnostic")[:: 1 if model_agnostic else -1]
        self.lines.append(
            f"re-initialised {name}: source {_shape(source)}, model {_shape(model)} ({kinds[0]} source, "
            f"{kinds[1]} model: the model's initialisation kept)"
        )
        return np.array(model, copy=True)

    def _new_value(self, name, source, model, source_count, model_count, source_names):
        """The model's value of a blob of another count, but for the same-name classes' entries; one line."""
        layout = self.layouts[name]
        value = np.array(model, copy=True)
        line = (
            f"re-initialised {name}: source {_shape(source)}, model {_shape(model)} "
            f"({source_count} -> {model_count} {layout.family})"
        )
        if layout.copyable:
            pairs, why_none = self._pairs(source_names, source_count, model_count, layout.first)
            if pairs:
                value = _copy_rows(layout, source, model, pairs, source_count, model_count)
                line += f"; copied from same-name source classes: {_pairs_text(pairs)}"
            else:
                line += f"; no rows copied: {why_none}"
        self.lines.append(line)
        return value

    def _by_name(self, blobs, source_names, count):
        """The class blobs of equal counts on both sides: {name: value} with same-name rows moved to their model
        index and the other classes' rows the model's; nothing when the names are unknown (rows by index) or the
        source's in its order. One line for all the blobs."""
        if not blobs:
            return {}
        where = f"{', '.join(blobs)} ({count} classes on both sides)"
        unknown = self._unknown_names(source_names, count, count)
        if unknown:
            self.lines.append(f"class rows copied by index in {where}: {unknown}")
            return {}
        first = min(self.layouts[name].first for name in blobs)
        pairs, _ = self._pairs(source_names, count, count, first)
        if len(pairs) == count - first and all(s == c for s, c, _ in pairs):
            self.lines.append(f"class rows loaded as they are in {where}: the classes are the source's, in its order")
            return {}
        matched = {c for _, c, _ in pairs}
        fresh = ", ".join(f"{n!r} {c}" for c, n in enumerate(self.class_names) if c >= first and c not in matched)
        self.lines.append(
            f"classes matched by name in {where}: copied from same-name source classes: {_pairs_text(pairs)}; "
            f"re-initialised (the model's initialisation): {fresh or 'none'}"
        )
        values = {}
        for name, (source, model) in blobs.items():
            layout = self.layouts[name]
            usable = [(s, c, n) for s, c, n in pairs if min(s, c) >= layout.first]
            values[name] = _copy_rows(layout, source, model, usable, count, count)
        return values

    def _unknown_names(self, source_names, source_count, model_count):
        """Why names cannot match classes (a side's names unknown, or not one a class), or None."""
        if not source_names or len(source_names) != source_count:
            return "the source's class names are unknown"
        if not self.class_names or len(self.class_names) != model_count:
            return "the model's class names are unknown"
        return None

    def _pairs(self, source_names, source_count, model_count, first):
        """(same-name (source class, model class, name) pairs with entries in the blob, why there are none)."""
        unknown = self._unknown_names(source_names, source_count, model_count)
        if unknown:
            return [], unknown
        pairs = [(s, c, name) for s, c, name in same_name_classes(source_names, self.class_names) if min(s, c) >= first]
        return pairs, "no class name in common"
