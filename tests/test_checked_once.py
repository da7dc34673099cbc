"""One check per input on the command paths: `python -m tfdet.infer` and `python -m tfdet.evaluate` load and check
the config, resolve the weights (a Detectron URL: one md5sum and one file request to the loopback mirror) and read
the classes they store once each, then hand them to the Predictor (`Predictor.from_checked`), which checks none of
them again; `Predictor(cfg, weights)` checks each once itself. Real runs of the tiny shapes model (its smaller
graph: `SMALL`) with every binding of the checking functions in tfdet counted."""

import collections
import sys

import keras
import pytest

import tfdet.config
import tfdet.data.model_labels
import tfdet.evaluate
import tfdet.infer
import tfdet.inference
import tfdet.weights.download
import tfdet.weights.weights_file
from support.http_mirror import detectron_mirror  # noqa: F401 (fixture)
from support.training_fixtures import AFFINE_BODY, ONE_SAMPLE_ROI_ALIGN, TINY_CONFIG, tiny_cfg
from tfdet.data import shapes
from tfdet.data.coco_classes import model_categories
from tfdet.modeling import build_model
from tfdet.weights.weights_file import KERAS_WEIGHTS, WeightsFile

# Small images and the tiny config's smaller graph (AffineChannel body, plain-conv heads, one RoIAlign sample per
# bin): what is counted does not depend on the model, and the runs build and trace half the ops.
SMALL = ["TEST.SCALE", "64", "TEST.MAX_SIZE", "64", "TEST.DETECTIONS_PER_IM", "5", *ONE_SAMPLE_ROI_ALIGN, *AFFINE_BODY]
WEIGHTS_PATH = "tiny/model_final.weights.h5"  # below the mirror's base
WEIGHTS_URL = f"https://dl.fbaipublicfiles.com/detectron/{WEIGHTS_PATH}"  # tfdet asks the mirror for it
CHECKS = (
    tfdet.config.load_config,
    tfdet.config.check_supported,
    tfdet.weights.download.resolve_weights,
    tfdet.weights.weights_file.weights_file,
    tfdet.data.model_labels.read_model_categories,
)


def count_calls(monkeypatch, functions=CHECKS):
    """Counter of calls by function name (check_supported: by name and use), over every binding of `functions` in
    the loaded modules of tfdet, porting and savedmodel (the name a module imported included)."""
    calls = collections.Counter()
    for function in functions:

        def spy(*args, _function=function, **kwargs):
            use = f" {args[1]}" if _function.__name__ == "check_supported" else ""
            calls[_function.__name__ + use] += 1
            return _function(*args, **kwargs)

        for name, module in list(sys.modules.items()):
            ours = name.split(".")[0] in ("tfdet", "porting", "savedmodel")
            if ours and vars(module).get(function.__name__) is function:
                monkeypatch.setattr(module, function.__name__, spy)
    return calls


@pytest.fixture(scope="module")
def weights_and_data(tmp_path_factory):
    """The tiny model's random weights with the shapes classes stored in them, and 2 shapes images: (weights
    path, annotation json, image folder)."""
    folder = tmp_path_factory.mktemp("checked_once")
    json_path = shapes.generate(folder / "data", 2, seed=3, image_size=96, split_name="val")
    keras.utils.set_random_seed(0)
    path = folder / "model_final.weights.h5"
    build_model(tiny_cfg(*SMALL)).save_weights(str(path))
    tfdet.data.model_labels.write_model_categories(path, model_categories(4, True, json_path))
    return path, json_path, folder / "data" / "val"


@pytest.fixture
def served_weights(weights_and_data, detectron_mirror):  # noqa: F811 (fixture)
    """(URL of the weights, served by the mirror, annotation json, image folder)."""
    path, json_path, images = weights_and_data
    detectron_mirror.add(WEIGHTS_PATH, path.read_bytes())
    return WEIGHTS_URL, json_path, images


def test_infer_checks_each_input_once(served_weights, detectron_mirror, monkeypatch, tmp_path):  # noqa: F811
    url, _, images = served_weights
    calls = count_calls(monkeypatch)
    argv = ["--cfg", str(TINY_CONFIG), "--weights", url, "--input", str(images), "--output", str(tmp_path / "out")]
    assert tfdet.infer.main([*argv, *SMALL]) == 0
    assert calls == {"load_config": 1, "check_supported inference": 1, "resolve_weights": 1, "weights_file": 1,
                     "read_model_categories": 1}  # fmt: skip
    assert detectron_mirror.paths() == [f"{WEIGHTS_PATH}.md5sum", WEIGHTS_PATH]  # the download, checked once
    assert (tmp_path / "out" / "detections.json").is_file()


def test_evaluate_checks_the_weights_once_for_every_dataset(served_weights, detectron_mirror, monkeypatch, tmp_path):  # noqa: F811
    url, json_path, images = served_weights
    other_json = shapes.generate(tmp_path / "data", 2, seed=4, image_size=96, split_name="test")
    datasets = f"('coco:{json_path}:{images}', 'coco:{other_json}:{tmp_path / 'data' / 'test'}')"
    calls = count_calls(monkeypatch)
    argv = ["--cfg", str(TINY_CONFIG), "--weights", url, "--output", str(tmp_path / "out")]
    assert tfdet.evaluate.main([*argv, *SMALL, "TEST.DATASETS", datasets]) == 0
    assert len(list((tmp_path / "out").glob("metrics_*.json"))) == 2  # both datasets evaluated
    assert calls == {"load_config": 1, "check_supported evaluation": 1, "check_supported inference": 1,
                     "resolve_weights": 1, "weights_file": 1, "read_model_categories": 1}  # fmt: skip
    assert detectron_mirror.paths() == [f"{WEIGHTS_PATH}.md5sum", WEIGHTS_PATH]


def test_the_predictor_checks_each_input_once(served_weights, detectron_mirror, monkeypatch):  # noqa: F811
    """Predictor(cfg, URL) resolves what it builds from once (building it is test_predictor's and the infer
    test's: here the model is left out)."""
    url, _, _ = served_weights
    cfg = tiny_cfg(*SMALL)
    calls, built = count_calls(monkeypatch), []
    monkeypatch.setattr(tfdet.inference.Predictor, "_build", lambda self, *checked: built.append(checked))
    tfdet.inference.Predictor(cfg, url)
    assert calls == {"check_supported inference": 1, "resolve_weights": 1, "weights_file": 1,
                     "read_model_categories": 1}  # fmt: skip
    assert detectron_mirror.paths() == [f"{WEIGHTS_PATH}.md5sum", WEIGHTS_PATH]
    ((checked_cfg, weights, categories),) = built
    cached = detectron_mirror.cache / "detectron" / "tiny" / "model_final.weights.h5"
    assert checked_cfg is cfg and weights == WeightsFile(str(cached), KERAS_WEIGHTS)
    assert categories.names == ("__background__", *shapes.CATEGORY_NAMES) and categories.weights_file == str(cached)
