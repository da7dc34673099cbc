"""Where one training step's time and memory go: a per-stage table of `Trainer.train_step`.

The load is the peers' training benchmark (`../shared/peers/tfdet_train_bench.py`, whose dataset and
settings this imports): Detectron's e2e_mask_rcnn_R-50-FPN_1x, random initialisation, one 800 x 1344
photo with 5 ground-truth objects per step, FREEZE_AT 2, 512 RoIs, SGD with momentum. After `--warmup`
untimed steps, `--runs` steps are timed (wall, median and min), then one step runs under TensorFlow's
profiler (host tracer level 3) and its trace is read back:

- time: each traced op's duration, attributed to a stage by the Keras layer that made it (body, FPN, RPN
  head, RPN anchor targets, proposals, RoI sampling, box head, mask head, mask targets, keypoint head and
  targets, losses) and to a phase (forward, backward, optimizer update). Ops of 2 threads overlap, so the
  op seconds add up to more than the wall time; the table gives each stage's share of the op seconds.
- memory: the allocator's bytes in use over the step; at its peak, the live allocations by the stage and
  phase of the op that made them (what the backward keeps from the forward shows as forward bytes).

Then the input pipeline alone (`Trainer.distributed_dataset`, the same batches) is timed in images per
second against the step's demand (1 / median step). Peak RSS is the whole process (ru_maxrss).

    python benchmarks/train_profile.py [--size 800x1344] [--runs 5] [--opts KEY VALUE ...]

On a shared CPU quote shares and ratios, not seconds.
"""

if __name__ == "__main__":  # before TensorFlow is imported: its native log records stay off the terminal
    from tfdet.console import quiet_native_logs

    quiet_native_logs()

import argparse
import bisect
import collections
import glob
import os
import pathlib
import re
import shutil
import statistics
import sys
import tempfile
import time

import tensorflow as tf
from bench_inference import peak_rss_mb  # benchmarks/ is on the path

ROOT = pathlib.Path(__file__).resolve().parents[1]
PEERS = ROOT.parent / "shared" / "peers"

# Stage of an op, by the Keras layer (its name scope) that made it; first match wins.
STAGES = [
    ("body", r"(conv1|conv1_relu|res_conv1_bn|pool1|pool1_pad|res\d_\d+_\w+|res\d)"),
    ("FPN", r"fpn_\w+"),
    ("RPN head", r"(conv_rpn|conv_rpn_relu|rpn_cls_logits|rpn_bbox_pred|rpn_cls_probs)\w*"),
    ("RPN anchor targets", r"rpn_losses/targets"),
    ("proposals", r"(rpn_rois|im_info|collected_rois)"),
    ("RoI sampling", r"(sampled_roi_targets|gt_valid)"),
    ("box head", r"(sampled_rois|roi_feat|fc6|fc6_relu|fc7|fc7_relu|cls_score|bbox_pred|cls_prob)"),
    ("mask head", r"(mask_rois|mask_roi_feat|mask_fcn\d+|mask_fcn\d+_relu|conv5_mask|conv5_mask_relu"
                  r"|mask_fcn_logits\w*)"),
    ("mask targets", r"mask_loss/targets"),
    ("keypoint head", r"(keypoint_rois|keypoint_roi_feat|conv_fcn\d+|conv_fcn\d+_relu|kps_\w+)"),
    ("losses", r"(rpn_losses|fast_rcnn_losses|mask_loss|keypoint_loss)"),
]
MODEL_SCOPE = re.compile(r"^generalized_rcnn_training(_\d+)?/")
OP_EVENT = re.compile(r"^[^\s:]+:\w+$")  # a TensorFlow op's trace event, "name:Type"


def stage_of(op_name):
    """(stage, phase) of a traced op name: phase forward, backward or optimizer update."""
    phase = "forward"
    if op_name.startswith("gradient_tape/"):
        phase, op_name = "backward", op_name[len("gradient_tape/"):]
    if op_name.startswith(("detectron_sgd", "DetectronSGD", "loss_scale_optimizer")):
        return "optimizer update", "update"
    if not MODEL_SCOPE.match(op_name):
        return "outside the model", phase
    scope = MODEL_SCOPE.sub("", op_name)
    layer, _, rest = scope.partition("/")
    layer = re.sub(r"_\d+$", "", layer)  # Keras' call-count suffix
    inner = f"{layer}/{rest.split('/', 1)[0]}" if rest else layer
    inner = re.sub(r"_\d+$", "", inner)
    for stage, pattern in STAGES:
        if re.fullmatch(pattern, inner) or re.fullmatch(pattern, layer):
            return stage, phase
    return f"other ({layer})", phase


