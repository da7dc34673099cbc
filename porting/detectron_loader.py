"""Detectron blobs -> a built tfdet model's Keras variables, with a report of what was done.

Each Keras variable has one Detectron blob name and layout rule (`tfdet.modeling.detectron_names`).
A variable takes the blob of its name; when that is absent and the name carries a `_[tag]_`
prefix, it takes the un-prefixed blob (Detectron's `]_` rule). Blobs that are in Detectron files
for other reasons are ignored on purpose and listed; missing blobs and shape mismatches make the
report fail (`allow_missing` accepts missing ones, for ImageNet backbone files). A trained file's saved
config is checked against the model's (`porting.config_checks`): a contradiction refuses the port, or,
with `allow_missing` (the file only initialises a model that will be trained), is warned about. Fine-tuning to
other classes (`class_transfer`, a `tfdet.modeling.class_transfer.ClassTransfer`) re-initialises the blobs whose
shape follows the class or keypoint count, copying the rows of same-name classes (an 81-class file has COCO's).
"""

import dataclasses
import re
import warnings

import numpy as np
from tqdm import tqdm

from porting.config_checks import check_saved_cfg, conflict_error, is_retinanet, unused_head_conflicts
from porting.embedded_cfg import bbox_reg_weights_from_cfg
from porting.pickle_reader import read_weight_file
from tfdet.data.coco_classes import model_categories
from tfdet.modeling.detectron_names import model_blobs
from tfdet.modeling.domain_adaptation import is_domain_classifier_blob

_ZERO_CONV_BIAS = re.compile(r"^(conv1|res\d+_\d+_branch(1|2a|2b|2c))_b$")


def ignore_reason(name):
    """Why Detectron files carry a blob no tfdet variable takes, or None for blobs that matter."""
    if name.endswith("_momentum"):
        return "SGD momentum (optimizer state)"
    if name in ("lr", "weight_order"):
        return "training metadata (learning rate, blob order)"
    if name.startswith(("fc1000_", "pred_")):
        return "ImageNet classifier"
    if _ZERO_CONV_BIAS.match(name):
        return "zero conv bias added by Caffe2's converter (Detectron's convs before a norm have none)"
    if is_domain_classifier_blob(name):
        return "DA domain classifier (training only: detections do not depend on it)"
    return None


def _extra_reason(name):
    """Why a non-array value of the file (`WeightFile.extras`) is left aside: a blob no variable could take
    from it would be reported missing."""
    return ignore_reason(name) or "not a numeric array (training metadata; no variable can hold it)"


@dataclasses.dataclass
class PortReport:
    """What a port did: loaded, ignored (with why), missing, mismatched and unused blobs, and the file's
    fields checked against the config (equal, or in conflict)."""

    path: str
    loaded: list = dataclasses.field(default_factory=list)  # (blob, caffe2 shape, source blob)
    ignored: list = dataclasses.field(default_factory=list)  # (blob, reason)
    missing: list = dataclasses.field(default_factory=list)  # (blob, expected caffe2 shape)
    mismatched: list = dataclasses.field(default_factory=list)  # (blob, expected, found)
    unused: list = dataclasses.field(default_factory=list)  # blobs of the file no variable took
    checked: list = dataclasses.field(default_factory=list)  # (field, how it agrees with the config)
    reinitialised: list = dataclasses.field(default_factory=list)  # one line per blob of another class count
    conflicts: list = dataclasses.field(default_factory=list)  # (field, how it contradicts the config, remedy)
    bbox_reg_weights: tuple = (10.0, 10.0, 5.0, 5.0)
    # file arrays no variable took, momentum excepted, kept for re-saving as Detectron's
    # `__preserve__/` blobs are (initialize_gpu_from_weights_file)
    preserved: dict = dataclasses.field(default_factory=dict, repr=False)

    @property
    def ok(self):
        return not self.missing and not self.mismatched and not self.conflicts

    def format(self):
        """A human-readable report, one line per problem, counts for the rest."""
        lines = [f"{self.path}: loaded {len(self.loaded)} blobs ({sum(int(np.prod(s)) for _, s, _ in self.loaded) / 1e6:.2f} M values)"]
        fallbacks = [(b, src) for b, _, src in self.loaded if src != b]
        lines += [f"  loaded {b} from {src} (Detectron's ']_' rule)" for b, src in fallbacks]
        lines += [f"  {line}" for line in self.reinitialised]
        lines.append(f"  ignored {len(self.ignored)} blobs on purpose:")
        lines += _grouped(self.ignored)
        if self.checked:
            lines.append(f"  checked {len(self.checked)} fields against the config:")
            lines += _grouped(self.checked)
        lines += [f"  CONFLICT {field} {detail}; {remedy}" for field, detail, remedy in self.conflicts]
        lines += [f"  MISSING {b}: expected shape {s}" for b, s in self.missing]
        lines += [f"  SHAPE MISMATCH {b}: model expects {e}, file has {f}" for b, e, f in self.mismatched]
        if self.unused:
            lines.append(f"  unused (kept, not loaded): {', '.join(self.unused)}")
        lines.append(f"  preserved {len(self.preserved)} unused blobs for re-saving")
        return "\n".join(lines)


