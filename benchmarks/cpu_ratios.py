"""CPU inference ratios, each side in a fresh process, alternated (A B A B) so that a drifting machine hits both:

* tfdet / TF Model Garden: Mask R-CNN R-50-FPN, our Predictor.predict on an 800 x 1344 image (resize, model, 100
  masks pasted) against Model Garden's Detectron-like Mask R-CNN model call (832 x 1344, `--head 2fc --nms cpu
  --num-classes 81`, ../shared/peers/tfmg_maskrcnn_bench.py in its own venv: --tfmg-python);
* Keypoint / Mask R-CNN R-50-FPN (ours, same image);
* mixed_bfloat16 / float32 Mask R-CNN (ours; the CPU's bfloat16 instructions are printed with it);
* first call / warm call of a fresh Predictor (ours, Mask R-CNN); the Predictor's construction (model build and
  graph trace, which it does once for every image size) is printed beside it.

Random weights (Detectron's initialisation) with TEST.SCORE_THRESH 0, so every image carries 100 detections (the
keypoint model: as many as its 2-class NMS keeps). Each process makes --warmup untimed calls, then --runs timed.
Quote the ratios, medians and mins, on a quiet machine (no other heavy process).

    python benchmarks/cpu_ratios.py [--rounds 2] [--runs 5] [--tfmg-python ../tfmg-venv/bin/python]
    python benchmarks/cpu_ratios.py --only mask bf16     # a subset of the sides: mask keypoint bf16 tfmg
"""

if __name__ == "__main__":  # before TensorFlow is imported: its native log records stay off the terminal
    from tfdet.console import quiet_native_logs

    quiet_native_logs()

import argparse
import json
import pathlib
import re
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = ROOT.parent / "shared" / "detectron" / "configs" / "12_2017_baselines"
DEMO = ROOT.parent / "shared" / "data" / "detectron_demo"
PEER = ROOT.parent / "shared" / "peers" / "tfmg_maskrcnn_bench.py"
SIDES = {
    "mask": ("e2e_mask_rcnn_R-50-FPN_1x.yaml", []),
    "keypoint": ("e2e_keypoint_rcnn_R-50-FPN_1x.yaml", []),
    "bf16": ("e2e_mask_rcnn_R-50-FPN_1x.yaml", ["TFDET.MIXED_PRECISION", "mixed_bfloat16"]),
}
SIZE = (800, 1344)


def child(config, overrides, runs, warmup):
    """In a fresh process: one Predictor, its first call and `runs` warm calls on the benchmark image; JSON out."""
    import warnings

    import cv2
    import keras
    import numpy as np

    from tfdet.config import load_config
    from tfdet.inference import Predictor

    warnings.simplefilter("ignore")
    cfg = load_config(CONFIGS / config, ["TEST.SCORE_THRESH", "0.0", *overrides])
    photo = cv2.imread(str(sorted(DEMO.glob("*.jpg"))[0]))
    image = np.ascontiguousarray(cv2.resize(photo, SIZE[::-1]))  # 800 x 1344: the scale TEST.SCALE 800 keeps
    keras.utils.set_random_seed(0)
    start = time.perf_counter()
    predictor = Predictor(cfg)  # builds the model and traces its graph
    construction = time.perf_counter() - start
    start = time.perf_counter()
    detections = len(predictor.predict(image)["scores"])
    first = time.perf_counter() - start
    for _ in range(warmup - 1):
        predictor.predict(image)
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        predictor.predict(image)
        seconds.append(time.perf_counter() - start)
    print(json.dumps({"construction": construction, "first": first, "seconds": seconds, "detections": detections}))


def run_ours(side, args):
    config, overrides = SIDES[side]
    command = [sys.executable, __file__, "--child", config, "--runs", str(args.runs), "--warmup", str(args.warmup),
               *overrides]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def run_tfmg(args):
    command = [args.tfmg_python, str(PEER), "--size", "x".join(map(str, SIZE)), "--modes", "graph", "--head", "2fc",
               "--nms", "cpu", "--num-classes", "81", "--runs", str(args.runs), "--warmup", str(args.warmup)]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    line = [line for line in output.splitlines() if line.startswith("tfmg maskrcnn")][-1]
    median, fastest = (float(re.search(rf"{key}=([0-9.]+)", line).group(1)) for key in ("median_s", "min_s"))
    return {"median": median, "min": fastest}


def summary(result):
    """{median, min} of a child's JSON (ours) or the peer's line."""
    if "seconds" in result:
        return {"median": statistics.median(result["seconds"]), "min": min(result["seconds"])}
    return result


def cpu_bfloat16():
    """This CPU's bfloat16-related instruction sets, as tfdet's bfloat16 notice reads them."""
    from tfdet.modeling.mixed_precision import cpu_flags

    found = sorted(set(cpu_flags() or ()) & {"avx512_bf16", "amx_bf16", "avx512f"})
    return ", ".join(found) or "none of avx512f, avx512_bf16, amx_bf16"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2, help="alternated rounds (each side once per round)")
    parser.add_argument("--runs", type=int, default=5, help="timed calls per process")
    parser.add_argument("--warmup", type=int, default=2, help="untimed calls per process (the first included)")
    parser.add_argument("--tfmg-python", default=str(ROOT.parent / "tfmg-venv" / "bin" / "python"),
                        help="the Python of a venv with tf-models-official 2.20.0 (../shared/peers/README.md)")
    parser.add_argument("--only", nargs="+", choices=(*SIDES, "tfmg"), help="the sides to run (default: all)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args, overrides = parser.parse_known_args()
    if args.child:
        return child(args.child, overrides, args.runs, args.warmup)
    sides = args.only or ["mask", "tfmg", "keypoint", "bf16"]
    if "tfmg" in sides and not pathlib.Path(args.tfmg_python).exists():
        sys.exit(f"error: no {args.tfmg_python}: make the venv of ../shared/peers/README.md or pass --tfmg-python")
    results = {side: [] for side in sides}
    for round_index in range(args.rounds):
        for side in sides:
            result = run_tfmg(args) if side == "tfmg" else run_ours(side, args)
            results[side].append(result)
            timing = summary(result)
            print(f"round {round_index + 1} {side}: median {timing['median']:.3f} s, min {timing['min']:.3f} s"
                  + (f", Predictor() {result['construction']:.3f} s, first call {result['first']:.3f} s, "
                     f"{result['detections']} detections" if "first" in result else ""), flush=True)

    def ratio(a, b, key):
        pairs = [summary(x)[key] / summary(y)[key] for x, y in zip(results[a], results[b])]
        return " / ".join(f"{value:.2f}" for value in pairs)

    print(f"\nratios per round (medians; mins), CPU bfloat16 instructions: {cpu_bfloat16()}")
    for a, b, what in (("mask", "tfmg", "tfdet / TF Model Garden, Mask R-CNN R-50-FPN (goal <= 0.8)"),
                       ("keypoint", "mask", "Keypoint / Mask R-CNN (goal <= 1.3)"),
                       ("bf16", "mask", "mixed_bfloat16 / float32 (goal < 1 where native)")):
        if a in results and b in results:
            print(f"{what}: {ratio(a, b, 'median')} ({ratio(a, b, 'min')})")
    if "mask" in results:
        firsts = " / ".join(f"{r['first'] / statistics.median(r['seconds']):.2f}" for r in results["mask"])
        print(f"first / warm call, Mask R-CNN (goal <= 1.5): {firsts}")


if __name__ == "__main__":
    main()
