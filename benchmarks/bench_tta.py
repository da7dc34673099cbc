"""Cost of Detectron's test-time augmentation: Mask R-CNN R-50-FPN on a demo photo, single scale
(TEST.SCALE 800 / MAX_SIZE 1333) against the TEST section of the zoo's best model,
e2e_mask_rcnn_X-152-32x8d-FPN-IN5k_1.44x.yaml (BBOX_AUG + MASK_AUG: horizontal flip and scales 400-1200
with their flips at MAX_SIZE 2000, UNION / SOFT_AVG; BBOX_VOTE at VOTE_TH 0.9): 22 box passes and 22 mask
passes of the network per image.

Random weights (Detectron's initialisation) with TEST.SCORE_THRESH lowered so that the heads see a
trained model's load of boxes (--score-thresh). Prints seconds per image (median of --runs after a
warm-up) and the ratio; Detectron reports 12.1 vs 0.325 s/img (37x) on a GPU for the X-152 model.

    python benchmarks/bench_tta.py [--runs 2] [--score-thresh 0.02]
"""

import argparse
import pathlib
import statistics
import time
import warnings

import cv2
import yaml

from tfdet.config import load_config
from tfdet.inference import Predictor

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = ROOT.parent / "shared" / "detectron" / "configs" / "12_2017_baselines"
DEMO = ROOT.parent / "shared" / "data" / "detectron_demo"
MODEL = "e2e_mask_rcnn_R-50-FPN_1x.yaml"
TTA_SOURCE = "e2e_mask_rcnn_X-152-32x8d-FPN-IN5k_1.44x.yaml"


def tta_test_section():
    """The X-152 config's TEST.BBOX_AUG / MASK_AUG / BBOX_VOTE keys, as overrides."""
    test = yaml.safe_load((CONFIGS / TTA_SOURCE).read_text())["TEST"]
    return {f"TEST.{section}": test[section] for section in ("BBOX_AUG", "MASK_AUG", "BBOX_VOTE")}


def seconds_per_image(predictor, image, runs):
    predictor.predict(image)  # warm-up: tracing, first runs
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        result = predictor.predict(image)
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times), len(result["scores"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--score-thresh", type=float, default=0.02)
    args = parser.parse_args()
    image = cv2.imread(str(sorted(DEMO.glob("*.jpg"))[0]))
    base = {"MODEL.NUM_CLASSES": 81, "TEST.SCORE_THRESH": args.score_thresh}
    figures = {}
    for name, extra in (("single scale", {}), ("X-152 1.44x TTA", tta_test_section())):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the zoo config's renamed keys
            cfg = load_config(CONFIGS / MODEL, {**base, **extra})
        median, best, count = seconds_per_image(Predictor(cfg), image, args.runs)
        figures[name] = median
        print(f"{name:>16}: {median:8.2f} s/img median, {best:8.2f} min, {count} detections "
              f"(image {image.shape[1]}x{image.shape[0]})")  # fmt: skip
    print(f"TTA / single scale: {figures['X-152 1.44x TTA'] / figures['single scale']:.1f}x")


if __name__ == "__main__":
    main()
