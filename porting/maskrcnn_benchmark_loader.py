"""maskrcnn-benchmark ``.pth`` checkpoints -> a built tfdet model, through the Detectron port.

The checkpoint (``{'model': state_dict, 'optimizer', 'scheduler', 'iteration'}`` as
maskrcnn-benchmark's ``Checkpointer.save`` writes it, or a bare state dict, ``module.`` prefixes of
DataParallel stripped) is read without torch (``porting.pth_reader``), its keys renamed to
Detectron blobs (``porting.maskrcnn_benchmark_names``) and the blobs handed to ``port_blobs``, so the
report, shape checks and all-or-nothing assignment are those of Detectron files. No layout change
is needed: torch's Conv2d (O, I, kh, kw), ConvTranspose2d (I, O, kh, kw) and Linear (out, in) are
Caffe2's, and both flatten RoI features in (C, H, W) order before fc6.

The RPN's ``cell_anchors`` buffers change no variable but decide what the RPN's weights mean: they are
compared with the anchors tfdet makes from the config (``porting.config_checks``), and a difference
refuses the port as a missing blob does.

A RetinaNet checkpoint's anchors are matched with the config's RetinaNet anchors in any order, and its
prediction layers are converted to Detectron's anchor order and box coding
(``porting.maskrcnn_benchmark_retinanet``; each conversion is listed in the report). Its post-processing is
not ported: the model runs Detectron's RetinaNet inference, as the report says.

Two things Detectron files have and these checkpoints do not:

* ``FrozenBatchNorm2d`` carries ``running_mean`` / ``running_var`` next to ``weight`` / ``bias`` and
  computes ``scale = weight * rsqrt(running_var)``, ``bias - running_mean * scale`` (no eps,
  ``maskrcnn_benchmark/layers/batch_norm.py``). They are folded into AffineChannel's ``_bn_s`` /
  ``_bn_b`` exactly so (a no-op for the mean 0 / var 1 of Caffe2-initialised models).
* The keypoint predictor upsamples its ``kps_score_lowres`` logits with
  ``F.interpolate(scale_factor=2, mode='bilinear', align_corners=False)`` instead of Detectron's
  fixed bilinear ``kps_score`` deconvolution, so ``kps_score`` gets Detectron's bilinear kernel.
  The two agree inside the heatmap; on its one-pixel border the deconvolution sees zero padding.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from porting.config_checks import check_cell_anchors, is_retinanet, retinanet_anchor_order, unused_head_conflicts
from porting.detectron_loader import PortReport, finish_port, match_blobs
from porting.maskrcnn_benchmark_names import detectron_blob_names
from porting.maskrcnn_benchmark_retinanet import INFERENCE_NOTE, check_p6_input, convert_predictions
from porting.pickle_reader import WeightFileError
from porting.pth_reader import read_pth
from tfdet.layers.bilinear_upsample import bilinear_kernel
from tfdet.modeling.detectron_names import model_blobs

_CHECKPOINT_ENTRIES = {
    "optimizer": "optimizer state (momentum buffers, learning rates), not model weights",
    "scheduler": "learning-rate scheduler state, not model weights",
}
_DATA_PARALLEL_PREFIX = "module."


@dataclasses.dataclass
class BenchmarkPortReport(PortReport):
    """A PortReport plus the checkpoint's training iteration, blobs the checkpoint cannot hold, blobs converted
    to Detectron's conventions and what of the checkpoint's model is not ported."""

    iteration: int | None = None
    filled: list = dataclasses.field(default_factory=list)  # (blob, how its value was made)
    converted: list = dataclasses.field(default_factory=list)  # (blob, how its value was converted)
    notes: list = dataclasses.field(default_factory=list)  # what the port does not carry over

    def format(self):
        lines = [super().format()]
        if self.iteration is not None:
            lines.append(f"  checkpoint saved at iteration {self.iteration}")
        lines += [f"  filled {blob}: {how}" for blob, how in self.filled]
        lines += [f"  converted {blob}: {how}" for blob, how in self.converted]
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)


def _iteration(value):
    """The training iteration as an int, when the entry is a whole number."""
    array = np.asarray(value)
    if array.size == 1 and array.dtype.kind in "iu":
        return int(array.reshape(()))
    return None


def split_checkpoint(checkpoint):
    """(state dict without `module.` prefixes, [(entry, why it is ignored)], iteration or None)."""
    ignored, iteration = [], None
    if isinstance(checkpoint.get("model"), dict):
        state = checkpoint["model"]
        for name, value in checkpoint.items():
            if name == "model":
                continue
            if name == "iteration" and (iteration := _iteration(value)) is not None:
                ignored.append((name, f"training progress (iteration {iteration})"))
            else:
                reason = _CHECKPOINT_ENTRIES.get(name, "checkpoint entry other than the model's state dict")
                ignored.append((str(name), reason))
    else:
        state = checkpoint
    state = {str(k): v for k, v in state.items()}
    if state and all(k.startswith(_DATA_PARALLEL_PREFIX) for k in state):
        state = {k[len(_DATA_PARALLEL_PREFIX) :]: v for k, v in state.items()}
    tensors = {k: v for k, v in state.items() if isinstance(v, np.ndarray)}
    ignored += [(k, "not a tensor") for k in state if k not in tensors]
    return tensors, ignored, iteration


def fold_frozen_batch_norm(weight, bias, running_mean, running_var):
    """AffineChannel (scale, bias) computing what maskrcnn-benchmark's FrozenBatchNorm2d computes."""
    scale = np.asarray(weight, np.float64) / np.sqrt(np.asarray(running_var, np.float64))
    shifted = np.asarray(bias, np.float64) - np.asarray(running_mean, np.float64) * scale
    return scale.astype(np.float32), shifted.astype(np.float32)


