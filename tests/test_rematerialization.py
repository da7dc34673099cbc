"""TFDET.RECOMPUTE_BODY_STAGES: the training view that recomputes the body's trainable stages in the backward
pass gives the model's losses and gradients, really recomputes, and picks the right stages."""

import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from support.paths import REPO_ROOT
from support.training_fixtures import C4_MASK_RCNN, SMALL_GRAPH, first_batch, model_inputs, shapes_roidb, tiny_cfg
from tfdet.config import load_config
from tfdet.engine.trainer import Trainer
from tfdet.layers.recomputed_segment import RecomputedSegment
from tfdet.modeling import build_model
from tfdet.modeling.rematerialization import body_stage_segments, recomputing_view, training_forward
from tfdet.modeling.training_graph import loss_terms

TINY_STAGES = [("pool1", "res2_2_sum"), ("res2_2_sum", "res3_3_sum"), ("res3_3_sum", "res4_5_sum"),
               ("res4_5_sum", "res5_2_sum")]


def losses_and_gradients(forward, variables, inputs):
    """The loss terms and the gradients of their sum w.r.t. `variables`, in one traced step; also the step's
    graph, to count its ops."""

    def step(inputs):
        with tf.GradientTape() as tape:
            losses = loss_terms(forward(inputs, training=True))
            total = tf.add_n(list(losses.values()))
        return losses, tape.gradient(total, variables)

    traced = tf.function(step, autograph=False)
    losses, gradients = traced(inputs)
    return losses, gradients, traced.get_concrete_function(inputs).graph


def forward_convolutions(graph, layer_name):
    """How many convolution ops of layer `layer_name` run forward in `graph` (its gradients' ops excluded)."""
    scope = re.compile(rf"{layer_name}(_\d+)?")
    return sum(op.type == "Conv2D" and "gradient" not in op.name
               and any(scope.fullmatch(part) for part in op.name.split("/")) for op in graph.get_operations())


def test_recomputed_stages_give_the_same_losses_and_gradients(tmp_path):
    cfg = tiny_cfg(*SMALL_GRAPH)  # FREEZE_AT 0: every stage of the body trains
    keras.utils.set_random_seed(0)
    model = build_model(cfg, training=True)
    segments = body_stage_segments(model)
    assert segments == TINY_STAGES
    view = recomputing_view(model, segments)
    recomputed = [layer.name for layer in view.layers if isinstance(layer, RecomputedSegment)]
    assert recomputed == [f"{output}_recomputed" for _, output in TINY_STAGES]
    assert {v.path for v in view.trainable_variables} == {v.path for v in model.trainable_variables}

    inputs = model_inputs(model, first_batch(cfg, shapes_roidb(tmp_path, num_images=4, min_objects=2)))
    variables = model.trainable_variables
    kept_losses, kept_gradients, kept_graph = losses_and_gradients(model, variables, inputs)
    losses, gradients, graph = losses_and_gradients(view, variables, inputs)
    for name, value in kept_losses.items():
        np.testing.assert_allclose(losses[name].numpy(), value.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
    for variable, kept, got in zip(variables, kept_gradients, gradients):
        scale = max(float(tf.reduce_max(tf.abs(kept))), 1e-6)
        np.testing.assert_allclose(got.numpy() / scale, kept.numpy() / scale, atol=1e-4, err_msg=variable.path)
    # The recomputing step runs each stage's convolutions twice (forward, then again in the backward pass).
    for layer_name in ("res2_0_branch2a", "res3_1_branch2b", "res5_2_branch2c"):
        assert forward_convolutions(kept_graph, layer_name) == 1, layer_name
        assert forward_convolutions(graph, layer_name) == 2, layer_name


@pytest.mark.parametrize("overrides, excluded, expected", [
    (("TRAIN.FREEZE_AT", "2"), (), TINY_STAGES[1:]),
    (("TRAIN.FREEZE_AT", "2"), ("res4",), [TINY_STAGES[1], TINY_STAGES[3]]),
    ((*C4_MASK_RCNN, "TRAIN.FREEZE_AT", "2"), (), TINY_STAGES[1:3]),
], ids=["frozen res2 and stem", "a stage TFDET.DEVICE_MAP moves", "C4: res5 is the box head, not the body"])
def test_body_stage_segments_leave_frozen_moved_and_head_stages(overrides, excluded, expected):
    model = build_model(tiny_cfg(*overrides), training=True)
    assert body_stage_segments(model, excluded_stages=excluded) == expected


def test_a_retinanet_trainer_recomputes_its_body_stages(tmp_path):
    cfg = load_config(REPO_ROOT / "configs" / "shapes_retinanet.yaml", ["TFDET.RECOMPUTE_BODY_STAGES", "True"])
    trainer = Trainer(cfg, tmp_path / "out", roidb=shapes_roidb(tmp_path, num_images=2), progress=False)
    recomputed = [layer.name for layer in trainer.forward.layers if isinstance(layer, RecomputedSegment)]
    assert recomputed and all(name.startswith("res") for name in recomputed)
    outputs = trainer.train_step(next(iter(trainer.distributed_dataset(0))))
    assert all(np.isfinite(value) for value in outputs.values())


def test_training_forward_is_the_model_itself_when_off():
    cfg = tiny_cfg("TFDET.RECOMPUTE_BODY_STAGES", "False", "MODEL.KEYPOINTS_ON", "False")
    model = build_model(cfg, training=True)
    assert training_forward(cfg, model) is model