def _grouped(entries):
    """Report lines for (name, reason) entries: one line per reason, its count and first names."""
    reasons = {}
    for name, reason in entries:
        reasons.setdefault(reason, []).append(name)
    return [f"    {len(names)} x {reason}: {', '.join(names[:4])}{' ...' if len(names) > 4 else ''}" for reason, names in reasons.items()]


def _source_blob(name, blobs):
    """The file blob a variable named `name` takes: itself, or without its `_[tag]_` prefix."""
    if name in blobs:
        return name
    if "]_" in name:
        stripped = name[name.index("]_") + 2 :]
        if stripped in blobs:
            return stripped
    return None


def match_blobs(model, blobs, report, mask_head="", progress=False):
    """Fill `report` with which blob each variable of the model takes; returns the (variable, value)
    assignments, none made yet. `progress` shows a bar on stderr."""
    used = set()
    assignments = []
    variables = list(model_blobs(model, mask_head))
    for name, variable, to_caffe2, to_keras in tqdm(variables, desc="porting", unit="blob", disable=not progress):
        expected = tuple(to_caffe2(np.broadcast_to(np.float32(0), variable.shape)).shape)
        source = _source_blob(name, blobs)
        if source is None:
            report.missing.append((name, expected))
            continue
        used.add(source)
        found = tuple(np.shape(blobs[source]))
        if found != expected:
            report.mismatched.append((name, expected, found))
            continue
        assignments.append((variable, to_keras(np.asarray(blobs[source]))))
        report.loaded.append((name, expected, source))
    for name in sorted(set(blobs) - used):
        reason = ignore_reason(name)
        if reason:
            report.ignored.append((name, reason))
        else:
            report.unused.append(name)
        if not name.endswith("_momentum"):
            report.preserved[name] = np.asarray(blobs[name])
    return assignments


def _assign(assignments):
    for variable, value in assignments:
        variable.assign(value.astype(variable.dtype, copy=False))


def port_blobs(model, blobs, path="<blobs>", mask_head="", allow_missing=False, progress=False):
    """Assign `blobs` (Detectron names, Caffe2 layouts) to the model's variables; returns a PortReport.

    Nothing is assigned unless every blob found has the right shape and, without `allow_missing`,
    none is missing: a failed port leaves the model as it was. `progress` shows a bar on stderr.
    """
    report = PortReport(path=str(path))
    assignments = match_blobs(model, blobs, report, mask_head, progress)
    if not report.mismatched and (allow_missing or not report.missing):
        _assign(assignments)
    return report


def finish_port(report, assignments, path, allow_missing=False):
    """Make the assignments of a matched port, or raise ValueError and assign nothing.

    Shape mismatches refuse the port (the report in the message), so do missing blobs and conflicts with
    the config (in one line) unless `allow_missing`: then the file only initialises a model that will be
    trained, and the conflicts are warned about in that line.
    """
    if report.mismatched or (report.missing and not allow_missing):
        raise ValueError(f"Cannot load {path} into this model:\n{report.format()}")
    if report.conflicts and not allow_missing:
        raise ValueError(conflict_error(report.conflicts, path))
    if report.conflicts:
        warnings.warn(f"{conflict_error(report.conflicts, path)} (accepted: allow_missing, the file only initialises the model)")
    _assign(assignments)