def benchmark_blobs(state, path="<state dict>"):
    """(Detectron blobs of a maskrcnn-benchmark state dict, BlobNames): frozen BN folded, shared keys checked.

    Raises ValueError when two keys that give the same Detectron blob hold different values
    (a C4 mask head with its own res5, which tfdet's Detectron-style C4 mask head cannot hold), and
    when a FrozenBatchNorm2d module lacks a parameter (its statistics could not be folded).
    """
    names = detectron_blob_names(state)
    blobs = {}
    for blob, key in names.blobs.items():
        value = state[key]
        blobs[blob] = value.astype(np.float32) if value.dtype.kind == "f" else value
    for affine, module in names.frozen_bn.items():
        parts = ("weight", "bias", "running_mean", "running_var")
        params = [state.get(f"{module}.{p}") for p in parts]
        if any(p is None for p in params):
            absent = ", ".join(f"{module}.{part}" for part, p in zip(parts, params) if p is None)
            raise ValueError(f"{path}: FrozenBatchNorm2d {module} lacks {absent}: its statistics cannot be folded")
        if len({p.shape for p in params}) != 1:
            raise WeightFileError(f"{path}: FrozenBatchNorm2d {module} has parameters of different shapes")
        blobs[f"{affine}_s"], blobs[f"{affine}_b"] = fold_frozen_batch_norm(*params)
    for key, kept in names.shared.items():
        if not np.array_equal(state[key], state[kept]):
            raise ValueError(
                f"{path}: {key} differs from {kept} (the same Detectron blob): the checkpoint's mask head "
                "has its own res5 (SHARE_BOX_FEATURE_EXTRACTOR False); tfdet's C4 mask head shares the box "
                "head's res5, as Detectron's does"
            )
        names.ignored[key] = f"same values as {kept} (one module shared by two heads)"
    return blobs, names


def _fixed_bilinear_blobs(model, mask_head, blobs):
    """{blob: (value, how it was made)}: Detectron's fixed `kps_score` upsampling for a keypoint checkpoint."""
    if "kps_score_lowres_w" not in blobs:
        return {}
    absent = "absent from maskrcnn-benchmark checkpoints (F.interpolate upsampling): "
    filled = {}
    for name, variable, to_caffe2, _ in model_blobs(model, mask_head):
        if name == "kps_score_w" and name not in blobs:
            size, _, _, channels = variable.shape
            kernel = to_caffe2(bilinear_kernel(channels, size // 2))
            filled[name] = (kernel, absent + "Detectron's fixed bilinear kernel")
        elif name == "kps_score_b" and name not in blobs:
            filled[name] = (np.zeros(variable.shape, np.float32), absent + "zeros, as Detectron's")
    return filled


def load_maskrcnn_benchmark_weights(model, cfg, path, allow_missing=False, progress=False):
    """Load a maskrcnn-benchmark `.pth` into `model` (built from `cfg`); returns a BenchmarkPortReport.

    Raises ValueError with the report when blobs are missing (unless `allow_missing`) or have the
    wrong shape, as `load_detectron_weights` does, and in one line when the checkpoint's RPN anchors are
    not the config's, or a RetinaNet checkpoint's anchors not the config's in some order or its towers or
    levels more than the config's (a warning with `allow_missing`); then no variable is changed; also when
    a RetinaNet checkpoint's P6 takes P5. WeightFileError
    (UnsafeWeightFileError) when the file cannot be read safely. Checkpoints carry no config: the
    box regression weights are `cfg`'s. `progress` shows a bar on stderr.
    """
    state, ignored, iteration = split_checkpoint(read_pth(path))
    blobs, names = benchmark_blobs(state, path)
    mask_head = cfg.MRCNN.ROI_MASK_HEAD
    filled = _fixed_bilinear_blobs(model, mask_head, blobs)
    blobs.update({blob: value for blob, (value, _) in filled.items()})
    report = BenchmarkPortReport(
        path=str(path), iteration=iteration, filled=[(blob, how) for blob, (_, how) in sorted(filled.items())]
    )
    anchors = {key: state[key] for key in names.anchors}
    if names.retinanet and is_retinanet(cfg):
        check_p6_input(state, path)
        order, report.checked, report.conflicts = retinanet_anchor_order(anchors, cfg)
        report.converted = convert_predictions(blobs, order, cfg)
        report.notes.append(INFERENCE_NOTE)
    else:
        report.checked, report.conflicts = check_cell_anchors(anchors, cfg)
    assignments = match_blobs(model, blobs, report, mask_head, progress)
    report.ignored += ignored + sorted(names.ignored.items())
    report.unused += names.unknown
    report.bbox_reg_weights = tuple(cfg.MODEL.BBOX_REG_WEIGHTS)
    report.conflicts += unused_head_conflicts(report.unused, cfg)
    finish_port(report, assignments, path, allow_missing)
    return report
