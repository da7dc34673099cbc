"""RPN head and its proposals against Caffe2-definition numpy references (C4 and FPN)."""

import keras
import numpy as np
import pytest

from support import numpy_reference as ref
from support.numpy_heads import conv, relu
from tfdet.config import load_config
from tfdet.modeling.detectron_names import model_blobs
from tfdet.modeling.registry import BodyOutput
from tfdet.modeling.rpn import add_proposals, add_rpn_head, rpn_levels

C4 = ["MODEL.CONV_BODY", "ResNet.add_ResNet50_conv4_body", "RPN.SIZES", "(32, 64, 128, 256, 512)"]
FPN = ["MODEL.CONV_BODY", "FPN.add_fpn_ResNet50_conv5_body", "FPN.FPN_ON", "True", "FPN.MULTILEVEL_RPN", "True",
       "FPN.MULTILEVEL_ROIS", "True"]  # fmt: skip


def rpn_model(cfg, dim, image_size):
    """A model from per-level feature inputs to the RPN outputs and the proposals."""
    levels = [level for level, _, _ in rpn_levels(cfg)]
    inputs = {level: keras.Input((image_size // 2**level, image_size // 2**level, dim), batch_size=1) for level in levels}
    im_info = keras.Input((3,), batch_size=1)
    outputs = add_rpn_head(cfg, BodyOutput(inputs, dim))
    proposals = add_proposals(cfg, outputs, im_info)
    model = keras.Model([*inputs.values(), im_info], [t for o in outputs for t in o[1:]] + list(proposals))
    return model, levels


@pytest.mark.parametrize("variant,dim,image_size", [("C4", 32, 256), ("FPN", 16, 256)])
def test_rpn_head_and_proposals_match_caffe2(rng, variant, dim, image_size):
    overrides = (C4 if variant == "C4" else FPN) + ["TEST.RPN_PRE_NMS_TOP_N", "200", "TEST.RPN_POST_NMS_TOP_N", "50"]
    cfg = load_config(overrides=overrides)
    model, levels = rpn_model(cfg, dim, image_size)
    # Draw each blob in Caffe2 layout and load it through the porting rule.
    blobs = {}
    for name, variable, to_caffe2, to_keras in model_blobs(model):
        shape = to_caffe2(np.zeros(variable.shape, np.float32)).shape
        blobs[name] = rng.normal(0, 0.1, shape)
        variable.assign(to_keras(blobs[name]).astype(np.float32))
    tag = "_fpn2" if variant == "FPN" else ""
    features = {lvl: rng.normal(0, 1, (1, dim, image_size // 2**lvl, image_size // 2**lvl)) for lvl in levels}
    im_info = np.array([[image_size, image_size, 1.0]], np.float32)
    outputs = model([*(np.transpose(f, (0, 2, 3, 1)).astype(np.float32) for f in features.values()), im_info])
    worst = 0.0
    per_level = []
    for i, level in enumerate(levels):
        hidden = relu(conv(features[level], blobs[f"conv_rpn{tag}_w"], blobs[f"conv_rpn{tag}_b"], pad=1))
        probs = 1 / (1 + np.exp(-conv(hidden, blobs[f"rpn_cls_logits{tag}_w"], blobs[f"rpn_cls_logits{tag}_b"])))
        deltas = conv(hidden, blobs[f"rpn_bbox_pred{tag}_w"], blobs[f"rpn_bbox_pred{tag}_b"])
        for ours, want in ((outputs[2 * i], probs), (outputs[2 * i + 1], deltas)):
            want = np.transpose(want, (0, 2, 3, 1))
            worst = max(worst, np.abs(np.asarray(ours) - want).max() / np.abs(want).max())
        per_level.append((np.transpose(probs[0], (1, 2, 0)), np.transpose(deltas[0], (1, 2, 0))))
    assert worst < 1e-4
    # Proposals: Detectron's per-level GenerateProposals then the global top-N, in numpy.
    boxes, scores = [], []
    for (probs, deltas), (level, stride, cell) in zip(per_level, rpn_levels(cfg)):
        b, s = ref.proposals_one_image(probs, deltas, cell, stride, im_info[0], 200, 50, 0.7, 0)
        boxes.append(b)
        scores.append(s)
    order = np.argsort(-np.concatenate(scores), kind="stable")[:50]
    want_boxes = np.concatenate(boxes)[order]
    got_boxes, got_scores, num = (np.asarray(t) for t in outputs[-3:])
    assert int(num[0]) == len(want_boxes)
    np.testing.assert_allclose(got_boxes[0, : len(want_boxes)], want_boxes, atol=2e-2)
    np.testing.assert_allclose(got_scores[0, : len(want_boxes)], np.concatenate(scores)[order], atol=1e-5)


def test_rpn_weight_names_and_sharing():
    model, _ = rpn_model(load_config(overrides=FPN), 16, 128)
    names = sorted(name for name, *_ in model_blobs(model))
    assert names == sorted(f"{n}_fpn2_{s}" for n in ("conv_rpn", "rpn_cls_logits", "rpn_bbox_pred") for s in "wb")
    model, _ = rpn_model(load_config(overrides=C4), 16, 128)
    shapes = {name: to_c2(np.zeros(v.shape)).shape for name, v, to_c2, _ in model_blobs(model)}
    assert shapes["rpn_cls_logits_w"] == (15, 16, 1, 1) and shapes["rpn_bbox_pred_w"] == (60, 16, 1, 1)
