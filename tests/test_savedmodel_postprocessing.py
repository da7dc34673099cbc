"""Soft-NMS and box voting travel inside the SavedModel: a tiny Faster R-CNN exported with
TEST.SOFT_NMS (gaussian) and TEST.BBOX_VOTE (AVG), loaded back with tf.saved_model.load, gives the
Predictor's detections, and its graph holds stock TensorFlow ops only. (That a fresh interpreter
which never imports tfdet serves exported models is tests/test_savedmodel.py's check.)"""

import cv2
import keras
import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.python.framework import op_def_registry

from savedmodel.export import export_saved_model
from support.paths import shared_path
from support.savedmodel_fixtures import assert_same_detections
from support.training_fixtures import AFFINE_BODY, tiny_cfg
from tfdet.graph_options import cpu_graph_options
from tfdet.inference import Predictor

OVERRIDES = (
    "MODEL.MASK_ON", "False", "MODEL.KEYPOINTS_ON", "False", "TEST.SCORE_THRESH", "0.2", "TEST.DETECTIONS_PER_IM", "15",
    "TEST.SOFT_NMS.ENABLED", "True", "TEST.SOFT_NMS.METHOD", "gaussian", "TEST.BBOX_VOTE.ENABLED", "True",
    "TEST.BBOX_VOTE.SCORING_METHOD", "AVG", "TEST.BBOX_VOTE.VOTE_TH", "0.7",
    # The body and box head do not matter to the post-processing: AffineChannel and plain convs instead of
    # GroupNorm, half the ops to trace for the Predictor, the export and its gradient functions.
    *AFFINE_BODY,
)  # fmt: skip

def test_soft_nms_and_voting_are_exported_as_the_predictor_gives_them(tmp_path):
    cfg = tiny_cfg(*OVERRIDES)
    keras.utils.set_random_seed(0)
    predictor = Predictor(cfg)
    weights = tmp_path / "model.weights.h5"
    predictor.model.save_weights(weights)
    out = export_saved_model(cfg, weights, tmp_path / "serving" / "1")
    image = cv2.resize(cv2.imread(str(sorted(shared_path("data", "detectron_demo").glob("*.jpg"))[0])), (200, 150))
    want = predictor.predict(image)
    signature = tf.saved_model.load(str(out)).signatures["image_tensor"]
    with cpu_graph_options():  # as the Predictor runs (Grappler's rewrites are test_savedmodel.py's: a fresh TF)
        served = signature(images=tf.constant(image[None, :, :, ::-1]))
    count = int(served["num_detections"][0])
    assert count >= 5 and count == len(want["scores"])
    got = {"boxes": served["detection_boxes"].numpy()[0, :count],
           "scores": served["detection_scores"].numpy()[0, :count],
           "classes": served["detection_classes"].numpy()[0, :count]}  # fmt: skip
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
