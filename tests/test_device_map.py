"""TFDET.DEVICE_MAP (model parallelism): parts of zoo models, clear errors, and, on 4 logical CPUs (conftest.py),
the traced training step (forward and gradient ops of the mapped parts on /CPU:1, the rest not), the same update
as without a map, the inference model, and (slow) mirrored replicas on /CPU:0 and /CPU:2 shifting a part to /CPU:1
and /CPU:3."""

import pathlib
import warnings

import numpy as np
import pytest

from support.training_fixtures import (
    SMALL_GRAPH,
    first_batch,
    functions_run_eagerly,
    shapes_images,
    shapes_roidb,
    tiny_cfg,
)
from tfdet.config import ConfigError, load_config
from tfdet.layers import placeholder_initialization
from tfdet.modeling import build_model
from tfdet.modeling.detectron_names import model_blobs
from tfdet.modeling.device_map import PARTS, apply_device_map, layer_devices, leaf_layers, model_parts, resolve_device

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
ZOO = REPO_ROOT.parent / "shared" / "detectron" / "configs" / "12_2017_baselines"
# The models of the traced steps (tracing and first running a step costs in proportion to its ops): a Faster
# R-CNN for the single-device steps and the inference model (a RoI head mapped: RoIAlign and its custom gradient cross
# devices), an RPN-only model for the mirrored step (half the Faster R-CNN's ops; any mapped part shows the
# replicas' shift).
FASTER_RCNN = (*SMALL_GRAPH, "MODEL.MASK_ON", "False")
RPN_ONLY = (*FASTER_RCNN, "MODEL.RPN_ONLY", "True", "MODEL.FASTER_RCNN", "False")
MAP = "{res5: /CPU:1, box_head: CPU:1}"
MAPPED_PARTS = {"res5", "box_head"}
MIRRORED_MAP = "{rpn: /CPU:1}"
# Ops of a mapped layer that stay with the variables (the replica's device), by design.
VARIABLE_OPS = {"ReadVariableOp", "Placeholder"}
# One device vs two devices on the same batch: the same ops, gradient sums in another order.
UPDATE_TOLERANCE = 1e-5


def zoo_cfg(name, *overrides):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zoo files use renamed keys
        return load_config(ZOO / name, list(overrides))


# ---- in this process: parts, errors, config ----


@pytest.mark.parametrize("name, parts", [
    ("e2e_mask_rcnn_R-50-C4_1x.yaml", {"res1", "res2", "res3", "res4", "res5", "rpn", "box_head", "mask_head"}),
    ("e2e_keypoint_rcnn_R-50-FPN_1x.yaml", set(PARTS) - {"mask_head"}),
])
def test_every_weight_of_zoo_models_belongs_to_a_part(name, parts):
    with placeholder_initialization():
        model = build_model(zoo_cfg(name))
    found = model_parts(model)
    assert set(found) == parts
    in_parts = {layer for layers in found.values() for layer in layers}
    assert {layer.name for layer, _ in leaf_layers(model) if layer.weights} <= in_parts


def test_c4_box_head_takes_the_roi_res5_stage_unless_res5_is_mapped():
    with placeholder_initialization():
        model = build_model(zoo_cfg("e2e_mask_rcnn_R-50-C4_1x.yaml"))
    cpu = resolve_device("/CPU:0")
    box_only = layer_devices(load_config(None, ["TFDET.DEVICE_MAP", "{box_head: /CPU:0}"]), model)
    assert {"pool5", "res5_0_branch2a", "res5_2_sum", "res5_pool", "cls_score", "bbox_pred"} <= set(box_only)
    assert set(box_only.values()) == {cpu} and not {"res4_5_sum", "mask_pool5", "conv5_mask"} & set(box_only)
    both = layer_devices(load_config(None, ["TFDET.DEVICE_MAP", "{box_head: /CPU:0, res5: /CPU:0}"]), model)
    assert set(both) == set(box_only)


@pytest.fixture(scope="module")
def tiny_model():
    return build_model(tiny_cfg(*SMALL_GRAPH))