def read_trace(logdir):
    """(op seconds by (stage, phase), top ops by seconds, memory at peak by (stage, phase), peak bytes,
    bytes in use before the step) from the profiler's trace in `logdir`."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    path = sorted(glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb")))[-1]
    space = xplane_pb2.XSpace()
    space.ParseFromString(pathlib.Path(path).read_bytes())
    op_seconds, by_op = collections.Counter(), collections.Counter()
    memory_events = []  # (time ps, +bytes / -bytes, addr, stage)
    for plane in space.planes:
        names, stat_names = plane.event_metadata, plane.stat_metadata
        for line in plane.lines:
            ops = []  # (start, end, name) of this thread's op events, to attribute its allocations
            allocations = []
            for event in line.events:
                name = names[event.metadata_id].name
                start = line.timestamp_ns * 1000 + event.offset_ps
                if name in ("MemoryAllocation", "MemoryDeallocation"):
                    stats = {stat_names[s.metadata_id].name: (s.int64_value or s.uint64_value) for s in event.stats}
                    allocations.append((start, name == "MemoryAllocation", stats))
                elif OP_EVENT.match(name):
                    op = name.split(":")[0]
                    ops.append((start, start + event.duration_ps, op))
                    op_seconds[stage_of(op)] += event.duration_ps / 1e12
                    by_op[name] += event.duration_ps / 1e12
            ops.sort()
            starts = [o[0] for o in ops]
            for when, allocated, stats in allocations:
                i = bisect.bisect_right(starts, when) - 1
                op = ops[i][2] if i >= 0 and ops[i][1] >= when else "unattributed"
                owner = stage_of(op) if op != "unattributed" else ("unattributed", "")
                size = stats.get("allocation_bytes", 0)
                memory_events.append((when, size if allocated else -size, stats.get("addr"), owner, op))
    memory_events.sort(key=lambda e: e[0])
    live, in_use, peak, peak_live, base = {}, 0, 0, {}, None
    for _, delta, addr, owner, op in memory_events:
        if delta > 0:
            live[addr] = (delta, owner, op)
        elif addr in live:
            live.pop(addr)
        else:
            continue  # freed here, allocated before the trace: counted in the base
        in_use += delta
        if in_use > peak:
            peak, peak_live = in_use, dict(live)
    at_peak, peak_ops = collections.Counter(), collections.Counter()
    for size, owner, op in peak_live.values():
        at_peak[owner] += size
        peak_ops[op] += size
    return op_seconds, by_op, at_peak, peak_ops, peak


def pipeline_rate(trainer, batches):
    """Images per second of the input pipeline alone (the step's batches, nothing else running)."""
    iterator = iter(trainer.distributed_dataset(0))
    next(iterator)
    start = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches * trainer.global_batch / (time.perf_counter() - start)


def print_tables(op_seconds, by_op, at_peak, peak_ops, peak, wall, top):
    total = sum(op_seconds.values())
    stages = collections.defaultdict(dict)
    for (stage, phase), seconds in op_seconds.items():
        stages[stage][phase] = seconds
    print(f"\ntime by stage: op seconds of one traced step (wall median {wall:.3f} s; ops overlap on 2 threads)")
    print(f"{'stage':<26} {'forward':>8} {'backward':>9} {'update':>7} {'total':>7} {'share':>6}")
    for stage, phases in sorted(stages.items(), key=lambda kv: -sum(kv[1].values())):
        seconds = sum(phases.values())
        print(f"{stage:<26} {phases.get('forward', 0):8.3f} {phases.get('backward', 0):9.3f} "
              f"{phases.get('update', 0):7.3f} {seconds:7.3f} {seconds / total:6.1%}")
    print(f"{'all':<26} {'':>8} {'':>9} {'':>7} {total:7.3f}")
    print(f"\nslowest ops (s): " + "; ".join(f"{name} {s:.3f}" for name, s in by_op.most_common(top)))
    print(f"\nmemory at the step's peak ({peak / 2**20:.0f} MiB allocated in the step), by the op that allocated it")
    print(f"{'stage':<26} {'phase':<9} {'MiB':>8} {'share':>6}")
    for (stage, phase), size in at_peak.most_common():
        if size >= 2**20:
            print(f"{stage:<26} {phase:<9} {size / 2**20:8.1f} {size / max(peak, 1):6.1%}")
    print("largest holders at the peak (MiB): " + "; ".join(
        f"{name} {size / 2**20:.0f}" for name, size in peak_ops.most_common(top)))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="800x1344", help="HxW of the photo (default 800x1344)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first (default 2)")
    parser.add_argument("--runs", type=int, default=5, help="timed steps (default 5)")
    parser.add_argument("--pipeline-batches", type=int, default=20, help="batches the pipeline alone is timed on")
    parser.add_argument("--top", type=int, default=12, help="slowest ops listed")
    parser.add_argument("--inter-op", type=int, default=0,
                        help="TF inter-op threads (0: TF's default); 1 runs one op at a time, so that the traced op "
                             "seconds add up to the step")
    parser.add_argument("--config", default=None, help="config file (default: the peers' Mask R-CNN R-50-FPN)")
    parser.add_argument("--opts", nargs="*", default=[], help="extra config overrides KEY VALUE ...")
    args = parser.parse_args()
    sys.path.insert(0, str(PEERS))
    import tfdet_train_bench as protocol  # the peers' dataset, ground truth and settings

    from tfdet.config import load_config
    from tfdet.data.roidb import load_coco_roidb
    from tfdet.engine.trainer import Trainer
    from tfdet.startup import freeze_imports

    freeze_imports()
    if args.inter_op:
        tf.config.threading.set_inter_op_parallelism_threads(args.inter_op)
    height, width = (int(v) for v in args.size.lower().split("x"))
    work = pathlib.Path(tempfile.mkdtemp(prefix="train_profile_"))
    try:
        overrides = {
            "OUTPUT_DIR": str(work / "out"), "TRAIN.WEIGHTS": "", "TRAIN.IMS_PER_BATCH": 1, "NUM_GPUS": 1,
            "SOLVER.BASE_LR": 1e-6, "SOLVER.WARM_UP_ITERS": 0, "TRAIN.USE_FLIPPED": False,
            "TRAIN.SCALES": (min(height, width),), "TRAIN.MAX_SIZE": max(height, width), "TRAIN.FREEZE_AT": 2,
            "RNG_SEED": 0, "TFDET.ALLOW_AFFINE_FROM_SCRATCH": True,
        }
        overrides.update(zip(args.opts[::2], args.opts[1::2]))
        cfg = load_config(args.config or protocol.CONFIG, overrides)
        roidb = load_coco_roidb(protocol.write_dataset(str(work), height, width), str(work),
                                with_masks=bool(cfg.MODEL.MASK_ON))
        trainer = Trainer(cfg, roidb=roidb, progress=False)
        built_rss = peak_rss_mb()
        batch = next(iter(trainer.distributed_dataset(0)))
        times, first_step_rss = [], None
        for step in range(args.warmup + args.runs):
            start = time.perf_counter()
            trainer.train_step(batch)
            if step == 0:
                first_step_rss = peak_rss_mb()
            if step >= args.warmup:
                times.append(time.perf_counter() - start)
        step_rss = peak_rss_mb()
        logdir = work / "trace"
        tf.profiler.experimental.start(str(logdir), options=tf.profiler.experimental.ProfilerOptions(
            host_tracer_level=3, python_tracer_level=0, device_tracer_level=0))
        trainer.train_step(batch)
        tf.profiler.experimental.stop()
        wall = statistics.median(times)
        print(f"{pathlib.Path(args.config or protocol.CONFIG).name} {height}x{width} train step: median "
              f"{wall:.3f} s, min {min(times):.3f} s over {len(times)} steps; peak RSS {step_rss:.0f} MB "
              f"(after building the model and optimizer: {built_rss:.0f} MB, after the first step, which traces: "
              f"{first_step_rss:.0f} MB)")
        print_tables(*read_trace(str(logdir)), wall, args.top)
        rate = pipeline_rate(trainer, args.pipeline_batches)
        print(f"\ninput pipeline alone: {rate:.2f} images/s; the step consumes {trainer.global_batch / wall:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
