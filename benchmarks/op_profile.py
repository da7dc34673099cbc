"""Where the inference time goes, op by op: the Predictor's graph run one op at a time, each op's time traced.

The Predictor's traced graph, its weights frozen in, runs in a TF1 session without Grappler (as the Predictor
runs on CPU) and with one op at a time (inter-op parallelism 1), so that each op's traced time is its own and the
times add up to the run: a table of time by op type, then the slowest ops by name. Random weights (Detectron's
initialisation) with TEST.SCORE_THRESH 0 (RetinaNet: INFERENCE_TH 0), every image carrying
TEST.DETECTIONS_PER_IM detections, on one demo photo at 800 x 1344 (the load of `cpu_ratios.py`).

    python benchmarks/op_profile.py [--model e2e_mask_rcnn_R-50-FPN_1x.yaml] [--runs 3] [--top 30] [KEY VALUE ...]

On a shared CPU quote the shares, not the seconds.
"""

if __name__ == "__main__":  # before TensorFlow is imported: its native log records stay off the terminal
    from tfdet.console import quiet_native_logs

    quiet_native_logs()

import argparse
import collections
import sys
import time
import warnings

import cv2
import keras
import numpy as np
import tensorflow as tf
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

from cpu_ratios import CONFIGS, DEMO, SIZE  # the load cpu_ratios.py times (benchmarks/ is on the path)
from tfdet.config import load_config
from tfdet.inference import Predictor


def frozen_session(predictor):
    """(session, feed names by input, output names) of the Predictor's graph with its variables as constants."""
    frozen = convert_variables_to_constants_v2(predictor._run.get_concrete_function())
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(frozen.graph.as_graph_def(), name="")
    config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=1)
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    config.graph_options.optimizer_options.opt_level = -1
    inputs = {("images" if t.shape.rank == 4 else "image_info"): t.name for t in frozen.inputs}
    return tf.compat.v1.Session(graph=graph, config=config), inputs, [t.name for t in frozen.outputs]


def op_type(node_stats):
    """The op type of a traced node ('name = Type(inputs)')."""
    return node_stats.timeline_label.split("=")[-1].split("(")[0].strip() if node_stats.timeline_label else "?"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="e2e_mask_rcnn_R-50-FPN_1x.yaml", help="a Detectron 12_2017 baseline")
    parser.add_argument("--runs", type=int, default=3, help="traced runs (after two untimed ones)")
    parser.add_argument("--top", type=int, default=30, help="slowest ops listed by name")
    args, overrides = parser.parse_known_args()
    warnings.simplefilter("ignore")
    threshold = ["RETINANET.INFERENCE_TH", "0.0"] if "retinanet" in args.model else ["TEST.SCORE_THRESH", "0.0"]
    cfg = load_config(CONFIGS / args.model, [*threshold, *overrides])
    photo = cv2.imread(str(sorted(DEMO.glob("*.jpg"))[0]))
    keras.utils.set_random_seed(0)
    predictor = Predictor(cfg)
    blobs = predictor.model_inputs([np.ascontiguousarray(cv2.resize(photo, SIZE[::-1]))])
    session, inputs, outputs = frozen_session(predictor)
    feed = {name: blobs[key] for key, name in inputs.items()}
    for _ in range(2):
        session.run(outputs, feed)
    by_type, by_name, walls = collections.Counter(), collections.Counter(), []
    for _ in range(args.runs):
        metadata = tf.compat.v1.RunMetadata()
        start = time.perf_counter()
        session.run(outputs, feed, options=tf.compat.v1.RunOptions(trace_level=3), run_metadata=metadata)
        walls.append(time.perf_counter() - start)
        for device in metadata.step_stats.dev_stats:
            for node in device.node_stats:
                seconds = node.all_end_rel_micros / 1e6 / args.runs
                by_type[op_type(node)] += seconds
                by_name[node.node_name] += seconds
    total = sum(by_type.values())
    print(f"{args.model}: run {np.median(walls):.3f} s (median of {args.runs}), ops {total:.3f} s")
    print(f"{'op type':<36} {'s':>7} {'share':>6}")
    for name, seconds in by_type.most_common(20):
        print(f"{name:<36} {seconds:7.3f} {seconds / total:6.1%}")
    print(f"\n{'op':<90} {'s':>7}")
    for name, seconds in by_name.most_common(args.top):
        print(f"{name[-90:]:<90} {seconds:7.3f}")


if __name__ == "__main__":
    sys.exit(main())
