"""Inference speed of Mask R-CNN, Keypoint R-CNN and RetinaNet R-50-FPN at TEST.SCALE 800 / MAX_SIZE 1333 (and,
with `--model shapes_tiny`, of the demo's tiny shapes model at 128 px).

The model graph has data-dependent shapes (NMS, real-detection selection), so `--xla` turns on
TensorFlow's XLA auto-clustering, which compiles the static parts (backbone, FPN, heads).
For each model: the first call, split into Python tracing and the first run (graph optimisation,
kernel and oneDNN set-up, the run itself), and its ratio to a warm call; then per-image latency of the whole
Predictor.predict call (pre-processing, model, mask pasting) over the demo photos, median and
p90 over >= 5 timed runs after a warm-up, images/s, peak RSS, and achieved GFLOP/s against the
MACs counted by flop_count.py. Random weights (Detectron's initialisation), so the number of
detections is set by the score threshold: pass --score-thresh to mimic a trained model's load. RetinaNet
runs with RETINANET.INFERENCE_TH 0 (Detectron's initialisation scores every anchor ~0.01, below the 0.05
default, where a trained model passes thousands on the finer levels): each level keeps its top
PRE_NMS_TOP_N, the load a trained model gives.

    python benchmarks/bench_inference.py [--xla] [--runs 5] [--score-thresh 0.05]
"""

import argparse
import os
import pathlib
import resource
import statistics
import sys
import time
import warnings

import cv2
import numpy as np

if "--xla" in sys.argv:  # XLA auto-clustering must be configured before TensorFlow is imported
    os.environ["TF_XLA_FLAGS"] = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"
sys.path.insert(0, str(pathlib.Path(__file__).parent))
from flop_count import count_macs  # noqa: E402

from tfdet.config import load_config  # noqa: E402
from tfdet.graph_options import cpu_graph_options  # noqa: E402
from tfdet.inference import Predictor  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = ROOT.parent / "shared" / "detectron" / "configs" / "12_2017_baselines"
DEMO = ROOT.parent / "shared" / "data" / "detectron_demo"
RETINANET = "retinanet_R-50-FPN_1x.yaml"
MODELS = ("e2e_mask_rcnn_R-50-FPN_1x.yaml", "e2e_keypoint_rcnn_R-50-FPN_1x.yaml", RETINANET)
TINY = "shapes_tiny"  # the demo's model, configs/shapes_tiny_mask_keypoint.yaml


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def model_gmacs(predictor, image):
    """GMACs of the model on one image, at the shapes the Predictor feeds it."""
    return count_macs(predictor.model, predictor.model_inputs([image])) / 1e9


def model_latency(predictor, image):
    """Seconds of the model graph alone (outputs fetched), without pre-processing and mask pasting."""
    inputs = predictor.model_inputs([image])
    start = time.perf_counter()
    with cpu_graph_options():  # as Predictor.predict runs it
        {key: value.numpy() for key, value in predictor._run(inputs).items()}
    return time.perf_counter() - start


def bench(name, args, images):
    path = ROOT / "configs" / "shapes_tiny_mask_keypoint.yaml" if name == TINY else CONFIGS / name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        overrides = ["RETINANET.INFERENCE_TH", "0.0"] if name == RETINANET else []
        cfg = load_config(path, ["TEST.SCORE_THRESH", str(args.score_thresh), *overrides])
    predictor = Predictor(cfg)
    start = time.perf_counter()
    predictor._run.get_concrete_function(predictor.model_inputs(images[:1]))
    trace = time.perf_counter() - start
    predictor.predict(images[0])
    first = time.perf_counter() - start
    warm = []
    for image in images[:1] + images:  # warm-up: one pass over every image size
        start = time.perf_counter()
        predictor.predict(image)
        warm.append(time.perf_counter() - start)
    latencies, gmacs, detections = [], [], []
    for _ in range(args.runs):
        for image in images:
            start = time.perf_counter()
            result = predictor.predict(image)
            latencies.append(time.perf_counter() - start)
            detections.append(len(result["scores"]))
    model_seconds = [model_latency(predictor, image) for image in images for _ in range(2)]
    for image in images:
        gmacs.append(model_gmacs(predictor, image))
    median = statistics.median(latencies)
    same_image = statistics.median(warm[:2])  # the second and third calls on the first image
    p90 = float(np.percentile(latencies, 90))
    mean_gflop = 2 * statistics.mean(gmacs)
    print(
        f"{name} xla={args.xla}: first call {first:.2f} s (tracing {trace:.2f} s, first run {first - trace:.2f} s) = "
        f"{first / same_image:.2f}x a warm call of the same image ({same_image:.2f} s); per image median {median:.2f} s, p90 {p90:.2f} s, "
        f"{1 / statistics.mean(latencies):.2f} img/s; {statistics.mean(gmacs):.0f} GMACs/img -> "
        f"{mean_gflop / statistics.mean(latencies):.0f} GFLOP/s achieved; "
        f"{statistics.mean(detections):.0f} detections/img; peak RSS {peak_rss_mb():.0f} MB; "
        f"the model graph alone {statistics.median(model_seconds):.2f} s/img (the rest: resize, mask paste)"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--xla", action="store_true", help="XLA auto-clustering of the compilable parts")
    parser.add_argument("--runs", type=int, default=5, help="timed passes over the images")
    parser.add_argument("--images", type=int, default=3, help="demo photos used")
    parser.add_argument("--score-thresh", type=float, default=0.05, help="TEST.SCORE_THRESH")
    parser.add_argument("--model", choices=(*MODELS, TINY), action="append", help="default: the three R-50 models")
    args = parser.parse_args()
    images = [cv2.imread(str(p)) for p in sorted(DEMO.glob("*.jpg"))[: args.images]]
    for name in args.model or MODELS:
        bench(name, args, images)


if __name__ == "__main__":
    main()
