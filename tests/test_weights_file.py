"""What a weights argument names, decided once (`tfdet.weights.weights_file`) for the Predictor, the exporter,
evaluation, tfdet.infer and TRAIN.WEIGHTS: kinds, and one-line errors for a missing or unknown file."""

import pickle

import keras
import pytest
import tensorflow as tf

from support.training_fixtures import TINY_CONFIG
from tfdet.config import load_config
from tfdet.inference import Predictor
from tfdet.weights.weights_file import (
    DETECTRON_PICKLE,
    KERAS_WEIGHTS,
    TRAINING_CHECKPOINT,
    WeightsFile,
    weights_file,
)


def a_checkpoint(directory):
    """A tfdet-style training checkpoint (TF's object checkpoint with a `model` and its index) in `directory`."""
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(directory), 2, "model_iter")
    return manager.save(checkpoint_number=3)


def test_kinds_of_weights_files(tmp_path):
    (tmp_path / "R-50.pkl").write_bytes(pickle.dumps({"blobs": {}}))
    (tmp_path / "model.weights.h5").write_bytes(b"\x89HDF")
    prefix = a_checkpoint(tmp_path / "run")
    assert weights_file(str(tmp_path / "R-50.pkl")) == WeightsFile(str(tmp_path / "R-50.pkl"), DETECTRON_PICKLE)
    assert weights_file(tmp_path / "model.weights.h5").kind == KERAS_WEIGHTS
    # a checkpoint, by its prefix or its folder (the newest one), only where checkpoints are accepted
    assert weights_file(prefix, checkpoints=True) == WeightsFile(prefix, TRAINING_CHECKPOINT)
    assert weights_file(str(tmp_path / "run"), checkpoints=True) == WeightsFile(prefix, TRAINING_CHECKPOINT)
    with pytest.raises(FileNotFoundError) as error:
        weights_file(prefix)
    assert str(error.value) == (
        f"weights {prefix!r} is neither a Detectron .pkl nor a .weights.h5 file (a training run's weights are "
        "its model_final.weights.h5)"
    )


@pytest.mark.parametrize("name", ["missing.weights.h5", "missing.pkl"])
def test_a_missing_file_is_one_line_naming_the_argument(tmp_path, name):
    with pytest.raises(FileNotFoundError) as error:
        weights_file(str(tmp_path / name), role="TRAIN.WEIGHTS", checkpoints=True)
    assert str(error.value) == f"TRAIN.WEIGHTS file not found: {tmp_path / name}"
    with pytest.raises(FileNotFoundError) as error:
        weights_file(str(tmp_path / "nothing.bin"), role="TRAIN.WEIGHTS", checkpoints=True)
    assert "neither a Detectron .pkl, a .weights.h5 file nor a tfdet training checkpoint" in str(error.value)


def test_predictor_refuses_a_missing_file_before_building_anything(tmp_path, monkeypatch):
    import tfdet.inference

    built = []
    monkeypatch.setattr(tfdet.inference, "build_model", lambda *args: built.append(args))
    cfg = load_config(TINY_CONFIG)
    with pytest.raises(FileNotFoundError) as error:
        Predictor(cfg, str(tmp_path / "model_final.weights.h5"))
    assert str(error.value) == f"weights file not found: {tmp_path / 'model_final.weights.h5'}" and not built
    with pytest.raises(FileNotFoundError, match="is neither a Detectron .pkl nor a .weights.h5 file"):
        Predictor(cfg, a_checkpoint(tmp_path / "run"))
    assert not built
