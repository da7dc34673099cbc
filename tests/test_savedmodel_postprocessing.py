"""Soft-NMS and box voting travel inside the SavedModel: a tiny Faster R-CNN exported with
TEST.SOFT_NMS (gaussian) and TEST.BBOX_VOTE (AVG), served by a fresh interpreter that imports only
TensorFlow, gives the Predictor's detections; its graph holds stock TensorFlow ops only."""

import json
import subprocess
import sys

import cv2
import keras
import numpy as np
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.python.framework import op_def_registry

from conftest import shared_path
from savedmodel.export import export_saved_model
from savedmodel_fixtures import assert_same_detections
from training_fixtures import tiny_cfg
from tfdet.inference import Predictor

OVERRIDES = (
    "MODEL.MASK_ON", "False", "MODEL.KEYPOINTS_ON", "False", "TEST.SCORE_THRESH", "0.2", "TEST.DETECTIONS_PER_IM", "15",
    "TEST.SOFT_NMS.ENABLED", "True", "TEST.SOFT_NMS.METHOD", "gaussian", "TEST.BBOX_VOTE.ENABLED", "True",
    "TEST.BBOX_VOTE.SCORING_METHOD", "AVG", "TEST.BBOX_VOTE.VOTE_TH", "0.7",
)  # fmt: skip

CHILD = r"""
import json, sys
import numpy as np
import tensorflow as tf
serve = tf.saved_model.load(sys.argv[1]).signatures["image_tensor"]
image = np.load(sys.argv[2])
result = {k: v.numpy().tolist() for k, v in serve(images=tf.constant(image)).items()}
result["our_modules"] = sorted(m for m in sys.modules if m.split(".")[0] in ("tfdet", "porting", "savedmodel"))
print(json.dumps(result))
"""


def test_soft_nms_and_voting_are_served_as_the_predictor_gives_them(tmp_path):
    cfg = tiny_cfg(*OVERRIDES)
    keras.utils.set_random_seed(0)
    predictor = Predictor(cfg)
    weights = tmp_path / "model.weights.h5"
    predictor.model.save_weights(weights)
    out = export_saved_model(cfg, weights, tmp_path / "serving" / "1")
    image = cv2.resize(cv2.imread(str(sorted(shared_path("data", "detectron_demo").glob("*.jpg"))[0])), (200, 150))
    np.save(tmp_path / "image.npy", image[None, :, :, ::-1])  # image_tensor takes RGB
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(out), str(tmp_path / "image.npy")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    want = predictor.predict(image)  # while the child loads the model
    stdout, stderr = child.communicate(timeout=300)
    assert child.returncode == 0, stderr[-3000:]
    served = json.loads(stdout.strip().splitlines()[-1])
    assert served.pop("our_modules") == []
    count = served["num_detections"][0]
    assert count >= 5 and count == len(want["scores"])
    got = {"boxes": np.array(served["detection_boxes"][0][:count], np.float32),
           "scores": np.array(served["detection_scores"][0][:count], np.float32),
           "classes": np.array(served["detection_classes"][0][:count], np.int32)}  # fmt: skip
    assert_same_detections(got, want)
    check_stock_ops(out)


def check_stock_ops(out):
    """Every op of the SavedModel's graphs is registered in stock TensorFlow (TF Serving loads it)."""
    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((out / "saved_model.pb").read_bytes())
    for meta_graph in saved.meta_graphs:
        library = meta_graph.graph_def.library
        functions = {f.signature.name for f in library.function}
        ops = {node.op for node in meta_graph.graph_def.node} | {n.op for f in library.function for n in f.node_def}
        assert "While" in ops  # the soft-NMS loop
        assert sorted(op for op in ops - functions if op_def_registry.get(op) is None) == []
