"""Where the inference time goes: a per-stage table for Mask R-CNN, Keypoint R-CNN and RetinaNet R-50-FPN.

Each stage's time is the difference between two truncated copies of the model graph (the same layers and
weights, outputs cut at the stage's last layer), run as the Predictor runs the whole graph (one tf.function,
no AutoGraph, Grappler off on CPU): body (ResNet), FPN, RPN + proposals (RetinaNet: its class and box heads on
every level), box head + NMS (RetinaNet: its decoding and NMS), mask head, keypoint head, heatmap decoding.
Pre-processing (resize, mean subtraction) and mask pasting are timed on their own, as Predictor.predict runs
them. Each stage's GMACs (convolutions, transposed convolutions, FC: `flop_count.py`) are given with the
GFLOP/s it reaches. Random weights (Detectron's initialisation) with TEST.SCORE_THRESH 0, so every image
carries TEST.DETECTIONS_PER_IM detections (the load of a busy real image); RetinaNet with INFERENCE_TH 0.

    python benchmarks/stage_profile.py [--runs 7] [--model e2e_mask_rcnn_R-50-FPN_1x.yaml ...]

Times are medians (and mins) over --runs rounds after two warm-up calls, the truncated graphs alternating within a
round, on one demo photo at 800 px; on a shared CPU quote the table's shares and ratios, not its seconds.
"""

if __name__ == "__main__":  # before TensorFlow is imported: its native log records stay off the terminal
    from tfdet.console import quiet_native_logs

    quiet_native_logs()

import argparse
import pathlib
import re
import statistics
import sys
import time
import warnings

import cv2
import keras
import numpy as np
import tensorflow as tf

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from cpu_ratios import CONFIGS, DEMO  # noqa: E402
from flop_count import count_macs  # noqa: E402

from tfdet.config import load_config  # noqa: E402
from tfdet.graph_options import cpu_graph_options  # noqa: E402
from tfdet.inference import Predictor  # noqa: E402

MASK = "e2e_mask_rcnn_R-50-FPN_1x.yaml"
KEYPOINT = "e2e_keypoint_rcnn_R-50-FPN_1x.yaml"
RETINANET = "retinanet_R-50-FPN_1x.yaml"

# (stage, regular expression of the layers whose outputs end it), in graph order; a model lacking a stage skips it
RCNN_STAGES = (
    ("body", r"^res\d_\d+_sum$"),
    ("FPN", r"^fpn_"),
    ("RPN + proposals", r"^rpn_rois$"),
    ("box head + NMS", r"^detections$"),
    ("mask head", r"^mask_probs$"),
    ("keypoint head", r"^real_keypoint_heatmaps$"),
    ("keypoint decoding", r"^keypoints$"),
)
RETINANET_STAGES = (
    ("body", r"^res\d_\d+_sum$"),
    ("FPN (P3-P7)", r"^fpn_"),
    ("class and box heads", r"^retnet_(cls_prob|bbox_pred)_fpn\d$"),
    ("decoding + NMS", r"^detections$"),
)


def layer_outputs(layer):
    """Every output tensor of every call of `layer` (a shared head is called once per level)."""
    return [t for node in layer._inbound_nodes for t in tf.nest.flatten(node.output_tensors)]


def first_element(tensor):
    """One element of `tensor`: a truncated graph returns that, so that fetching its outputs costs nothing."""
    return keras.ops.slice(keras.ops.reshape(tensor, [-1]), [0], [1])


def stage_models(model, stages):
    """[(stage, truncated keras.Model)] ending at each stage's layers, in order; each output is cut to one
    element (`first_element`): the layers before it all run, and no large tensor is handed back."""
    cut = []
    for stage, pattern in stages:
        outputs = [t for layer in model.layers if re.search(pattern, layer.name) for t in layer_outputs(layer)]
        if outputs:
            cut.append((stage, keras.Model(model.inputs, [first_element(t) for t in outputs])))
    return cut


def timed(functions, runs):
    """[(median, min)] seconds of each of `functions` over `runs` rounds, after two warm-up calls of each: the
    functions alternate within a round, so a machine whose speed drifts slows all of them alike."""
    for function in functions:
        for _ in range(2):
            function()
    seconds = [[] for _ in functions]
    for _ in range(runs):
        for function, times in zip(functions, seconds):
            start = time.perf_counter()
            function()
            times.append(time.perf_counter() - start)
    return [(statistics.median(times), min(times)) for times in seconds]


def run_graph(model):
    """The Predictor's way of running a graph: one tf.function without AutoGraph, outputs fetched."""
    function = tf.function(model, autograph=False)

    def call(inputs):
        with cpu_graph_options():
            return [t.numpy() for t in tf.nest.flatten(function(inputs))]

    return call


def profile(name, runs, image):
    """Print the stage table of config `name` on `image`."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        overrides = ["TEST.SCORE_THRESH", "0.0"] + (["RETINANET.INFERENCE_TH", "0.0"] if name == RETINANET else [])
        cfg = load_config(CONFIGS / name, overrides)
    keras.utils.set_random_seed(0)
    predictor = Predictor(cfg)
    inputs = predictor.model_inputs([image])
    outputs = {key: value.numpy() for key, value in predictor._run(inputs).items()}
    detections = int(outputs["num_detections"][0])
    stages = stage_models(predictor.model, RETINANET_STAGES if name == RETINANET else RCNN_STAGES)
    calls = [run_graph(model) for _, model in stages]
    functions = [lambda: predictor.model_inputs([image])] + [lambda call=call: call(inputs) for call in calls]
    functions.append(lambda: predictor.predict(image))
    if "mask_probs" in outputs:
        boxes = predictor._image_results(outputs, 0, image.shape[:2])["boxes"]
        paste = predictor._mask_paster(image.shape[:2])
        probs = outputs["mask_probs"][0, :detections]
        functions.append(lambda: paste(probs, boxes))
    times = timed(functions, runs)
    rows = [("pre-processing", *times[0], 0.0)]
    previous_time, previous_macs = 0.0, 0.0
    for (stage, model), (median, fastest) in zip(stages, times[1:]):
        macs = count_macs(model, inputs) / 1e9
        rows.append((stage, median - previous_time, fastest, macs - previous_macs))
        previous_time, previous_macs = median, macs
    whole, whole_min = times[len(stages) + 1]
    if "mask_probs" in outputs:
        rows.append(("mask paste", *times[-1], 0.0))
    print(f"\n{name}: {detections} detections, input {tuple(inputs['images'].shape[1:3])}; Predictor.predict median "
          f"{whole:.3f} s (min {whole_min:.3f})")
    print(f"{'stage':<26}{'median s':>10}{'share':>8}{'GMACs':>8}{'GFLOP/s':>9}")
    total = sum(row[1] for row in rows)
    for stage, seconds, _, macs in rows:
        rate = f"{2 * macs / seconds:9.0f}" if macs and seconds > 0 else f"{'':>9}"
        print(f"{stage:<26}{seconds:>10.3f}{seconds / total:>8.0%}{macs:>8.1f}{rate}")
    print(f"{'sum of stages':<26}{total:>10.3f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7, help="timed calls per stage (after two warm-up calls)")
    parser.add_argument("--model", choices=(MASK, KEYPOINT, RETINANET), action="append", help="default: all three")
    args = parser.parse_args()
    image = cv2.imread(str(sorted(DEMO.glob("*.jpg"))[0]))
    for name in args.model or (MASK, KEYPOINT, RETINANET):
        profile(name, args.runs, np.ascontiguousarray(image))


if __name__ == "__main__":
    main()
