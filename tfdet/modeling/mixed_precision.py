"""Mixed precision (TFDET.MIXED_PRECISION): Keras' mixed policies, with Detectron's box math in float32.

| TFDET.MIXED_PRECISION | policy |
|---|---|
| '' or false (default) | float32 |
| mixed_float16 | float16 compute, float32 variables (GPUs; the Trainer scales the loss) |
| mixed_bfloat16 | bfloat16 compute, float32 variables (CPUs with AVX512-BF16 or AMX, TPUs, Ampere+ GPUs) |
| true | the device's own: mixed_float16 when a GPU is visible, else mixed_bfloat16 |

`build_model` builds under the policy (`dtype_policy_scope`, which restores the global Keras policy
afterwards): convolutions, dense layers, norms, ReLUs and RoIAlign's feature reads compute in 16 bits
on float32 variables. `keep_float32` then gives the float32 policy to the layers whose numbers must
stay float32 (their 16-bit inputs are cast up when they are called):

* every tfdet layer except the feature layers (CaffeConv2D, AffineChannel, FlattenDense,
  RoIFeatureTransform): im_info, proposal generation and its NMS, RoI collection and sampling,
  detection output and its NMS, box scaling, mask and keypoint decoding, every loss;
* the prediction layers (`cls_score`, `cls_prob`, `bbox_pred`, `rpn_cls_logits*`, `rpn_cls_probs*`,
  `rpn_bbox_pred*`, `mask_fcn_logits*`, `mask_fcn_probs`, `kps_score*`): logits, probabilities and
  box deltas in float32, so that NMS ranks float32 scores and boxes are decoded from float32 deltas.

RoIFeatureTransform does not cast its inputs: the RoIs, hence RoIAlign's sampling positions and
bilinear weights, are float32, the feature values it reads keep the policy's dtype.
Loss scaling: float16's range needs it (keras.optimizers.LossScaleOptimizer, `needs_loss_scaling`);
bfloat16 has float32's exponent range and needs none.

bfloat16 on a CPU pays only where the CPU computes it: without AVX512-BF16 or AMX TensorFlow emulates it.
Building a bfloat16 model with no GPU visible, on a CPU where it was measured slower than float32 (no bfloat16
instructions; AVX512-BF16 without AMX on Intel), says so in one ConfigWarning (`bfloat16_cpu_notice`; the
figures are in benchmarks/README.md).
"""

import contextlib
import pathlib
import re
import warnings

import keras
import tensorflow as tf

from tfdet.config.errors import ConfigError, ConfigWarning
from tfdet.layers import AffineChannel, CaffeConv2D, FlattenDense, RoIFeatureTransform
from tfdet.modeling.device_map import leaf_layers

FLOAT32 = "float32"
MIXED_FLOAT16 = "mixed_float16"
MIXED_BFLOAT16 = "mixed_bfloat16"
_OFF = ("", "false", FLOAT32)
_DEVICE_OWN = "true"

FEATURE_LAYERS = (AffineChannel, CaffeConv2D, FlattenDense, RoIFeatureTransform)
_PREDICTION_LAYERS = re.compile(
    r"(cls_score|cls_prob|bbox_pred|rpn_cls_logits|rpn_cls_probs|rpn_bbox_pred|mask_fcn_logits|mask_fcn_probs"
    r"|kps_score|retnet_cls_pred|retnet_bbox_pred)"
    r"(_|$)"
)


def policy_name(cfg):
    """The Keras policy name TFDET.MIXED_PRECISION selects (float32, mixed_float16 or mixed_bfloat16)."""
    value = cfg.TFDET.MIXED_PRECISION.strip().lower()
    if value in _OFF:
        return FLOAT32
    if value == _DEVICE_OWN:
        return MIXED_FLOAT16 if tf.config.list_logical_devices("GPU") else MIXED_BFLOAT16
    if value in (MIXED_FLOAT16, MIXED_BFLOAT16):
        return value
    raise ConfigError(
        f"TFDET.MIXED_PRECISION {cfg.TFDET.MIXED_PRECISION!r}: expected '' or false, true, "
        f"{MIXED_FLOAT16} or {MIXED_BFLOAT16}"
    )


def needs_loss_scaling(cfg):
    """Whether training under this config's policy needs loss scaling (float16 only)."""
    return policy_name(cfg) == MIXED_FLOAT16


def cpu_flags(cpuinfo=pathlib.Path("/proc/cpuinfo")):
    """The instruction-set flags of this CPU as Linux lists them, or None where the file is absent."""
    return _cpuinfo_field(cpuinfo, "flags", lambda value: set(value.split()))


def cpu_vendor(cpuinfo=pathlib.Path("/proc/cpuinfo")):
    """This CPU's vendor_id ("GenuineIntel", "AuthenticAMD"), or None where it is not known."""
    return _cpuinfo_field(cpuinfo, "vendor_id", str.strip)


def _cpuinfo_field(cpuinfo, name, parse):
    """`parse` of the first `name : value` line of /proc/cpuinfo, or None."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    found = re.search(rf"^{name}\s*:(.*)$", text, re.MULTILINE)
    return parse(found.group(1)) if found else None


def bfloat16_cpu_notice(flags, vendor=None):
    """The one-line notice for bfloat16 on a CPU with instruction-set `flags` (a set, None: unknown) from
    `vendor`, or None where bfloat16 was measured to pay (AMX; AVX512-BF16 on AMD) or nothing is known."""
    if flags is None or "amx_bf16" in flags:
        return None
    if "avx512_bf16" in flags:
        if vendor == "AuthenticAMD":  # measured faster than float32 there (benchmarks/README.md)
            return None
        why = ("this CPU has AVX512-BF16 but no AMX, where Mask R-CNN R-50-FPN inference was measured 1.48x "
               "slower in bfloat16 than in float32 on an Intel CPU (0.57x float32 on AMD Zen 4)")
    else:
        why = ("this CPU has no bfloat16 instructions (AVX512-BF16 or AMX): TensorFlow emulates them, slower "
               "than float32")
    return f"TFDET.MIXED_PRECISION {MIXED_BFLOAT16}: {why}; leave it '' to run in float32"


@contextlib.contextmanager
def dtype_policy_scope(cfg):
    """Layers created in this block get the config's policy; the global Keras policy is restored after.
    A bfloat16 policy on a CPU that would run it slower than float32 warns first (`bfloat16_cpu_notice`)."""
    if policy_name(cfg) == MIXED_BFLOAT16 and not tf.config.list_logical_devices("GPU"):
        notice = bfloat16_cpu_notice(cpu_flags(), cpu_vendor())
        if notice:
            warnings.warn(notice, ConfigWarning, stacklevel=2)
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy_name(cfg))
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def computes_in_float32(layer):
    """Whether `layer` keeps float32 under a mixed policy (see the module docstring)."""
    if _PREDICTION_LAYERS.match(layer.name):
        return True
    return type(layer).__module__.startswith("tfdet.") and not isinstance(layer, FEATURE_LAYERS)


def keep_float32(cfg, model):
    """Give the float32 policy to the layers that must compute in float32; returns `model`.

    A float32 config changes nothing (every layer already is float32).
    """
    if policy_name(cfg) == FLOAT32:
        return model
    for layer, _ in leaf_layers(model):
        if computes_in_float32(layer):
            layer.dtype_policy = FLOAT32
    return model
