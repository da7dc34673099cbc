"""Every command taking KEY VALUE overrides decodes them as Detectron's merge_cfg_from_list does ("''" is the
empty string) and refuses a bad value in one `error:` line on stderr with a non-zero exit status, never a
traceback: a value of the wrong type (refused while loading), a value tfdet does not implement (refused by
`tfdet.config.support` before any work, or by the model's builder)."""

import pathlib
import pickle

import pytest

from tfdet.data import shapes

TINY = pathlib.Path(__file__).resolve().parents[1] / "configs" / "shapes_tiny_mask_keypoint.yaml"
WRONG_TYPE = ("MODEL.NUM_CLASSES", "eighty")
UNKNOWN_PRECISION = ("TFDET.MIXED_PRECISION", "float8")
# Refused for inference and export; an empty string (typed "''") is TFDET.MIXED_PRECISION's default.
EMPTY_AND_REFUSED = ("TFDET.MIXED_PRECISION", "''", "TEST.BBOX_VOTE.SCORING_METHOD_BETA", "2")


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    """(annotation json, image folder) of one shapes image."""
    out = tmp_path_factory.mktemp("split")
    return shapes.generate(out, 1, seed=3, image_size=96, split_name="one"), out / "one"


def train(split, out, overrides):
    from tfdet.train import main

    return main(["--cfg", str(TINY), "OUTPUT_DIR", str(out / "train"), *overrides])


def evaluate(split, out, overrides):
    from tfdet.evaluate import main

    json_path, image_dir = split
    return main(["--cfg", str(TINY), "--weights", str(out / "none.weights.h5"), "--annotations", str(json_path),
                 "--images", str(image_dir), "--output", str(out), *overrides])  # fmt: skip


def infer(split, out, overrides):
    from tfdet.infer import main

    return main(["--cfg", str(TINY), "--weights", str(out / "none.weights.h5"), "--input", str(split[1]),
                 "--output", str(out), *overrides])  # fmt: skip


def infer_video(split, out, overrides):
    from tfdet.infer_video import main

    video = out / "clip.mp4"
    video.touch()
    return main(["--cfg", str(TINY), "--wts", str(out / "none.weights.h5"), "--output-dir", str(out), str(video),
                 *overrides])  # fmt: skip


def demo(split, out, overrides):
    from tfdet.demo import main

    return main(["--out", str(out / "demo"), *overrides])


def export(split, out, overrides):
    from savedmodel.export import main

    return main(["--cfg", str(TINY), "--weights", str(out / "none.weights.h5"), "--out", str(out / "m" / "1"),
                 *overrides])  # fmt: skip


def port_detectron(split, out, overrides):
    from porting.__main__ import main

    weights = out / "model.pkl"
    weights.write_bytes(pickle.dumps({"blobs": {}}, protocol=2))
    return main(["detectron", "--cfg", str(TINY), "--weights", str(weights), "--out", str(out / "port"), *overrides])


def port_maskrcnn_benchmark(split, out, overrides):
    from porting.__main__ import main

    return main(["maskrcnn-benchmark", "--cfg", str(TINY), "--weights", str(out / "model.pth"),
                 "--out", str(out / "port"), *overrides])  # fmt: skip


def export_detectron(split, out, overrides):
    from porting.__main__ import main

    return main(["export-detectron", "--cfg", str(TINY), "--weights", str(out / "none.weights.h5"),
                 "--out", str(out / "model.pkl"), *overrides])  # fmt: skip


# The commands that check the config against tfdet.config.support before any work; porting's build the model.
CHECKING = (train, evaluate, infer, infer_video, demo, export)
COMMANDS = CHECKING + (port_detectron, port_maskrcnn_benchmark, export_detectron)


def refusal(command, split, out, overrides, capsys):
    """The one stderr line of `command` refusing `overrides` (which must exit non-zero)."""
    capsys.readouterr()
    status = command(split, out, list(overrides))
    err = capsys.readouterr().err
    assert status != 0 and err.startswith("error: ") and err.count("\n") == 1, (status, err)
    return err


@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: command.__name__)
@pytest.mark.parametrize("overrides", [WRONG_TYPE, UNKNOWN_PRECISION], ids=["wrong_type", "unknown_precision"])
def test_a_bad_value_is_one_line(command, overrides, split, tmp_path, capsys):
    key, value = overrides
    err = refusal(command, split, tmp_path, overrides, capsys)
    assert key in err and value in err


@pytest.mark.parametrize("command", CHECKING, ids=lambda command: command.__name__)
def test_an_empty_string_typed_as_detectron_reads_it(command, split, tmp_path, capsys):
    err = refusal(command, split, tmp_path, EMPTY_AND_REFUSED, capsys)
    assert err.startswith("error: TEST.BBOX_VOTE.SCORING_METHOD_BETA = 2.0: ")


def test_a_value_the_model_cannot_be_built_with_is_one_line(split, tmp_path, capsys):
    """Not a support rule: the builder's own error (GroupNorm's groups must divide the channels)."""
    import h5py

    h5py.File(tmp_path / "none.weights.h5", "w").close()  # a weights file storing no classes: the build comes first
    for command in (evaluate, infer, export):
        err = refusal(command, split, tmp_path, ("GROUP_NORM.NUM_GROUPS", "7"), capsys)
        assert "64 channels do not split into 7 equal groups" in err, command.__name__
