"""Which ops of one training step run on which device: the counterpart of Caffe2's `GetActivationBlobs`
for checking a TFDET.DEVICE_MAP (`tfdet.modeling.device_map`).

    python -m tfdet.engine.op_devices --cfg configs/shapes_tiny_mask_keypoint.yaml --logical-cpus 2 \\
        TFDET.DEVICE_MAP "{res5: /CPU:1, mask_head: /CPU:1}"

traces the Trainer's own step function (its tf.function, the graph training runs) on a batch of
zeros and prints, per device, the forward and gradient ops and the parts of the model they belong
to. Each op carries the device its graph requested: '(default)' is no request (the placer puts it
on the replica's default device); under a multi-replica strategy every replica op names its device.
Variable reads (ReadVariableOp) are colocated with their variable, which stays on the replica's
device. Ops inside nested functions (while-loop bodies of per-image maps) are counted as their
calling op.
"""

if __name__ == "__main__":  # before TensorFlow is imported: its native log records stay off the terminal
    from tfdet.console import quiet_native_logs

    quiet_native_logs()

import argparse
import collections
import dataclasses
import math
import re
import sys
import tempfile

import tensorflow as tf

from tfdet.console import add_verbose_flag
from tfdet.imaging.preprocessing import padding_stride
from tfdet.modeling.device_map import PARTS, layer_part, leaf_layers

DEFAULT_DEVICE = "(default)"
_GRADIENT_SCOPES = frozenset({"gradients", "gradient_tape"})
_UNIQUIFIED = re.compile(r"^(.*)_\d+$")


@dataclasses.dataclass(frozen=True)
class OpPlacement:
    """One op of a traced graph: its name, type, requested device, whether it belongs to the backward
    pass, and the Keras layer (and device-map part) whose call created it or its forward op."""

    name: str
    type: str
    device: str
    gradient: bool
    layer: str | None
    part: str | None


def display_device(device):
    """'/CPU:1' for a local device name, the full name for another job's, DEFAULT_DEVICE for ''."""
    if not device:
        return DEFAULT_DEVICE
    spec = tf.DeviceSpec.from_string(device)
    local = f"/{spec.device_type}:{spec.device_index}"
    return local if spec.job in (None, "localhost") else f"/job:{spec.job}/task:{spec.task}{local}"


def _layer_of(op_name, layer_names):
    """The innermost scope of `op_name` that is a layer's name (TF may add `_<n>` to repeated scopes)."""
    for component in reversed(op_name.split("/")):
        if component in layer_names:
            return component
        match = _UNIQUIFIED.match(component)
        if match and match.group(1) in layer_names:
            return match.group(1)
    return None


def op_placements(graph, model):
    """[OpPlacement] of every op of `graph` (a traced step of `model`)."""
    layer_names = {layer.name for layer, _ in leaf_layers(model)}
    placements = []
    for op in graph.get_operations():
        layer = _layer_of(op.name, layer_names)
        placements.append(OpPlacement(
            name=op.name,
            type=op.type,
            device=display_device(op.device),
            gradient=bool(_GRADIENT_SCOPES & set(op.name.split("/"))),
            layer=layer,
            part=layer_part(layer) if layer else None,
        ))
    return placements


def by_device(placements):
    """{device: [OpPlacement]} in first-seen order."""
    grouped = collections.defaultdict(list)
    for placement in placements:
        grouped[placement.device].append(placement)
    return dict(grouped)


def zeros_batch(cfg, model):
    """A batch of zeros shaped like one replica's training batch (TRAIN.IMS_PER_BATCH images of the largest
    TRAIN.SCALES padded to FPN.COARSEST_STRIDE, one ground-truth slot): enough to trace a step."""
    stride = padding_stride(cfg) or 1
    side = math.ceil(max(cfg.TRAIN.SCALES) / stride) * stride
    sizes = {"images": (side, side, 3), "gt_masks": (1, side, side)}
    batch = {}
    for name, tensor in model.input.items():
        if name == "seeds":
            continue
        shape = sizes.get(name, tuple(1 if dim is None else dim for dim in tensor.shape[1:]))
        batch[name] = tf.zeros((cfg.TRAIN.IMS_PER_BATCH, *shape), tensor.dtype)
    batch["image_info"] = tf.constant([[side, side, 1.0]] * cfg.TRAIN.IMS_PER_BATCH, tf.float32)
    return batch


def replicated_batch(strategy, batch):
    """`batch` (one replica's batch dict) given to every replica of `strategy`, as `Trainer.train_step` takes it."""
    dataset = strategy.distribute_datasets_from_function(lambda _: tf.data.Dataset.from_tensors(batch).repeat())
    return next(iter(dataset))


def trace_training_step(trainer, batch=None):
    """The graph of `trainer`'s training step (the tf.function `Trainer.train_step` runs), traced for
    `batch` (one replica's batch dict; default `zeros_batch`) on every replica. A later
    `trainer.train_step(replicated_batch(trainer.strategy, batch))` runs this very graph."""
    batch = zeros_batch(trainer.cfg, trainer.model) if batch is None else batch
    return trainer._step.get_concrete_function(replicated_batch(trainer.strategy, batch)).graph


def summary(placements):
    """A table: per device, forward and gradient op counts and the ops of each part of the model there."""
    lines = [f"{'device':<12} {'forward':>8} {'gradient':>9}  ops by part (forward + gradient)"]
    for device, ops in by_device(placements).items():
        forward = sum(not op.gradient for op in ops)
        parts = collections.Counter(op.part or "(other)" for op in ops)
        order = [*PARTS, "(other)"]
        by_part = ", ".join(f"{part} {parts[part]}" for part in order if parts[part])
        lines.append(f"{device:<12} {forward:>8} {len(ops) - forward:>9}  {by_part}")
    return "\n".join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tfdet.engine.op_devices", description=__doc__.split("\n")[0])
    add_verbose_flag(parser)
    parser.add_argument("--cfg", dest="cfg_file", required=True, help="config YAML (Detectron keys)")
    parser.add_argument("--logical-cpus", type=int, default=0,
                        help="split the CPU into this many logical devices (/CPU:0 ..) to try a map without GPUs")
    parser.add_argument("opts", nargs=argparse.REMAINDER, help="config overrides: KEY VALUE ...")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from tfdet.config import ConfigError, load_config
    from tfdet.engine.strategy import make_logical_cpus
    from tfdet.engine.trainer import Trainer
    from tfdet.startup import freeze_imports

    try:
        cfg = load_config(args.cfg_file, args.opts)
    except (ConfigError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.logical_cpus > 1:
        make_logical_cpus(args.logical_cpus)
    freeze_imports()
    with tempfile.TemporaryDirectory() as output_dir:
        try:
            trainer = Trainer(cfg, output_dir, progress=False)
        except ValueError as error:  # an unknown part or device, a bad NUM_GPUS
            print(f"error: {error}", file=sys.stderr)
            return 2
        print(summary(op_placements(trace_training_step(trainer), trainer.model)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
