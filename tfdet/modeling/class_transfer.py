"""Fine-tuning to other classes: the blobs whose shape follows the class (or keypoint) count, and their values
when the initial weights come from a model with another count.

`count_layouts(cfg)` says where each such blob of the config's model holds its classes, in Caffe2 layout
(`tfdet.modeling.detectron_names`): `cls_score` rows, class-specific `bbox_pred` (4 rows a class),
class-specific `mask_fcn_logits` (a channel, or RESOLUTION^2 rows of the FC output) and its fixed bilinear
upsampling, RetinaNet's `retnet_cls_pred` (anchor-major: channel a * C + c, as Detectron's test_retinanet
reshapes it) and class-specific `retnet_bbox_pred`; the keypoint predictor (`kps_score*`) follows
KRCNN.NUM_KEYPOINTS. Class-agnostic heads have the same shape for any count and load as they are.

`ClassTransfer.resolve` takes the blobs whose source and model shapes differ. One that differs only along its
count axes, with one source count per family (classes, keypoints), keeps the model's value: the builders draw it
from Detectron's initialisers (cls_score N(0, 0.01), bbox_pred N(0, 0.001), mask logits MRCNN.CONV_INIT,
RetinaNet's prior-probability bias, zero biases). Where both models' class names are known, the entries of a
model class whose name the source has too (background included: "__background__" is class 0 of both) are
copied from the source. Names match with case and surrounding or repeated whitespace ignored ("Traffic  Light"
is COCO's "traffic light"); a name the source holds twice (after that folding) is not used. Every other
mismatch is left for the caller to refuse. Each re-initialised blob gets one line in `lines`.
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
    kernels, keypoints)."""

    family: str
    axes: tuple = (0,)
    unit: int = 1
    groups: int = 1
    first: int = 0
    copyable: bool = True

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
    """{blob name: CountLayout} of the config's blobs whose shape follows NUM_CLASSES or NUM_KEYPOINTS."""
    layouts = {}
    if cfg.MODEL.TYPE == "retinanet":
        retina, level = cfg.RETINANET, cfg.FPN.RPN_MIN_LEVEL
        first = 0 if retina.SOFTMAX else 1  # sigmoid: no background channel
        classes = CountLayout(CLASSES, groups=num_anchors(cfg), first=first)
        layouts.update(_weight_and_bias(f"retnet_cls_pred_fpn{level}", classes))
        if retina.CLASS_SPECIFIC_BBOX:
            box = CountLayout(CLASSES, unit=4, groups=num_anchors(cfg), first=1)
            layouts.update(_weight_and_bias(f"retnet_bbox_pred_fpn{level}", box))
        return layouts
    layouts.update(_weight_and_bias("cls_score", CountLayout(CLASSES)))
    if not cfg.MODEL.CLS_AGNOSTIC_BBOX_REG:
        layouts.update(_weight_and_bias("bbox_pred", CountLayout(CLASSES, unit=4)))
    if cfg.MODEL.MASK_ON and cfg.MRCNN.CLS_SPECIFIC_MASK:
        unit = cfg.MRCNN.RESOLUTION**2 if cfg.MRCNN.USE_FC_OUTPUT else 1  # FC rows are (class, y, x)
        layouts.update(_weight_and_bias("mask_fcn_logits", CountLayout(CLASSES, unit=unit)))
        if cfg.MRCNN.UPSAMPLE_RATIO > 1 and not cfg.MRCNN.USE_FC_OUTPUT:
            bilinear = CountLayout(CLASSES, axes=(0, 1), copyable=False)
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


@dataclasses.dataclass
class ClassTransfer:
    """Fine-tuning a model (count layouts of its config, its class names or None) from weights of other classes;
    `lines` says what `resolve` did, one line per re-initialised blob."""

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

    def resolve(self, mismatches, source_names=None):
        """New Caffe2-layout values of the count blobs among `mismatches` {name: (source value, model value)};
        returns ({name: value}, [names left mismatched]) and appends one line per re-initialised blob."""
        counts = {}
        for name, (source, model) in mismatches.items():
            layout = self.layouts.get(name)
            found = layout.counts(_shape(source), _shape(model)) if layout else None
            if found:
                counts[name] = found
        # one source count per family: blobs that disagree with one another are not a class-count change
        families = {}
        for name, (source_count, _) in counts.items():
            families.setdefault(self.layouts[name].family, set()).add(source_count)
        resolved = {
            name: self._new_value(name, *mismatches[name], *found, source_names)
            for name, found in counts.items()
            if len(families[self.layouts[name].family]) == 1
        }
        return resolved, [name for name in mismatches if name not in resolved]

    def _new_value(self, name, source, model, source_count, model_count, source_names):
        layout = self.layouts[name]
        value = np.array(model, copy=True)
        line = (
            f"re-initialised {name}: source {_shape(source)}, model {_shape(model)} "
            f"({source_count} -> {model_count} {layout.family})"
        )
        if layout.copyable:
            pairs, why_none = self._pairs(source_names, source_count, model_count, layout.first)
            if pairs:
                axis = layout.axes[0]
                target, origin = np.moveaxis(value, axis, 0), np.moveaxis(np.asarray(source), axis, 0)
                for s, c, _ in pairs:
                    target[layout.indices(c, model_count)] = origin[layout.indices(s, source_count)]
                line += "; copied from same-name source classes: " + ", ".join(f"{n!r} {s}->{c}" for s, c, n in pairs)
            else:
                line += f"; no rows copied: {why_none}"
        self.lines.append(line)
        return value

    def _pairs(self, source_names, source_count, model_count, first):
        """(same-name (source class, model class, name) pairs with entries in the blob, why there are none)."""
        if not source_names or len(source_names) != source_count:
            return [], "the source's class names are unknown"
        if not self.class_names or len(self.class_names) != model_count:
            return [], "the model's class names are unknown"
        pairs = [(s, c, name) for s, c, name in same_name_classes(source_names, self.class_names) if min(s, c) >= first]
        return pairs, "no class name in common"
