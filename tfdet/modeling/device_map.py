"""Model parallelism: TFDET.DEVICE_MAP runs named parts of a model (stages, heads) on other devices.

The counterpart of Caffe2's `data_parallel_model_utils.ShiftActivationDevices`, which Detectron users
called to move chosen activations, with the ops and gradient ops that make them, to another GPU:

    TFDET:
      DEVICE_MAP: {res5: /GPU:1, mask_head: /GPU:1}

Parts, matched against the Detectron-named Keras layers of any body and head of the registries:

| part | layers |
|---|---|
| res1 | the stem: conv1 with its norm (res_conv1_bn / conv1_gn) and ReLU, pool1 |
| res2 .. res5 | the blocks res<k>_<i>_*; in a C4 model res5 is the box head's RoI stage (and runs the C4 mask head's mask RoIs too) |
| fpn | fpn_* (laterals, top-down sums, outputs, P6) |
| rpn | conv_rpn*, rpn_* (the head, proposal generation rpn_rois, training's rpn_losses) |
| box_head | RoI pooling (roi_feat / pool5), head_conv*, fc6, fc7, res5_pool, cls_score, cls_prob, bbox_pred, fast_rcnn_losses; in a C4 model also the RoI res5 stage unless res5 is mapped itself |
| mask_head | mask_roi_feat / mask_pool5, mask_fcn*, conv5_mask, mask_fcn_logits, mask_fcn_probs, mask_loss |
| keypoint_head | keypoint_roi_feat, conv_fcn*, kps_*, keypoint_loss |

Everything else (inputs, im_info, RoI bookkeeping, RoI sampling, detection post-processing) runs on
the replica's device, as does every part the map leaves out.

How: each layer of a mapped part runs its `call` under `tf.device`, every time it is called (Keras
functional models keep no device scope from when they were built). Its forward ops are placed there
and TensorFlow inserts the copies between devices. Gradient ops follow their forward op when the
gradients are taken with `tf.gradients`, which colocates them (TF1's colocate_gradients_with_ops, on
in TF2's `tf.gradients`); a `tf.GradientTape` does not colocate, so the Trainer's step takes its
gradients with `tf.gradients` when a map is set. Variables stay where they were created (the replica's device), as Caffe2 left
parameters on their GPU: reads are copied to the part's device and gradients copied back.

Devices are the process's logical devices (`tf.config.list_logical_devices()`), named `/GPU:1`,
`GPU:1`, `/device:CPU:1` or in full (`/job:localhost/replica:0/task:0/device:CPU:1`).

With several replicas (mirrored, multi_worker) the map names the devices of replica 0, and replica r
shifts each mapped device of its own type by its offset from replica 0 (Caffe2's `shifts`): replicas
on GPU:0 and GPU:2 with {res5: /GPU:1} run res5 on GPU:1 and GPU:3. A mapped device of another type
than the replicas' (a CPU part for GPU replicas) is shared by every replica. TF cannot do this on
TPUs (no per-op placement inside a TPU replica) nor inside XLA-compiled (jit_compile) functions.
"""

import functools
import re

import keras
import tensorflow as tf

PARTS = ("res1", "res2", "res3", "res4", "res5", "fpn", "rpn", "box_head", "mask_head", "keypoint_head")

# Part of a layer by its name, first match wins (re.match: anchored at the name's start).
_PART_PATTERNS = (
    ("res1", re.compile(r"(conv1|res_conv1_bn|pool1)(_|$)")),
    *((f"res{stage}", re.compile(rf"res{stage}_\d")) for stage in (2, 3, 4, 5)),
    ("fpn", re.compile(r"fpn_")),
    ("rpn", re.compile(r"conv_rpn|rpn_")),
    ("box_head", re.compile(
        r"(roi_feat|pool5|head_conv\d|fc6|fc7|res5_pool|cls_score|cls_prob|bbox_pred|fast_rcnn_losses)(_|$)"
    )),
    ("mask_head", re.compile(r"(mask_roi_feat|mask_pool5|mask_fcn|conv5_mask|mask_loss)(_|\d|$)")),
    ("keypoint_head", re.compile(r"(keypoint_roi_feat|conv_fcn\d|kps_|keypoint_loss)")),
)
# A C4 model's res5 stage is a nested model of this name inside the box head (box_heads.res5_stage).
_ROI_RES5_MODEL = "res5"


def layer_part(name):
    """The part (one of PARTS) a layer named `name` belongs to, or None (replica's device)."""
    for part, pattern in _PART_PATTERNS:
        if pattern.match(name):
            return part
    return None


def leaf_layers(model, enclosing=()):
    """(layer, names of the nested models holding it) for every non-model, non-input layer of `model`."""
    for layer in model.layers:
        if isinstance(layer, keras.Model):
            yield from leaf_layers(layer, (*enclosing, layer.name))
        elif not isinstance(layer, keras.layers.InputLayer):
            yield layer, enclosing


