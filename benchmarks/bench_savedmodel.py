"""Latency of the exported SavedModel's `serving_default` against `Predictor.predict`, and its size.

For each model (Mask R-CNN / Keypoint R-CNN R-50-FPN, random weights): export time, size on disk
(saved_model.pb, variables/), first call of the loaded signature, then per-image latency over the
demo photos — `serving_default` on the JPEG bytes (decode, preprocessing, model, mask paste, all
in the graph) and `Predictor.predict` on the same pixels decoded by cv2 (numpy/cv2 preprocessing,
model, mask paste) — median and p90 over the timed runs after a warm-up pass. CPU unless
`--device gpu`; random weights, so the number of detections is set by --score-thresh. The machine's
load average is printed before and after (the figures mean little on a shared, busy machine).

    python benchmarks/bench_savedmodel.py [--scale 800] [--max-size 1333] [--runs 3] [--images 3] [--device gpu]
"""

import argparse
import os
import pathlib
import statistics
import tempfile
import time
import warnings

import cv2
import numpy as np
import tensorflow as tf

from savedmodel.export import export_saved_model
from tfdet.config import load_config
from tfdet.inference import Predictor

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = ROOT.parent / "shared" / "detectron" / "configs" / "12_2017_baselines"
DEMO = ROOT.parent / "shared" / "data" / "detectron_demo"
MODELS = ("e2e_mask_rcnn_R-50-FPN_1x.yaml", "e2e_keypoint_rcnn_R-50-FPN_1x.yaml")


def folder_mb(path):
    return sum(p.stat().st_size for p in pathlib.Path(path).rglob("*") if p.is_file()) / 2**20


def timed(fn, runs):
    """Per-call seconds of `fn()` over `runs` calls."""
    latencies = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        latencies.append(time.perf_counter() - start)
    return latencies


def summary(latencies):
    return f"median {statistics.median(latencies):.2f} s, p90 {float(np.percentile(latencies, 90)):.2f} s"


def bench(name, args, encoded, work):
    overrides = ["TEST.SCALE", str(args.scale), "TEST.MAX_SIZE", str(args.max_size)]
    overrides += ["TEST.SCORE_THRESH", str(args.score_thresh)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = load_config(CONFIGS / name, overrides)
    predictor = Predictor(cfg)
    weights = work / f"{name}.weights.h5"
    predictor.model.save_weights(weights)
    start = time.perf_counter()
    out = export_saved_model(cfg, weights, work / name.split(".")[0] / "1", args.mask_format)
    export_s = time.perf_counter() - start
    graph_mb = (out / "saved_model.pb").stat().st_size / 2**20
    print(
        f"{name}: export {export_s:.0f} s; on disk {folder_mb(out):.0f} MB "
        f"(saved_model.pb {graph_mb:.1f} MB, variables {folder_mb(out / 'variables'):.0f} MB)"
    )
    serve = tf.saved_model.load(str(out)).signatures["serving_default"]
    pixels = [cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR) for data in encoded]
    start = time.perf_counter()
    serve(image_bytes=tf.constant(encoded[:1]))
    print(f"  SavedModel first call {time.perf_counter() - start:.1f} s")
    for data, image in zip(encoded, pixels):  # warm-up: every image size once
        serve(image_bytes=tf.constant([data]))
        predictor.predict(image)
    served, predicted, detections = [], [], []
    for data, image in zip(encoded, pixels):
        served += timed(lambda: serve(image_bytes=tf.constant([data])), args.runs)
        predicted += timed(lambda: predictor.predict(image), args.runs)
        detections.append(int(serve(image_bytes=tf.constant([data]))["num_detections"][0]))
    print(f"  SavedModel serving_default (JPEG bytes): {summary(served)}, {1 / statistics.mean(served):.2f} img/s")
    print(
        f"  Predictor.predict (BGR pixels):          {summary(predicted)}, {1 / statistics.mean(predicted):.2f} img/s"
    )
    print(f"  {statistics.mean(detections):.0f} detections/img at TEST.SCORE_THRESH {args.score_thresh}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=int, default=800, help="TEST.SCALE")
    parser.add_argument("--max-size", type=int, default=1333, help="TEST.MAX_SIZE")
    parser.add_argument("--runs", type=int, default=3, help="timed calls per image and path")
    parser.add_argument("--images", type=int, default=3, help="demo photos used")
    parser.add_argument("--score-thresh", type=float, default=0.05, help="TEST.SCORE_THRESH")
    parser.add_argument("--mask-format", choices=("image", "roi"), default="image")
    parser.add_argument("--model", choices=MODELS, action="append", help="default: both")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu", help="gpu: let TensorFlow use a GPU")
    args = parser.parse_args()
    if args.device == "cpu":
        tf.config.set_visible_devices([], "GPU")
    encoded = [p.read_bytes() for p in sorted(DEMO.glob("*.jpg"))[: args.images]]
    devices = [d.name for d in tf.config.list_logical_devices() if d.device_type in ("CPU", "GPU")]
    print(f"TEST.SCALE {args.scale}, MAX_SIZE {args.max_size}, {len(encoded)} demo photos, {args.runs} runs each")
    print(f"devices {devices}; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as work:
        for name in args.model or MODELS:
            bench(name, args, encoded, pathlib.Path(work))
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
