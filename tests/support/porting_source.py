"""The porting tests' model (test_porting.py, test_porting_cli.py): Detectron's Mask R-CNN R-50-FPN config
(CONFIG) with 8-wide bottlenecks and small test sizes (SMALL); the module-scoped fixtures `cfg` and `source` (the
model with random weights moved off their initial values, and its blobs in Detectron's layout); `target_model` for
a file's weights to fill and `same_weights` to compare two models."""

import numpy as np
import pytest

from support.paths import shared_path
from support.porting_fixtures import held
from tfdet.config import load_config
from tfdet.layers import placeholder_initialization
from tfdet.modeling import build_model
from tfdet.modeling.detectron_names import model_blobs

CONFIG = shared_path("detectron", "configs", "12_2017_baselines", "e2e_mask_rcnn_R-50-FPN_1x.yaml")
# 8-wide bottlenecks: every blob keeps its name and the stage outputs their 256-2048 channels; the file holds
# 24 M values instead of 44 M to pickle, read, transpose and write (porting does not depend on the widths).
SMALL = ["MODEL.NUM_CLASSES", "4", "TEST.SCALE", "256", "TEST.MAX_SIZE", "384", "TEST.SCORE_THRESH", "0.0",
         "TEST.RPN_PRE_NMS_TOP_N", "200", "TEST.RPN_POST_NMS_TOP_N", "100", "TEST.DETECTIONS_PER_IM", "10",
         "RESNETS.WIDTH_PER_GROUP", "8"]  # fmt: skip


@pytest.fixture(scope="module")
def cfg():
    return load_config(CONFIG, SMALL)


@pytest.fixture(scope="module")
def source(cfg):
    """A model with random weights and its Detectron-layout blobs, as a trained file holds them."""
    model = build_model(cfg)
    rng = np.random.default_rng(0)
    values = {}
    for variable in model.weights:  # move every weight away from its initial value
        noise = np.float32(0.01) * rng.standard_normal(variable.shape, dtype=np.float32)
        values[id(variable)] = variable.numpy() + noise
        variable.assign(values[id(variable)])
    entries = model_blobs(model, cfg.MRCNN.ROI_MASK_HEAD)
    return model, {name: to_caffe2(values[id(variable)]) for name, variable, to_caffe2, _ in entries}


def same_weights(a, b):
    """Whether two models hold the same values in the same variables (read without copies)."""
    pairs = zip(a.weights, b.weights)
    return len(a.weights) == len(b.weights) and all(np.array_equal(held(x), held(y)) for x, y in pairs)


def target_model(cfg):
    """A model for the file's weights to fill: zero kernels (no random draws for 44 M parameters)."""
    with placeholder_initialization():
        return build_model(cfg)