def _candidate_parts(layer, enclosing):
    """The parts whose device `layer` takes, most specific first."""
    part = layer_part(layer.name)
    if part is None:
        return ()
    if part == "res5" and _ROI_RES5_MODEL in enclosing:
        return ("res5", "box_head")
    return (part,)


def model_parts(model):
    """{part: [layer names]} of `model`, by the table of the module docstring (C4's RoI res5 under res5)."""
    parts = {}
    for layer, enclosing in leaf_layers(model):
        candidates = _candidate_parts(layer, enclosing)
        if candidates:
            parts.setdefault(candidates[0], []).append(layer.name)
    return parts


def _short_name(spec):
    return f"/{spec.device_type}:{spec.device_index}"


def logical_devices():
    """{full name: DeviceSpec} of the logical devices of this process."""
    return {device.name: tf.DeviceSpec.from_string(device.name) for device in tf.config.list_logical_devices()}


def resolve_device(name, what="TFDET.DEVICE_MAP"):
    """The full name of logical device `name` (`/GPU:1`, `GPU:1`, `/device:CPU:1` or the full name).

    ValueError naming the valid devices when `name` is none of them.
    """
    devices = logical_devices()
    try:
        wanted = tf.DeviceSpec.from_string(name if name.startswith("/") else f"/{name}")
    except (ValueError, AttributeError):
        wanted = None
    if wanted is not None and wanted.device_type and wanted.device_index is not None:
        for full_name, spec in devices.items():
            same_device = (spec.device_type, spec.device_index) == (wanted.device_type.upper(), wanted.device_index)
            same_task = all(
                None in (getattr(wanted, field), getattr(spec, field)) or getattr(wanted, field) == getattr(spec, field)
                for field in ("job", "replica", "task")
            )
            if same_device and same_task:
                return full_name
    valid = ", ".join(_short_name(spec) for spec in devices.values())
    raise ValueError(f"{what}: unknown device {name!r}; this process has {valid}")


def check_device_map(device_map, present_parts):
    """{part: full device name} of `device_map`, each part known and present, each device existing."""
    unknown = sorted(set(device_map) - set(PARTS))
    if unknown:
        raise ValueError(f"TFDET.DEVICE_MAP: unknown part(s) {', '.join(unknown)}; valid parts: {', '.join(PARTS)}")
    absent = [part for part in device_map if part not in present_parts]
    if absent:
        raise ValueError(
            f"TFDET.DEVICE_MAP: this model has no {', '.join(absent)}; its parts: "
            f"{', '.join(part for part in PARTS if part in present_parts)}"
        )
    return {part: resolve_device(device) for part, device in device_map.items()}


def replica_device(device):
    """`device` (a full name, replica 0's) for the replica being traced: shifted by the replica's offset
    from replica 0 when it is of the replicas' device type and there are several replicas."""
    if not tf.distribute.has_strategy() or tf.distribute.in_cross_replica_context():
        return device
    strategy = tf.distribute.get_strategy()
    if strategy.num_replicas_in_sync == 1:
        return device
    context = tf.distribute.get_replica_context()
    with tf.init_scope():  # the replica id as a Python int, without adding a constant to the traced graph
        replica = int(context.replica_id_in_sync_group)
    local = [tf.DeviceSpec.from_string(name) for name in strategy.extended.worker_devices]
    own, first, target = local[replica % len(local)], local[0], tf.DeviceSpec.from_string(device)
    if target.device_type != first.device_type:
        return device
    shifted = target.replace(device_index=target.device_index + own.device_index - first.device_index)
    return resolve_device(
        shifted.to_string(), what=f"TFDET.DEVICE_MAP shifted for replica {replica} (on {_short_name(own)})"
    )


def _run_on(layer, device):
    """Make every later call of `layer` run under tf.device (the replica's shift of `device`)."""
    call = layer.call

    @functools.wraps(call)
    def placed_call(*args, **kwargs):
        with tf.device(replica_device(device)):
            return call(*args, **kwargs)

    layer.call = placed_call


def layer_devices(cfg, model):
    """{layer name: full device name} of the layers TFDET.DEVICE_MAP moves (checked; see check_device_map)."""
    device_map = cfg.TFDET.DEVICE_MAP
    if not device_map:
        return {}
    devices = check_device_map(device_map, model_parts(model))
    placement = {}
    for layer, enclosing in leaf_layers(model):
        mapped = [part for part in _candidate_parts(layer, enclosing) if part in devices]
        if mapped:
            placement[layer.name] = devices[mapped[0]]
    return placement


def apply_device_map(cfg, model):
    """Run the layers of the parts TFDET.DEVICE_MAP names on their devices; returns `model`.

    Raises ValueError (naming the valid choices) for an unknown part, a part the model lacks, or an
    unknown device. An empty map leaves the model untouched.
    """
    placement = layer_devices(cfg, model)
    placed = set()
    for layer, _ in leaf_layers(model):
        if layer.name in placement and id(layer) not in placed:
            _run_on(layer, placement[layer.name])
            placed.add(id(layer))
    return model
