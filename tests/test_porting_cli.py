"""`python -m porting`: the model built from the file's own config, preserved blobs, progress, errors.

One port runs `python -m porting` in a fresh interpreter, as a user does (its exit status, stdout and the
progress bar on stderr); the other commands run its `main` in this process.
"""

import pickle
import subprocess
import sys

import numpy as np
import pytest
import yaml

from porting import read_weight_file
from porting.__main__ import main as porting_main
from porting.file_config import FileConfigError, config_from_cfg_text
from support.paths import REPO_ROOT
from support.porting_fixtures import assert_same, scratch_path  # noqa: F401 (fixture)
from support.porting_source import CONFIG, SMALL, cfg, same_weights, source, target_model  # noqa: F401 (fixtures)
from tfdet.config import load_config

ATTR_DICT = "tag:yaml.org,2002:python/object/new:detectron.utils.collections.AttrDict"


class _AttrDict(dict):
    """Stands for Detectron's AttrDict when dumping a config the way Detectron saved it."""


def _represent_attr_dict(dumper, data):
    body = {"dictitems": dict(data), "state": {"__immutable__": True}}
    return dumper.represent_mapping(ATTR_DICT, body)


class _DetectronDumper(yaml.Dumper):
    """yaml.dump's default (unsafe) dumper: tuples as !!python/tuple, numpy arrays via __reduce__."""


_DetectronDumper.add_representer(_AttrDict, _represent_attr_dict)


def detectron_cfg_text(cfg, extra=None):
    """`yaml.dump(cfg)` as Detectron wrote it into model_final.pkl: AttrDict tags, tuples, numpy means."""

    def wrap(node):
        if isinstance(node, dict):
            return _AttrDict({key: wrap(value) for key, value in node.items()})
        return node

    tree = cfg.to_dict()
    tree["PIXEL_MEANS"] = np.array(cfg.PIXEL_MEANS, np.float64)
    tree.update(extra or {})
    return yaml.dump(wrap(tree), Dumper=_DetectronDumper)


def write_trained_pkl(path, blobs, cfg_text):
    """A trained file with the junk blobs an ImageNet-initialised Detectron run carries over."""
    junk = {"conv1_b": np.zeros(64, np.float32), "fc1000_w": np.full((10, 2048), 0.5, np.float32),
            "fc1000_b": np.arange(10, dtype=np.float32), "fc6_w_momentum": np.ones((2, 2), np.float32)}  # fmt: skip
    path.write_bytes(pickle.dumps({"blobs": {**blobs, **junk}, "cfg": cfg_text}, protocol=2))
    return path


def run_porting(*args):
    return subprocess.run([sys.executable, "-m", "porting", *map(str, args)], capture_output=True, text=True, cwd=REPO_ROOT)


def test_cfg_text_with_python_tags_rebuilds_the_config(cfg):
    text = detectron_cfg_text(cfg, {"SOME_FORK_KEY": 3})
    assert "!!python/tuple" in text and "AttrDict" in text and "_reconstruct" in text
    with pytest.warns(UserWarning, match="SOME_FORK_KEY"):
        rebuilt = config_from_cfg_text(text, "m.pkl", ["TEST.SCALE", "320"])
    assert rebuilt.MODEL.NUM_CLASSES == 4 and rebuilt.MODEL.CONV_BODY == cfg.MODEL.CONV_BODY
    assert rebuilt.TEST.SCALE == 320 and rebuilt.TEST.MAX_SIZE == cfg.TEST.MAX_SIZE
    np.testing.assert_array_equal(np.array(rebuilt.PIXEL_MEANS), np.array(cfg.PIXEL_MEANS))


@pytest.mark.parametrize(
    "text, message",
    [
        (None, "holds no config"),
        ("MODEL: {NUM_CLASSES: 4}\n", "lacks a usable MODEL.TYPE, MODEL.CONV_BODY"),
        ("MODEL: {TYPE: generalized_rcnn, CONV_BODY: [1, 2], NUM_CLASSES: 4}\n", "lacks a usable MODEL.CONV_BODY"),
        ("MODEL: [unclosed\n", "unreadable"),
    ],
)
def test_unusable_file_configs_ask_for_cfg(text, message):
    with pytest.raises(FileConfigError, match=f"{message}.*pass --cfg"):
        config_from_cfg_text(text, "m.pkl")


def test_port_without_cfg_then_export_preserves_unused_blobs(cfg, source, scratch_path, capsys):
    model, blobs = source
    path = write_trained_pkl(scratch_path / "model_final.pkl", blobs, detectron_cfg_text(cfg))
    out = scratch_path / "ported"
    done = run_porting("detectron", "--weights", path, "--out", out)
    assert done.returncode == 0, done.stderr
    assert "config saved in" in done.stdout and "preserved 3 unused blobs" in done.stdout
    assert "porting: 100%" in done.stderr  # the progress bar
    ported_cfg = load_config(out / "config.yaml")
    assert ported_cfg.MODEL.NUM_CLASSES == 4 and ported_cfg.TEST.SCALE == cfg.TEST.SCALE
    reloaded = target_model(ported_cfg)  # zero kernels: every value must come from the file
    reloaded.load_weights(out / "model.weights.h5")
    assert same_weights(model, reloaded)

    exported = scratch_path / "model_final_again.pkl"
    assert porting_main(["export-detectron", "--weights", str(out / "model.weights.h5"), "--out", str(exported)]) == 0
    assert "(3 preserved)" in capsys.readouterr().out
    saved = read_weight_file(exported).blobs
    assert set(saved) == set(blobs) | {"conv1_b", "fc1000_w", "fc1000_b"}  # momentum is not preserved
    np.testing.assert_array_equal(saved["fc1000_b"], np.arange(10, dtype=np.float32))
    for name, value in blobs.items():
        assert_same(saved[name], value, name)


def test_imagenet_file_without_cfg_is_refused_with_a_hint(tmp_path, capsys):
    path = tmp_path / "R-50.pkl"
    path.write_bytes(pickle.dumps({"conv1_w": np.zeros((64, 3, 7, 7), np.float32)}, protocol=2))
    assert porting_main(["detectron", "--weights", str(path), "--out", str(tmp_path / "out")]) == 1
    error = capsys.readouterr().err
    assert "holds no config" in error and "pass --cfg" in error
    assert not (tmp_path / "out").exists()


def test_export_without_config_next_to_weights_says_so(tmp_path, capsys):
    argv = ["export-detectron", "--weights", str(tmp_path / "x.weights.h5"), "--out", str(tmp_path / "x.pkl")]
    assert porting_main(argv) == 1
    assert "config.yaml does not exist, pass --cfg" in capsys.readouterr().err


def test_placeholder_initialization_fills_kernels_with_zeros_only_inside_the_block():
    from tfdet.layers import CaffeConv2D, FlattenDense, placeholder_initialization

    with placeholder_initialization():
        conv, dense = CaffeConv2D(4, 3, kernel_initializer="lecun_uniform"), FlattenDense(3)
        conv.build((None, 5, 5, 2))
        dense.build((None, 2, 2, 2))
    assert not conv.kernel.numpy().any() and not dense.kernel.numpy().any()
    random_conv = CaffeConv2D(4, 3, kernel_initializer="lecun_uniform")
    random_conv.build((None, 5, 5, 2))
    assert random_conv.kernel.numpy().std() > 0