def load_detectron_weights(model, cfg, path, allow_missing=False, progress=False, class_transfer=None):
    """Load a Detectron `.pkl` into `model` (built from `cfg`); returns the PortReport.

    Raises ValueError with the report when blobs are missing (unless `allow_missing`) or have the
    wrong shape, and in one line when the file's saved cfg contradicts `cfg` in a key that decides
    what the weights compute (`porting.config_checks`; a warning with `allow_missing`); then no
    variable is changed. The file's own cfg decides the box regression weights, as Detectron's
    `configure_bbox_reg_weights` does (files from before the key existed were trained with
    (1, 1, 1, 1)); a difference from `cfg` is warned about and the model's detection layer uses the
    file's weights. RetinaNet decodes with (1, 1, 1, 1) whatever the key says (test_retinanet): its
    report keeps the config's value. A RetinaNet config's unused tower or level blobs refuse the port too
    (`porting.config_checks.unused_head_conflicts`). With `class_transfer` (fine-tuning), blobs that differ
    only in their class or keypoint count are re-initialised instead of refused (`transfer_classes`).
    """
    return port_weight_file(model, cfg, read_weight_file(path), path, allow_missing, progress, class_transfer)


def port_weight_file(model, cfg, weight_file, path, allow_missing=False, progress=False, class_transfer=None):
    """`load_detectron_weights` for the file at `path` already read (`porting.read_weight_file`)."""
    report = PortReport(path=str(path))
    assignments = match_blobs(model, weight_file.blobs, report, cfg.MRCNN.ROI_MASK_HEAD, progress)
    if class_transfer is not None:
        transferred = transfer_classes(model, weight_file.blobs, report, class_transfer, cfg.MRCNN.ROI_MASK_HEAD)
        replaced = {id(variable) for variable, _ in transferred}
        assignments = [entry for entry in assignments if id(entry[0]) not in replaced] + transferred
    report.ignored += [(name, _extra_reason(name)) for name in sorted(weight_file.extras)]
    saved_cfg = None if weight_file.cfg_text is None else weight_file.cfg()
    if saved_cfg is not None:
        checked, conflicts = check_saved_cfg(saved_cfg, cfg)
        report.checked += checked
        report.conflicts += conflicts
    report.conflicts += unused_head_conflicts(report.unused, cfg)
    finish_port(report, assignments, path, allow_missing)
    if is_retinanet(cfg):  # Detectron's RetinaNet decodes with (1, 1, 1, 1), whatever the key says
        report.bbox_reg_weights = tuple(cfg.MODEL.BBOX_REG_WEIGHTS)
    elif saved_cfg is not None:
        report.bbox_reg_weights = bbox_reg_weights_from_cfg(saved_cfg)
        _apply_bbox_reg_weights(model, cfg, report.bbox_reg_weights, path)
    return report


def transfer_classes(model, blobs, report, class_transfer, mask_head=""):
    """Class transfer (`tfdet.modeling.class_transfer`) of the count blobs both the file and the model hold, equal
    shapes included: returns the assignments of those it gives new values (which replace the file's), removes them
    from `report.mismatched` and adds its lines to `report.reinitialised`. The file's class names are known for the
    class counts `tfdet.data.coco_classes.model_categories` names (81: COCO's)."""
    variables = {name: entry for name, *entry in model_blobs(model, mask_head)}
    counted = {}
    for name in class_transfer.layouts:
        source = _source_blob(name, blobs)
        if name in variables and source is not None:
            variable, to_caffe2, _ = variables[name]
            counted[name] = (np.asarray(blobs[source]), to_caffe2(np.asarray(variable.numpy())))
    num_classes = class_transfer.source_num_classes({name: np.shape(value) for name, value in blobs.items()})
    keypoints_on = any(name.startswith("kps_score") for name in blobs)
    source_names = model_categories(num_classes, keypoints_on).names if num_classes else None
    first_line = len(class_transfer.lines)
    values, _ = class_transfer.resolve(counted, source_names)
    report.mismatched = [entry for entry in report.mismatched if entry[0] not in values]
    report.reinitialised += class_transfer.lines[first_line:]
    return [(variables[name][0], variables[name][2](value)) for name, value in values.items()]


def _apply_bbox_reg_weights(model, cfg, weights, path):
    """Use the file's box regression weights in the model's detection layer, warning on a change."""
    if tuple(weights) == tuple(cfg.MODEL.BBOX_REG_WEIGHTS):
        return
    warnings.warn(
        f"{path} was trained with MODEL.BBOX_REG_WEIGHTS {tuple(weights)}, the config says "
        f"{tuple(cfg.MODEL.BBOX_REG_WEIGHTS)}: using the file's (Detectron's configure_bbox_reg_weights)"
    )
    for layer in model.layers:
        if hasattr(layer, "bbox_reg_weights"):
            layer.bbox_reg_weights = tuple(float(w) for w in weights)