@pytest.mark.parametrize("device_map, message", [
    ("{res6: /CPU:0}", r"unknown part\(s\) res6; valid parts: res1, res2, res3, res4, res5, fpn, rpn, box_head"),
    ("{keypoint_head: /CPU:0}", r"this model has no keypoint_head; its parts: res1, .*mask_head"),
    ("{res5: /GPU:7}", r"unknown device '/GPU:7'; this process has /CPU:0"),
    ("{res5: nowhere}", r"unknown device 'nowhere'"),
])
def test_bad_device_maps_are_clear_errors(tiny_model, device_map, message):
    with pytest.raises(ValueError, match=message):
        apply_device_map(load_config(None, ["TFDET.DEVICE_MAP", device_map]), tiny_model)


def test_device_names_in_every_spelling_resolve_to_the_logical_device():
    import tensorflow as tf

    spellings = ("/CPU:0", "CPU:0", "cpu:0", "/device:CPU:0", "/job:localhost/replica:0/task:0/device:CPU:0")
    assert {resolve_device(name) for name in spellings} == {tf.config.list_logical_devices("CPU")[0].name}


def test_device_map_is_a_mapping_valued_config_key(tmp_path):
    path = tmp_path / "map.yaml"
    path.write_text("TFDET:\n  DEVICE_MAP:\n    res5: /GPU:1\n    mask_head: /GPU:1\n")
    cfg = load_config(path)
    assert cfg.TFDET.DEVICE_MAP == {"res5": "/GPU:1", "mask_head": "/GPU:1"}
    assert load_config(None, ["TFDET.DEVICE_MAP", MAP]).TFDET.DEVICE_MAP == {"res5": "/CPU:1", "box_head": "CPU:1"}
    dumped = tmp_path / "dumped.yaml"
    dumped.write_text(cfg.dump())
    assert load_config(dumped) == cfg and load_config().TFDET.DEVICE_MAP == {}
    with pytest.raises(ConfigError, match="expects a mapping, got str"):
        load_config(None, ["TFDET.DEVICE_MAP", "res5"])
    with pytest.raises(ConfigError, match="expects str: str entries, got int 1"):
        load_config(None, ["TFDET.DEVICE_MAP", "{res5: 1}"])


# ---- the traced and run steps, on the test process's logical CPUs (conftest.py) ----


def _placements(graph, model):
    from tfdet.engine.op_devices import op_placements

    return [[p.device, p.gradient, p.part, p.type, p.name] for p in op_placements(graph, model)]


def _weights(model):
    return {name: variable.numpy() for name, variable, _, _ in model_blobs(model)}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """One Faster R-CNN training step without and with MAP on /CPU:0 (the mapped one traced first: the step
    runs that graph) and the inference model with MAP: {name: placements, losses, weights or detection counts}."""
    import tensorflow as tf

    from tfdet.engine.op_devices import replicated_batch, trace_training_step
    from tfdet.engine.trainer import Trainer
    from tfdet.graph_options import cpu_graph_options

    out_dir = tmp_path_factory.mktemp("device_map")
    shapes_images(out_dir / "shapes", num_images=4)
    batch = first_batch(tiny_cfg(*FASTER_RCNN), shapes_roidb(out_dir / "shapes", min_objects=2, generate=False))
    report = {}
    for name, device_map in (("plain", "{}"), ("mapped", MAP)):
        trainer = Trainer(tiny_cfg(*FASTER_RCNN, "TFDET.DEVICE_MAP", device_map), out_dir / name, progress=False)
        initial = _weights(trainer.model)
        if name == "mapped":
            report["training"] = _placements(trace_training_step(trainer, batch), trainer.model)
        # Without a map the reference step runs op by op (no trace); the mapped one runs its traced graph.
        with functions_run_eagerly(name == "plain"):
            report[f"losses_{name}"] = trainer.train_step(replicated_batch(trainer.strategy, batch))
        report[f"weights_{name}"] = (initial, _weights(trainer.model))

    model = build_model(tiny_cfg(*FASTER_RCNN, "TFDET.DEVICE_MAP", MAP))
    images = {"images": batch["images"], "image_info": batch["image_info"]}
    function = tf.function(model, autograph=False)  # as the Predictor traces it
    report["inference"] = _placements(function.get_concrete_function(images).graph, model)
    with cpu_graph_options():  # as the Predictor runs it
        report["num_detections"] = function(images)["num_detections"].numpy().tolist()

    return report


