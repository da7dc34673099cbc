"""A DA-trained checkpoint of the DA fork (model_final.pth: the detector plus `da_heads.*`, with its optimizer,
scheduler and iteration) ports with `python -m porting maskrcnn-benchmark --cfg <the fork's yaml>`: every
detector weight lands in the tfdet model, and the ten domain-classifier tensors are reported as ignored on
purpose (the inference model has no domain classifier; detections do not depend on it)."""

import numpy as np

from porting.__main__ import main as porting_main
from support.benchmark_checkpoints import assert_model_holds, benchmark_state, random_blobs, torch_writer
from support.fork_configs import quiet_load, write_yaml
from support.porting_fixtures import scratch_path  # noqa: F401 (fixture)
from tfdet.config import load_config
from tfdet.layers import placeholder_initialization
from tfdet.modeling import build_model

YAML = "e2e_da_faster_rcnn_R_50_C4_cityscapes_to_foggy_cityscapes.yaml"
NARROW = ["MODEL.RESNETS.WIDTH_PER_GROUP", "8"]  # 8-channel bottlenecks: a small file
DA_REASON = "DA fork's domain classifier (its outputs feed only the DA losses: detections do not depend on it)"


def da_head_tensors(rng, body_channels=1024, instance_features=2048):
    """The fork's DomainAdaptationModule parameters (modeling/da_heads/da_heads.py) on R-50-C4: the image-level
    head's 1x1 convs on res4 (1024 -> 512 -> 1), the instance head's fcs on pooled res5 (2048 -> 1024 -> 1024 -> 1)."""
    shapes = {
        "imghead.conv1_da": ((512, body_channels, 1, 1), 512), "imghead.conv2_da": ((1, 512, 1, 1), 1),
        "inshead.fc1_da": ((1024, instance_features), 1024), "inshead.fc2_da": ((1024, 1024), 1024),
        "inshead.fc3_da": ((1, 1024), 1),
    }  # fmt: skip
    tensors = {}
    for layer, (weight, bias) in shapes.items():
        tensors[f"da_heads.{layer}.weight"] = rng.normal(0, 0.01, weight).astype(np.float32)
        tensors[f"da_heads.{layer}.bias"] = np.zeros(bias, np.float32)
    return tensors


def test_da_checkpoint_ports_with_the_forks_yaml(tmp_path, scratch_path, capsys, rng):
    path = write_yaml(tmp_path, YAML)
    cfg, _ = quiet_load(path, NARROW)
    with placeholder_initialization():
        model = build_model(cfg)
    blobs = random_blobs(model, cfg.MRCNN.ROI_MASK_HEAD)
    state = {**benchmark_state(blobs, c4=True), **da_head_tensors(rng)}
    checkpoint = {
        "model": state, "iteration": np.int64(69999),
        "optimizer": {"state": {}, "param_groups": [{"lr": 1e-4, "momentum": 0.9, "params": [0, 1]}]},
        "scheduler": {"last_epoch": 69999, "milestones": [50000], "base_lrs": [0.001, 0.002]},
    }  # fmt: skip
    torch_writer.write_zip(scratch_path / "model_final.pth", checkpoint)
    command = ["maskrcnn-benchmark", "--cfg", str(path), "--weights", str(scratch_path / "model_final.pth"),
               "--out", str(scratch_path / "out"), *NARROW]  # fmt: skip
    assert porting_main(command) == 0
    printed = capsys.readouterr().out
    assert f"    10 x {DA_REASON}: da_heads.imghead.conv1_da.bias" in printed
    assert "checkpoint saved at iteration 69999" in printed
    assert "MISSING" not in printed and "unused (kept" not in printed
    assert f"loaded {len(blobs)} blobs" in printed
    with placeholder_initialization():
        reloaded = build_model(load_config(scratch_path / "out" / "config.yaml"))  # the translated config
    reloaded.load_weights(scratch_path / "out" / "model.weights.h5")
    assert_model_holds(reloaded, cfg.MRCNN.ROI_MASK_HEAD, blobs)
