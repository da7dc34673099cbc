"""Mask R-CNN R-50-FPN inference at TEST.SCALE 800 in float32 vs TFDET.MIXED_PRECISION mixed_bfloat16 on the
demo photos: median latency of Predictor.predict, the bfloat16/float32 ratio (target <= 0.6 on CPUs with
AVX512-BF16 or AMX) and the agreement of the top detections.

Weights: `--weights` (a Detectron .pkl or our .weights.h5: use a trained model for agreement figures
that mean something), else Detectron's initialisation from RNG_SEED with the `cls_score` and
`mask_fcn_logits` kernels rescaled so that their logits have a standard deviation of 2 on the first
photo (at Detectron's initial scale every class scores ~1/81 and every mask pixel ~0.5). With random
weights the RPN's objectness is nearly tied over thousands of anchors, so bfloat16 rounding reorders
the proposals and the agreement is a lower bound, not what a trained model shows. TEST.SCORE_THRESH 0. The same
weights go into both models. Agreement per photo (tfdet.evaluation.agreement): of the float32
model's top-k detections, how many the bfloat16 model finds again (same class, box IoU >= 0.5), their
box shifts, score differences and mask IoUs.

The machine's load average and its bfloat16 instructions are printed with the figures; a 3x3 convolution
timed in both dtypes shows whether this CPU computes bfloat16 natively (without AVX512-BF16/AMX, oneDNN
converts to float32 and bfloat16 is no faster).

    python benchmarks/bench_mixed_precision.py [--runs 3] [--images 2] [--top-k 20] [--weights W]
"""

import argparse
import os
import pathlib
import statistics
import time
import warnings

import cv2
import numpy as np
import tensorflow as tf

from tfdet.config import load_config
from tfdet.evaluation.agreement import detection_agreement
from tfdet.inference import Predictor

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIG = ROOT.parent / "shared" / "detectron" / "configs" / "12_2017_baselines" / "e2e_mask_rcnn_R-50-FPN_1x.yaml"
DEMO = ROOT.parent / "shared" / "data" / "detectron_demo"
RESCALED_LOGITS = ("cls_score", "mask_fcn_logits")
TARGET_LOGIT_STD = 2.0
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_bf16_flags():
    """The bfloat16 instruction sets /proc/cpuinfo lists (empty when there are none or no such file)."""
    try:
        flags = set(pathlib.Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return []
    return [flag for flag in BF16_FLAGS if flag in flags]


def conv_seconds(dtype, repeats=3):
    """Median time of a 3x3, 256 -> 256 convolution on a 200x336 map (an FPN P2 at scale 800) in `dtype`."""
    features = tf.cast(tf.random.stateless_normal((1, 200, 336, 256), (0, 1)), dtype)
    kernel = tf.cast(tf.random.stateless_normal((3, 3, 256, 256), (0, 2)), dtype)
    convolve = tf.function(lambda x, k: tf.nn.conv2d(x, k, 1, "SAME"))
    convolve(features, kernel).numpy()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        convolve(features, kernel).numpy()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def sharpen_logits(predictor, image):
    """Rescale the kernels of RESCALED_LOGITS so their logits on `image` have TARGET_LOGIT_STD (see docstring)."""
    import keras

    model = predictor.model
    probe = keras.Model(model.inputs, [model.get_layer(name).output for name in RESCALED_LOGITS])
    logits = probe(predictor.model_inputs([image]))
    for name, values in zip(RESCALED_LOGITS, logits):
        kernel = model.get_layer(name).kernel
        kernel.assign(kernel * (TARGET_LOGIT_STD / float(np.std(values.numpy()))))


def time_predictions(predictor, images, runs):
    """(results of the last run, median seconds per image, first call seconds)."""
    start = time.perf_counter()
    predictor.predict(images[0])
    first = time.perf_counter() - start
    for image in images:  # warm-up over every image size
        predictor.predict(image)
    latencies, results = [], []
    for _ in range(runs):
        results = []
        for image in images:
            start = time.perf_counter()
            results.append(predictor.predict(image))
            latencies.append(time.perf_counter() - start)
    return results, statistics.median(latencies), first


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="timed passes over the images")
    parser.add_argument("--images", type=int, default=2, help="demo photos used")
    parser.add_argument("--top-k", type=int, default=20, help="float32 detections compared per photo")
    parser.add_argument("--weights", help="trained weights (Detectron .pkl or .weights.h5); default: random")
    args = parser.parse_args()
    images = [cv2.imread(str(path)) for path in sorted(DEMO.glob("*.jpg"))[: args.images]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = load_config(CONFIG, ["TEST.SCORE_THRESH", "0.0"])
        cfg_bf16 = load_config(CONFIG, ["TEST.SCORE_THRESH", "0.0", "TFDET.MIXED_PRECISION", "mixed_bfloat16"])
    print(f"load average before: {os.getloadavg()}; CPU bfloat16 flags: {cpu_bf16_flags() or 'none'}; "
          f"TF {tf.__version__}")
    conv32, conv16 = conv_seconds(tf.float32), conv_seconds(tf.bfloat16)
    print(f"3x3 conv 256->256 on 200x336: float32 {conv32 * 1e3:.0f} ms, bfloat16 {conv16 * 1e3:.0f} ms "
          f"(ratio {conv16 / conv32:.2f})")

    float32 = Predictor(cfg, args.weights)
    if args.weights is None:
        sharpen_logits(float32, images[0])
    bfloat16 = Predictor(cfg_bf16)
    bfloat16.model.set_weights(float32.model.get_weights())
    timings = {}
    for name, predictor in (("float32", float32), ("mixed_bfloat16", bfloat16)):
        results, median, first = time_predictions(predictor, images, args.runs)
        timings[name] = (results, median)
        print(f"{name}: first call {first:.1f} s, median {median:.2f} s/image over {args.runs} x {len(images)} "
              f"(load average {os.getloadavg()[0]:.1f})")
    ratio = timings["mixed_bfloat16"][1] / timings["float32"][1]
    print(f"bfloat16 / float32 latency: {ratio:.2f} (target <= 0.60)")
    for index, (reference, candidate) in enumerate(zip(timings["float32"][0], timings["mixed_bfloat16"][0])):
        agreement = detection_agreement(reference, candidate, top_k=args.top_k)
        print(f"photo {index}: {agreement['matched']}/{agreement['compared']} top detections matched; "
              f"box shift median {agreement['median_box_shift']:.2f} px, max {agreement['max_box_shift']:.1f} px; "
              f"score difference mean {agreement['mean_score_difference']:.4f}, "
              f"max {agreement['max_score_difference']:.4f}; mask IoU mean {agreement['mean_mask_iou']:.3f}, "
              f"min {agreement['min_mask_iou']:.3f}")


if __name__ == "__main__":
    main()