@pytest.fixture(scope="module")
def mirrored_report(tmp_path_factory):
    """A mirrored RPN-only step over /CPU:0 and /CPU:2 with MIRRORED_MAP: its placements and losses."""
    import tensorflow as tf

    from tfdet.engine.op_devices import replicated_batch, trace_training_step
    from tfdet.engine.trainer import Trainer

    out_dir = tmp_path_factory.mktemp("mirrored_device_map")
    shapes_images(out_dir / "shapes", num_images=4)
    mirrored_cfg = tiny_cfg(*RPN_ONLY, "TFDET.DEVICE_MAP", MIRRORED_MAP, "NUM_GPUS", "2", "TRAIN.IMS_PER_BATCH", "1")
    batch = first_batch(mirrored_cfg, shapes_roidb(out_dir / "shapes", min_objects=2, generate=False))
    strategy = tf.distribute.MirroredStrategy(["/CPU:0", "/CPU:2"])
    trainer = Trainer(mirrored_cfg, out_dir / "mirrored", strategy=strategy, progress=False)
    return {"mirrored": _placements(trace_training_step(trainer, batch), trainer.model),
            "losses_mirrored": trainer.train_step(replicated_batch(strategy, batch))}


def test_mapped_parts_run_forward_and_backward_on_device_1_and_the_rest_elsewhere(report):
    placements = report["training"]
    mapped = [p for p in placements if p[2] in MAPPED_PARTS and p[3] not in VARIABLE_OPS]
    assert {device for device, *_ in mapped} == {"/CPU:1"}
    for part in MAPPED_PARTS:  # every mapped part has forward and gradient ops there
        assert {gradient for _, gradient, p, *_ in mapped if p == part} == {True, False}, part
    # Nothing else runs there, but the sums of the mapped layers' gradients and the zero gradients that
    # tf.custom_gradient (RoIAlign) gives its pass-through outputs, colocated with the mapped layers.
    others_there = [p for p in placements if p[0] == "/CPU:1" and p[2] not in MAPPED_PARTS]
    assert others_there and all(gradient for _, gradient, *_ in others_there)
    assert {p[3] for p in others_there} <= {"AddN", "ConcatV2", "Const", "Identity", "ZerosLike"}
    assert {p[0] for p in placements if p[2] not in MAPPED_PARTS} >= {"(default)"}
    assert {p[0] for p in placements if p[2] in set(PARTS) - MAPPED_PARTS} == {"(default)"}


def test_one_step_with_a_device_map_updates_the_weights_as_without(report):
    np.testing.assert_allclose(list(report["losses_mapped"].values()), list(report["losses_plain"].values()), rtol=1e-6)
    (plain_initial, plain_updated), (mapped_initial, mapped_updated) = report["weights_plain"], report["weights_mapped"]
    for name, value in plain_initial.items():
        np.testing.assert_array_equal(mapped_initial[name], value, err_msg=name)
    updates = {n: (plain_updated[n] - plain_initial[n], mapped_updated[n] - mapped_initial[n]) for n in plain_initial}
    assert max(np.abs(one).max() for one, _ in updates.values()) > 1e-3  # the step really trained
    difference = np.sqrt(sum(np.sum((two - one) ** 2) for one, two in updates.values()))
    assert difference / np.sqrt(sum(np.sum(one**2) for one, _ in updates.values())) < UPDATE_TOLERANCE


def test_inference_model_runs_mapped_parts_on_device_1(report):
    placements = report["inference"]
    mapped = {p[0] for p in placements if p[2] in MAPPED_PARTS and p[3] not in VARIABLE_OPS}
    assert mapped == {"/CPU:1"}
    assert "/CPU:1" not in {p[0] for p in placements if p[2] not in MAPPED_PARTS}
    assert len(report["num_detections"]) == 2  # it ran, one count per image


# Slow (two replicas of the step traced, ~7 s of a core): model parallelism inside data parallelism. By default the
# mapped parts' placement is checked on one replica above.
@pytest.mark.slow
def test_mirrored_replicas_shift_the_mapped_part_by_their_device_offset(mirrored_report):
    report = mirrored_report
    devices = {}
    for device, _, part, op_type, name in report["mirrored"]:
        if part == "rpn" and op_type not in VARIABLE_OPS:
            devices.setdefault(name.startswith("replica_1/"), set()).add(device)
    assert devices == {False: {"/CPU:1"}, True: {"/CPU:3"}}
    replica_devices = {p[0] for p in report["mirrored"]
                       if p[2] in {"res2", "res5", "fpn"} and p[3] not in VARIABLE_OPS}
    assert replica_devices == {"/CPU:0", "/CPU:2"}
    assert all(np.isfinite(list(report["losses_mirrored"].values())))
