"""Training refuses an AffineChannel (frozen-BN) ResNet that would start from random weights, before anything
is built; it trains when the weights come from TRAIN.WEIGHTS or a checkpoint to resume. Every shipped config
passes that check, and (slow) starts with finite, moderate losses."""

import math
import time

import pytest
import tensorflow as tf

from support.paths import REPO_ROOT
from support.training_fixtures import shapes_roidb
from tfdet.config import load_config
from tfdet.config.errors import ConfigError
from tfdet.engine.checkpoint import CHECKPOINT_NAME, FINAL_WEIGHTS
from tfdet.engine.trainer import Trainer, refuse_affine_body_from_scratch
from tfdet.modeling.training_graph import loss_terms
from tfdet.train import main

SHIPPED_CONFIGS = sorted((REPO_ROOT / "configs").glob("*.yaml"))
R50_CONFIG = REPO_ROOT / "configs" / "shapes_mask_keypoint_R-50-FPN.yaml"
# The R-50-FPN config as it shipped before: Detectron's AffineChannel blocks, no TRAIN.WEIGHTS.
AFFINE_R50 = [
    "RESNETS.STEM_FUNC", "basic_bn_stem", "RESNETS.TRANS_FUNC", "bottleneck_transformation",
    "RESNETS.SHORTCUT_FUNC", "basic_bn_shortcut", "FPN.USE_GN", "False",
]  # fmt: skip
# The message names the config keys involved, the reason and each way out.
MESSAGE_PARTS = (
    "MODEL.CONV_BODY FPN.add_fpn_ResNet50_conv5_body", "RESNETS.TRANS_FUNC bottleneck_transformation",
    "AffineChannel", "TRAIN.WEIGHTS ''", "NaN", "Detectron does not check", "RESNETS.TRANS_FUNC bottleneck_gn_transformation",
    "TFDET.ALLOW_AFFINE_FROM_SCRATCH True",
)  # fmt: skip


def affine_cfg(output_dir, *overrides):
    return load_config(R50_CONFIG, [*AFFINE_R50, "OUTPUT_DIR", str(output_dir), *overrides])


def write_checkpoint(directory):
    """A real TF training checkpoint index in `directory`, as TRAIN.AUTO_RESUME finds one."""
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(step=tf.Variable(3)), str(directory), max_to_keep=1, checkpoint_name=CHECKPOINT_NAME
    )
    manager.save()


def test_cli_refuses_affine_body_from_scratch_before_building(tmp_path, capsys):
    tic = time.perf_counter()
    status = main(["--cfg", str(R50_CONFIG), *AFFINE_R50, "OUTPUT_DIR", str(tmp_path / "out")])
    seconds = time.perf_counter() - tic
    error = capsys.readouterr().err
    assert status == 2
    assert error.startswith("error: ") and error.count("\n") == 1, error
    for part in MESSAGE_PARTS:
        assert part in error, (part, error)
    assert seconds < 10, f"the refusal took {seconds:.1f} s: was a model built first?"
    assert not (tmp_path / "out").exists()  # refused before the checkpointer made the output folder


def test_trainer_refuses_affine_body_from_scratch(tmp_path):
    with pytest.raises(ConfigError, match="RESNETS.TRANS_FUNC bottleneck_transformation"):
        Trainer(affine_cfg(tmp_path), tmp_path, roidb=[], progress=False)


@pytest.mark.parametrize(
    "overrides",
    [
        ["TRAIN.WEIGHTS", "R-50.pkl"],  # initial weights (read later, by Trainer.initialize)
        ["TFDET.ALLOW_AFFINE_FROM_SCRATCH", "True"],  # the explicit opt-out
    ],
    ids=["train_weights", "opt_out"],
)
def test_affine_body_trains_with_initial_weights_or_opt_out(tmp_path, overrides):
    refuse_affine_body_from_scratch(affine_cfg(tmp_path, *overrides), str(tmp_path))


def test_affine_body_resumes_from_a_checkpoint(tmp_path):
    write_checkpoint(tmp_path)
    refuse_affine_body_from_scratch(affine_cfg(tmp_path), str(tmp_path))
    with pytest.raises(ConfigError, match="TRAIN.WEIGHTS ''"):  # not resumed: it would start from scratch
        refuse_affine_body_from_scratch(affine_cfg(tmp_path, "TRAIN.AUTO_RESUME", "False"), str(tmp_path))


def test_affine_body_with_final_weights_is_not_refused(tmp_path):
    (tmp_path / FINAL_WEIGHTS).write_bytes(b"")  # training is over: Trainer.train does nothing
    refuse_affine_body_from_scratch(affine_cfg(tmp_path), str(tmp_path))


@pytest.mark.parametrize("config", SHIPPED_CONFIGS, ids=lambda path: path.stem)
def test_shipped_configs_train_from_what_we_ship(tmp_path, config):
    cfg = load_config(config)
    assert cfg.TRAIN.WEIGHTS == "" and cfg.RESNETS.TRANS_FUNC == "bottleneck_gn_transformation"
    refuse_affine_body_from_scratch(cfg, str(tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize("config", SHIPPED_CONFIGS, ids=lambda path: path.stem)
def test_shipped_configs_first_losses_are_moderate(tmp_path, config):
    """One training step of each shipped config from its own initialisation: every loss term finite, the
    total below 20 (the AffineChannel R-50-FPN from scratch started at 437 and was NaN at iteration 2)."""
    cfg = load_config(config, ["TRAIN.USE_FLIPPED", "False"])
    roidb = shapes_roidb(tmp_path / "shapes", num_images=4)
    trainer = Trainer(cfg, tmp_path / "out", roidb=roidb, target_roidb=roidb, progress=False)
    losses = loss_terms(trainer.train_step(next(iter(trainer.distributed_dataset(0)))))
    assert all(math.isfinite(value) for value in losses.values()), losses
    assert sum(losses.values()) < 20, losses


def test_shipped_configs_found():
    assert {path.name for path in SHIPPED_CONFIGS} >= {
        "shapes_mask_keypoint_R-50-FPN.yaml", "shapes_tiny_mask_keypoint.yaml", "shapes_tiny_da_faster.yaml"
    }  # fmt: skip
