"""SavedModel export for TF Serving: layout, signatures, stock ops only, and detections equal to the
Predictor's when the model is loaded in a fresh process that never imports tfdet.

By default the model is the tiny shapes Mask + Keypoint R-CNN with seeded weights and a spread classifier
(`savedmodel_fixtures.TinyModel`, shared with test_savedmodel_client), exported by `python -m
savedmodel.export` from a Detectron .pkl written from those weights, over an existing version (refused,
then --overwrite); test_savedmodel_client exports it from its config.yaml and .weights.h5.
One fresh interpreter makes every request: a batch of shapes val images of three sizes (JPEG and PNG)
with a PNG of the pixel means, a request holding an undecodable image, and the request after it;
then `saved_model_cli` (its `main`, in that interpreter) shows and runs the model; the Predictor's answers
are computed meanwhile.
Under `-m slow`, a narrow RetinaNet with seeded, calibrated weights is exported (from a .pkl naming no class) and
served the same way (its parts by default: the RetinaNet graph, test_retinanet.py's Predictor tests; the serving
signatures, this module's tiny model; classes named `id<c>`, test_labels_of_unnamed_classes_are_ids).
Under `-m slow`, Mask R-CNN R-50-FPN (from a .pkl) and Keypoint R-CNN R-50-FPN (from a .weights.h5)
with Detectron's random initialisation get the same serving checks on the demo photos, where the
PNG of the pixel means has no detection at all (the tiny model scores it about as it scores the
shapes images, so only the R-50 models serve an image without detections).
"""

import json
import os
import pickle
import re
import subprocess
import sys
import warnings

import cv2
import keras
import numpy as np
import pytest
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.python.framework import op_def_registry

from porting.detectron_writer import model_to_blobs, write_detectron_pkl
from savedmodel import serving_config
from savedmodel.label_map import class_name_table, write_label_map
from savedmodel.export import ExportError, export_saved_model, replace_version
from savedmodel.export import main as export_main
from savedmodel.outputs import detections_per_image
from support.paths import shared_path
from support.retinanet_fixtures import calibrate_predictions, spread_weights
from support.savedmodel_fixtures import TINY_TEST, TinyModel, assert_same_detections, shapes_val_images
from support.training_fixtures import TINY_CONFIG
from tfdet.config import load_config
from tfdet.data import shapes
from tfdet.data.coco_classes import model_categories
from tfdet.inference import Predictor

FAST = ["TEST.SCALE", "224", "TEST.MAX_SIZE", "384", "TEST.SCORE_THRESH", "0.15", "TEST.RPN_PRE_NMS_TOP_N", "300",
        "TEST.RPN_POST_NMS_TOP_N", "200", "TEST.DETECTIONS_PER_IM", "10"]  # fmt: skip
# The R-50 models of `test_slow_r50_model_is_served_like_the_predictor` (-m slow), by name:
# (Detectron config, extra overrides, classifier kernel scale, weights file type).
MODELS = {
    "mask_rcnn": ("e2e_mask_rcnn_R-50-FPN_1x.yaml", ["MODEL.NUM_CLASSES", "5"], 0.3, ".pkl"),
    "keypoint_rcnn": ("e2e_keypoint_rcnn_R-50-FPN_1x.yaml", [], 1.0, ".weights.h5"),
}
TINY = "shapes_tiny"
# The tiny model's serving settings: each of 50 proposals gives at most one detection per class (3), fewer
# than TEST.DETECTIONS_PER_IM in all, so that every image's outputs are padded (with the config's 20 slots,
# the model fills them all on shapes and blank images alike). Measured: 65-116 detections per image.
TINY_SERVING = ("TEST.RPN_POST_NMS_TOP_N", "50", "TEST.DETECTIONS_PER_IM", "160")
BACKGROUND_BIAS = 2.0
RETINANET = "retinanet_tiny"
# A narrow R-50-FPN RetinaNet (8-wide bottlenecks, 16-channel pyramid and heads, one tower conv) at the tiny
# model's scale; seeded weights calibrated on the shapes images (`retinanet_fixtures`) give it well-separated
# scores, and 30 slots leave padding (RetinaNet's coarsest level keeps every score: there are always some).
RETINANET_OVERRIDES = [
    "RESNETS.WIDTH_PER_GROUP", "8", "FPN.DIM", "16", "MODEL.NUM_CLASSES", "4", "RETINANET.NUM_CONVS", "1",
    "TEST.SCALE", "128", "TEST.MAX_SIZE", "256", "TEST.DETECTIONS_PER_IM", "30",
]  # fmt: skip
UNDECODABLE = b"this is not an image"
# The child's requests, in order, by model: image keys (see the `images` fixture).
DEMO_REQUESTS = {
    "batch": ["photo0", "photo1", "photo2", "blank"],  # JPEGs of three sizes and a PNG with no detection
    "bad": ["photo0", "undecodable"],
    "after_bad": ["blank"],  # the same loaded model, after the failed request
}
TINY_REQUESTS = {
    "batch": ["shapes0", "shapes1", "shapes2", "blank"],  # a JPEG, a cropped PNG, an enlarged JPEG, a wider PNG
    "bad": ["shapes0", "undecodable"],
    "after_bad": ["blank"],
}

# Run by a fresh interpreter: only TensorFlow and numpy, never our packages. After serving, it runs TensorFlow's
# saved_model_cli (its `main`, as `python -m tensorflow.python.tools.saved_model_cli` does) with each argument list
# of argv[4]: the standard output of command X in out_dir/saved_model_cli_X.txt, its exit status in the report
# (one TensorFlow start-up for all).
CHILD = r"""
import contextlib, json, sys
import numpy as np
import tensorflow as tf

out_dir, plan, images = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
cli_runs = json.loads(sys.argv[4]) if len(sys.argv) > 4 else []
encoded = {key: open(path, "rb").read() for key, path in images.items()}
report = {}
for name, (model_dir, requests) in plan.items():
    loaded = tf.saved_model.load(model_dir)
    serve = loaded.signatures["serving_default"]
    with open(loaded.labels_file.asset_path.numpy(), encoding="utf-8") as labels:  # the tracked asset
        report[f"{name}/labels"] = json.load(labels)
    for request, keys in requests.items():
        try:
            result = serve(image_bytes=tf.constant([encoded[key] for key in keys]))
        except tf.errors.InvalidArgumentError as error:
            report[f"{name}/{request}"] = "InvalidArgumentError: " + error.message
            continue
        np.savez(f"{out_dir}/{name}_{request}.npz", **{k: v.numpy() for k, v in result.items()})
        report[f"{name}/{request}"] = "ok"
for arguments in cli_runs:
    from tensorflow.python.tools import saved_model_cli

    sys.argv = ["saved_model_cli", *arguments]
    with open(f"{out_dir}/saved_model_cli_{arguments[0]}.txt", "w") as stdout, contextlib.redirect_stdout(stdout):
        try:
            saved_model_cli.main()
            status = 0
        except SystemExit as done:
            status = done.code or 0
    report[f"saved_model_cli {arguments[0]}"] = status
report["our_modules"] = sorted(m for m in sys.modules if m.split(".")[0] in ("tfdet", "porting", "savedmodel"))
print(json.dumps(report))
"""


def separable_classifier(model, kernel_scale):
    """Make random-weight detections comparable: spread scores, and an empty image scoring nothing.

    Detectron's initialisation gives scores that are all ~1 or all ~1/C (near ties decide which
    boxes survive NMS and the top-D cut); scaling `cls_score` spreads them. Every bias of that
    initialisation is zero, so the network is positively homogeneous: an image of the pixel
    means (input ~0) gives logits ~0, i.e. foreground scores = softmax(cls_score bias), which a
    background bias of 2 puts below TEST.SCORE_THRESH 0.15 (0.12 for C = 2, 0.09 for C = 5), while
    every demo photo keeps 3 to 10 detections above it.
    """
    layer = model.get_layer("cls_score")
    assert all(not np.any(w.numpy()) for layer_ in model.layers for w in layer_.weights if w.path.endswith("bias"))
    layer.kernel.assign(layer.kernel.numpy() * kernel_scale)
    bias = np.zeros(layer.bias.shape, np.float32)
    bias[0] = BACKGROUND_BIAS
    layer.bias.assign(bias)


def load_test_config(name):
    yaml, extra, _, _ = MODELS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the keypoint config's deprecated keys
        return load_config(configs_dir() / yaml, FAST + extra)


def configs_dir():
    return shared_path("detectron", "configs", "12_2017_baselines")


def demo_paths():
    return sorted(shared_path("data", "detectron_demo").glob("*.jpg"))[:3]


def quiet_export(args):
    """`python -m savedmodel.export` with `args`, without the zoo configs' deprecation warnings."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return export_main(args)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny model's config.yaml and weights (`savedmodel_fixtures.TinyModel`)."""
    return TinyModel(tmp_path_factory)


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """{key: path}: three demo photos (JPEG, different sizes; -m slow), a 240 x 320 PNG of the pixel
    means, an undecodable file and three shapes val images (see `shapes_of_three_sizes`)."""
    folder = tmp_path_factory.mktemp("images")
    paths = {f"photo{i}": str(p) for i, p in enumerate(demo_paths())}
    blank = np.broadcast_to(np.round([102.9801, 115.9465, 122.7717]).astype(np.uint8), (240, 320, 3))
    cv2.imwrite(str(folder / "blank.png"), np.ascontiguousarray(blank))
    (folder / "undecodable.jpg").write_bytes(UNDECODABLE)
    paths.update(blank=str(folder / "blank.png"), undecodable=str(folder / "undecodable.jpg"))
    return dict(paths, **shapes_of_three_sizes(folder / "shapes"))


def shapes_of_three_sizes(folder):
    """{"shapes0": the 192 x 192 JPEG, "shapes1": a PNG cropped to 192 x 160, "shapes2": a JPEG
    enlarged to 256 x 224}: three shapes val images whose shapes keep the size the model sees
    (TEST.SCALE 128 of the longer side)."""
    paths = shapes_val_images(folder, 3)
    cropped, enlarged = folder / "shapes1_cropped.png", folder / "shapes2_enlarged.jpg"
    cv2.imwrite(str(cropped), cv2.imread(paths["shapes1"])[:, 16:176])
    cv2.imwrite(str(enlarged), cv2.resize(cv2.imread(paths["shapes2"]), (224, 256)), [cv2.IMWRITE_JPEG_QUALITY, 95])
    return dict(paths, shapes1=str(cropped), shapes2=str(enlarged))


def predict_requests(predictor, requests, images):
    """{request: Predictor results} of the requests that hold only decodable images."""
    return {
        request: predictor.predict([cv2.imread(images[key]) for key in keys])
        for request, keys in requests.items()
        if "undecodable" not in keys
    }


def export_demo_model(name, base, weights_dir):
    """(Predictor, version directory) of an R-50 model with random weights, exported by the CLI to
    base/name/1 from a weights file of the Predictor's weights."""
    yaml, extra, kernel_scale, weights_type = MODELS[name]
    keras.utils.set_random_seed(0)
    predictor = Predictor(load_test_config(name))
    separable_classifier(predictor.model, kernel_scale)
    weights = weights_dir / f"{name}{weights_type}"
    if weights_type == ".pkl":  # --weights also takes Detectron files
        write_pkl(predictor, weights)
    else:
        predictor.model.save_weights(weights)
    out = base / name / "1"
    args = ["--cfg", str(configs_dir() / yaml), "--weights", str(weights), "--out", str(out), *FAST, *extra]
    assert quiet_export(args) == 0
    return predictor, out


def write_pkl(predictor, path):
    """The Predictor's weights as a Detectron .pkl (what `--weights` reads besides our .weights.h5)."""
    blobs = model_to_blobs(predictor.model, predictor.cfg.MRCNN.ROI_MASK_HEAD)
    write_detectron_pkl(path, blobs, predictor.cfg.dump())


@pytest.fixture(scope="module")
def tiny_model(tiny, tmp_path_factory):
    """(Predictor, version directory) of the tiny model, exported by the CLI from its config.yaml and a
    Detectron .pkl of its weights, over an existing version (--overwrite)."""
    config, weights = tiny.config, tiny.weights
    predictor = Predictor(tiny.test_config(*TINY_SERVING), weights)
    pkl = tmp_path_factory.mktemp("weights") / "model_final.pkl"
    write_pkl(predictor, pkl)
    dataset_json = pkl.parent / "shapes_categories.json"  # a .pkl stores no classes: the json names them
    dataset_json.write_text(json.dumps({"categories": shapes.categories()}))
    out = tmp_path_factory.mktemp("serving") / TINY / "1"
    out.mkdir(parents=True)
    (out / "stale.txt").write_text("an older export")
    args = ["--cfg", str(config), "--weights", str(pkl), "--out", str(out), "--dataset-json", str(dataset_json),
            *TINY_TEST, *TINY_SERVING]  # fmt: skip
    assert export_main(args) == 1  # refused: the version exists
    assert export_main([*args, "--overwrite"]) == 0
    assert not (out / "stale.txt").exists()
    return predictor, out


@pytest.fixture(scope="module")
def retinanet_model(images, tmp_path_factory):
    """(Predictor, version directory) of the tiny RetinaNet, exported by the CLI from a Detectron .pkl."""
    config = configs_dir() / "retinanet_R-50-FPN_1x.yaml"
    keras.utils.set_random_seed(0)
    predictor = Predictor(load_config(config, RETINANET_OVERRIDES))
    spread_weights(predictor.model, 0)
    inputs = predictor.model_inputs([cv2.imread(images[key]) for key in ("shapes0", "shapes2")])
    calibrate_predictions(predictor.model, inputs, [3, 4, 5, 6, 7], logit_mean=-4.0)
    pkl = tmp_path_factory.mktemp("weights") / "retinanet.pkl"
    write_pkl(predictor, pkl)
    out = tmp_path_factory.mktemp("serving") / RETINANET / "1"
    assert export_main(["--cfg", str(config), "--weights", str(pkl), "--out", str(out), *RETINANET_OVERRIDES]) == 0
    return predictor, out


def child_command(work, plan, images, cli_runs=()):
    """The fresh interpreter (TensorFlow only) that serves `plan` ({name: (version directory, requests)}), then
    runs saved_model_cli with each argument list of `cli_runs`."""
    return [sys.executable, "-c", CHILD, str(work), json.dumps(plan), json.dumps(images), json.dumps(list(cli_runs))]


def start(work, key, command):
    # Files, not pipes: a process that fills a pipe nobody reads yet would stall. TensorFlow's default
    # threads, as in this process: random-weight R-50 activations reach ~100, where another thread
    # count's summation order moves logits by ~1e-3 and scores past 1e-4.
    return subprocess.Popen(command, stdout=(work / f"{key}.out").open("w"), stderr=(work / f"{key}.err").open("w"))


def finished(work, key, process):
    """(exit status, stdout, stderr) of a process, once it has finished."""
    returncode = process.wait(timeout=600)
    return returncode, (work / f"{key}.out").read_text(), (work / f"{key}.err").read_text()


def child_results(work, returncode, stdout, stderr):
    """The child's report and the outputs it received, per request."""
    assert returncode == 0, stderr[-3000:]
    report = json.loads(stdout.strip().splitlines()[-1])
    outputs = {  # detection_class_names is an object array of bytes: pickled by np.savez
        key: dict(np.load(work / f"{key.replace('/', '_')}.npz", allow_pickle=True))
        for key, v in report.items()
        if v == "ok"
    }
    return report, outputs


def served_one_model(work, name, predictor, out, requests, images):
    """(child's report, its outputs, the Predictor's wanted results) of one model served by a fresh child while
    this process predicts the same requests."""
    child = start(work, "child", child_command(work, {name: (str(out), requests)}, images))
    try:
        wants = predict_requests(predictor, requests, images)
        report, outputs = child_results(work, *finished(work, "child", child))
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return report, outputs, wants


@pytest.fixture(scope="module")
def serving_child(tiny_model, images, tmp_path_factory):
    """(work folder, the fresh interpreter that imports only TensorFlow), started as soon as the model exists so
    that it runs while the Predictor does: it serves the tiny model, then runs `saved_model_cli show` and
    `saved_model_cli run` on it."""
    work = tmp_path_factory.mktemp("processes")
    plan = {TINY: (str(tiny_model[1]), TINY_REQUESTS)}
    np.save(work / "images.npy", cv2.imread(images["shapes1"])[None, :, :, ::-1])  # image_tensor takes RGB
    tiny_dir = str(tiny_model[1])
    cli_runs = [
        ["show", "--dir", tiny_dir, "--tag_set", "serve", "--all"],
        ["run", "--dir", tiny_dir, "--tag_set", "serve", "--signature_def", "image_tensor",
         "--inputs", f"images={work / 'images.npy'}", "--outdir", str(work / "cli_run")],
    ]  # fmt: skip
    child = start(work, "child", child_command(work, plan, images, cli_runs))
    yield work, child
    if child.poll() is None:
        child.kill()
        child.wait()


@pytest.fixture(scope="module")
def expected(serving_child, tiny_model, images):
    """Predictor results for every request the serving child makes, computed while it runs."""
    predictor = tiny_model[0]
    wants = predict_requests(predictor, TINY_REQUESTS, images)
    result = {f"{TINY}/{request}": want for request, want in wants.items()}
    result[f"{TINY}/cli"] = predictor.predict(cv2.imread(images["shapes1"]))
    return result


@pytest.fixture(scope="module")
def served(serving_child, expected):
    """The child's report and the outputs it received, per request."""
    work, child = serving_child
    return child_results(work, *finished(work, "child", child))


def test_child_never_imported_our_packages(served):
    report, _ = served
    assert report["our_modules"] == []


def test_serving_default_batch_matches_predictor(tiny_model, images, expected, served):
    check_batch(served[1][f"{TINY}/batch"], expected[f"{TINY}/batch"], TINY_REQUESTS, tiny_model[0].cfg, images)


@pytest.mark.slow
def test_retinanet_is_served_like_the_predictor(retinanet_model, images, tmp_path_factory):
    """A RetinaNet has the same signatures and outputs, without masks and keypoints, its classes named `id<c>`
    (its .pkl names none); served by a fresh interpreter that never imports our packages. By default: the
    RetinaNet graph in test_retinanet.py, the serving module on the tiny model here, `id<c>` labels in
    test_labels_of_unnamed_classes_are_ids."""
    predictor, out = retinanet_model
    work = tmp_path_factory.mktemp("processes")
    report, outputs, wants = served_one_model(work, RETINANET, predictor, out, TINY_REQUESTS, images)
    assert report["our_modules"] == []
    check_batch(outputs[f"{RETINANET}/batch"], wants["batch"], TINY_REQUESTS, predictor.cfg, images)
    assert not {"detection_masks", "detection_keypoints"} & set(outputs[f"{RETINANET}/batch"])
    check_undecodable(report, outputs, RETINANET, predictor.cfg, wants["after_bad"])
    check_class_names(report, outputs, RETINANET, ["id1", "id2", "id3"], out)
    check_stock_ops(out)


def check_batch(raw, wants, requests, cfg, images, blank_is_empty=False):
    """The served batch: the Predictor's detections per image, and tensors padded as documented.
    Every image but the PNG of the pixel means needs detections to compare; that one has none when
    `blank_is_empty` (the R-50 models), while the tiny model finds some there."""
    for key, got, want in zip(requests["batch"], detections_per_image(raw), wants):
        if key != "blank":
            assert len(want["scores"]) >= 3, "the comparison needs detections to compare"
        elif blank_is_empty:
            assert len(want["scores"]) == 0
        assert_same_detections(got, want)
    assert min(len(want["scores"]) for want in wants) < cfg.TEST.DETECTIONS_PER_IM, "no padded row to check"
    check_padded_outputs(raw, cfg, [cv2.imread(images[key]).shape[:2] for key in requests["batch"]])


def check_padded_outputs(raw, cfg, sizes):
    """Tensors padded to DETECTIONS_PER_IM (zeros past num_detections); image masks to the largest image."""
    batch, slots = len(sizes), cfg.TEST.DETECTIONS_PER_IM
    np.testing.assert_array_equal(raw["image_sizes"], np.array(sizes, np.int32))
    assert raw["num_detections"].dtype == np.int32 and raw["num_detections"].shape == (batch,)
    assert raw["detection_boxes"].shape == (batch, slots, 4) and raw["detection_boxes"].dtype == np.float32
    assert raw["detection_scores"].shape == (batch, slots) and raw["detection_scores"].dtype == np.float32
    assert raw["detection_classes"].shape == (batch, slots) and raw["detection_classes"].dtype == np.int32
    padding = np.arange(slots)[None, :] >= raw["num_detections"][:, None]
    assert not raw["detection_scores"][padding].any() and not raw["detection_boxes"][padding].any()
    assert not raw["detection_classes"][padding].any()
    if cfg.MODEL.MASK_ON:
        height, width = np.max(sizes, axis=0)
        assert raw["detection_masks"].shape == (batch, slots, height, width)
        assert raw["detection_masks"].dtype == np.uint8 and not raw["detection_masks"][padding].any()
        for i, (h, w) in enumerate(sizes):
            assert not raw["detection_masks"][i, :, h:].any() and not raw["detection_masks"][i, :, :, w:].any()
    if cfg.MODEL.KEYPOINTS_ON:
        assert raw["detection_keypoints"].shape == (batch, slots, cfg.KRCNN.NUM_KEYPOINTS, 3)
        assert raw["detection_keypoint_probs"].shape == (batch, slots, cfg.KRCNN.NUM_KEYPOINTS)
        assert not raw["detection_keypoints"][padding].any() and not raw["detection_keypoint_probs"][padding].any()


def test_class_names_are_served_and_carried_as_assets(tiny_model, served):
    """`detection_class_names` names each detection's class from a table in the graph, in a process that never
    imports tfdet: the shapes names given by --dataset-json for the tiny model; "" in padding rows. The assets
    labels.json (read there through the loaded object) and label_map.pbtxt list the same classes."""
    check_class_names(*served, TINY, list(shapes.CATEGORY_NAMES), tiny_model[1])


def check_class_names(report, outputs, name, names, out):
    """The served class names of model `name` (class c: names[c - 1]) and its label map assets; names are
    known unless they are `id<c>`."""
    table = np.array([b""] + [n.encode() for n in names], object)
    for request in ("batch", "after_bad"):
        raw = outputs[f"{name}/{request}"]
        assert raw["detection_class_names"].shape == raw["detection_classes"].shape
        assert raw["detection_class_names"].tolist() == table[raw["detection_classes"]].tolist()
        assert (raw["detection_classes"] == 0).any() and (raw["detection_classes"] > 0).any()
    classes = [{"id": c, "name": n, "dataset_id": c} for c, n in enumerate(names, start=1)]
    known = names != [f"id{c}" for c in range(1, len(names) + 1)]
    assert report[f"{name}/labels"] == {"names_known": known, "classes": classes}
    pbtxt = (out / "assets" / "label_map.pbtxt").read_text()
    items = re.findall(r'item \{\n  id: (\d+)\n  name: "([^"]*)"\n  display_name: "([^"]*)"\n\}', pbtxt)
    assert items == [(str(c), n, n) for c, n in enumerate(names, start=1)]


def test_labels_of_unnamed_classes_are_ids(tmp_path):
    """A model whose weights name no class (a Detectron .pkl, no --dataset-json) and that is not COCO's 81
    classes: its label map assets call class c `id<c>` (Detectron's get_class_string) and say the names are
    not known; `detection_class_names` looks them up in the same table."""
    categories = model_categories(4, False)
    assert class_name_table(categories) == ("", "id1", "id2", "id3")
    labels, pbtxt = write_label_map(tmp_path, categories)
    classes = [{"id": c, "name": f"id{c}", "dataset_id": c} for c in (1, 2, 3)]
    assert json.loads(labels.read_text()) == {"names_known": False, "classes": classes}
    items = re.findall(r'item \{\n  id: (\d+)\n  name: "([^"]*)"\n  display_name: "([^"]*)"\n\}', pbtxt.read_text())
    assert items == [(str(c), f"id{c}", f"id{c}") for c in (1, 2, 3)]


def test_undecodable_image_fails_its_request_only(tiny_model, expected, served):
    check_undecodable(*served, TINY, tiny_model[0].cfg, expected[f"{TINY}/after_bad"])


def check_undecodable(report, outputs, name, cfg, wants):
    """The request holding an undecodable image failed clearly; the same loaded model then answered
    the next request (the PNG of the pixel means) as the Predictor does."""
    assert (
        report[f"{name}/bad"].startswith("InvalidArgumentError")
        and "Unknown image file format" in report[f"{name}/bad"]
    )
    after = outputs[f"{name}/after_bad"]
    assert report[f"{name}/after_bad"] == "ok"
    assert_same_detections(detections_per_image(after)[0], wants[0])
    check_padded_outputs(after, cfg, [(240, 320)])


def test_layout_and_existing_version_refused(tiny, tiny_model, tmp_path, capsys):
    predictor, out = tiny_model
    assert (out / "saved_model.pb").is_file() and (out / "variables" / "variables.index").is_file()
    assert sorted(p.name for p in out.parent.iterdir()) == ["1"]  # no staging folder left behind
    (tmp_path / "probe").mkdir()  # a version is as readable as any new folder (a server may run as another user)
    assert out.stat().st_mode & 0o777 == (tmp_path / "probe").stat().st_mode & 0o777
    before = (out / "saved_model.pb").stat().st_mtime_ns
    args = ["--cfg", str(tiny.config), "--weights", "unused.weights.h5", "--out", str(out)]
    assert export_main(args) == 1
    assert "already exists; pass --overwrite" in capsys.readouterr().err
    assert (out / "saved_model.pb").stat().st_mtime_ns == before
    with pytest.raises(ExportError, match="integer version"):
        export_saved_model(predictor.cfg, "unused.weights.h5", out.parent / "latest")
    with pytest.raises(ExportError, match="weights file not found"):
        export_saved_model(predictor.cfg, out.parent / "missing.weights.h5", out.parent / "2")


class _RunsACommand:
    """Pickles as a call of os.system: what a malicious weight file holds."""

    def __reduce__(self):
        return (os.system, ("echo unsafe",))


def test_unsafe_weight_file_is_refused_and_writes_nothing(tmp_path, capsys):
    bad = tmp_path / "model_final.pkl"
    bad.write_bytes(pickle.dumps({"blobs": {"conv1_w": _RunsACommand()}}, protocol=2))
    out = tmp_path / "serving" / TINY / "1"
    assert export_main(["--cfg", str(TINY_CONFIG), "--weights", str(bad), "--out", str(out)]) == 1
    assert "refused global" in capsys.readouterr().err
    assert not (tmp_path / "serving").exists()


@pytest.mark.parametrize("mask_format", ["roi", "image"])
def test_mask_format_of_a_model_without_masks_is_refused(tmp_path, capsys, mask_format):
    """--mask-format (either) on a model without masks would change nothing: refused before any work."""
    out = tmp_path / "serving" / TINY / "1"
    argv = ["--cfg", str(TINY_CONFIG), "--weights", "unused.weights.h5", "--out", str(out), "--mask-format",
            mask_format, "MODEL.MASK_ON", "False"]  # fmt: skip
    assert export_main(argv) == 1
    refusal = f"--mask-format {mask_format} applies to a model with masks, and this one has none (MODEL.MASK_ON False)"
    assert capsys.readouterr().err == f"error: {refusal}\n"
    assert not (tmp_path / "serving").exists()
    if mask_format == "roi":  # from Python too; "image" is export_saved_model's default, for every model
        with pytest.raises(ExportError, match=re.escape(refusal)):
            export_saved_model(load_config(TINY_CONFIG, ["MODEL.MASK_ON", "False"]), "unused.weights.h5", out, "roi")


def test_replace_version_swaps_whole_folders(tmp_path):
    old, staging = tmp_path / "model" / "3", tmp_path / "model" / ".3-export-x"
    old.mkdir(parents=True)
    (old / "stale.txt").write_text("old")
    staging.mkdir()
    (staging / "saved_model.pb").write_text("new")
    replace_version(staging, old)
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == ["3"]
    assert sorted(p.name for p in old.iterdir()) == ["saved_model.pb"]


def test_saved_model_cli_show_lists_signatures(serving_child, served, tiny_model):
    work, _ = serving_child
    assert served[0]["saved_model_cli show"] == 0, (work / "child.err").read_text()[-2000:]
    signatures = parse_signature_listing((work / "saved_model_cli_show.txt").read_text())
    assert signatures["serving_default"]["inputs"] == {"image_bytes": ("DT_STRING", "(-1)")}
    assert signatures["image_tensor"]["inputs"] == {"images": ("DT_UINT8", "(-1, -1, -1, 3)")}
    cfg = tiny_model[0].cfg
    slots, keypoints = cfg.TEST.DETECTIONS_PER_IM, cfg.KRCNN.NUM_KEYPOINTS
    for name in ("serving_default", "image_tensor"):
        assert signatures[name]["outputs"] == {
            "num_detections": ("DT_INT32", "(-1)"),
            "detection_boxes": ("DT_FLOAT", f"(-1, {slots}, 4)"),
            "detection_scores": ("DT_FLOAT", f"(-1, {slots})"),
            "detection_classes": ("DT_INT32", f"(-1, {slots})"),
            "detection_class_names": ("DT_STRING", f"(-1, {slots})"),
            "detection_masks": ("DT_UINT8", f"(-1, {slots}, -1, -1)"),
            "detection_keypoints": ("DT_FLOAT", f"(-1, {slots}, {keypoints}, 3)"),
            "detection_keypoint_probs": ("DT_FLOAT", f"(-1, {slots}, {keypoints})"),
            "image_sizes": ("DT_INT32", "(-1, 2)"),
        }
        assert signatures[name]["method"] == "tensorflow/serving/predict"


def parse_signature_listing(text):
    """{signature: {"inputs"/"outputs": {name: (dtype, shape)}, "method": ...}} from `show --all`."""
    signatures = {}
    for block in re.split(r"\nsignature_def\['", text)[1:]:
        name = block.split("'", 1)[0]
        entry = {"inputs": {}, "outputs": {}, "method": re.search(r"Method name is: (\S*)", block).group(1)}
        for kind, tensor, dtype, shape in re.findall(
            r"(inputs|outputs)\['(\w+)'\] tensor_info:\s+dtype: (\w+)\s+shape: (\([^)]*\)|unknown_rank)", block
        ):
            entry[kind][tensor] = (dtype, shape)
        signatures[name] = entry
    return signatures


def test_saved_model_cli_run_with_npy_input(serving_child, served, expected):
    """`image_tensor` (RGB) through the TF1-style loader TF Serving's C++ server shares: every
    variable the graph reads is restored, and detections equal the Predictor's."""
    work, _ = serving_child
    assert served[0]["saved_model_cli run"] == 0, (work / "child.err").read_text()[-2000:]
    raw = {p.stem: np.load(p, allow_pickle=True) for p in (work / "cli_run").glob("*.npy")}  # names: objects
    assert set(raw) == {"num_detections", "detection_boxes", "detection_scores", "detection_classes",
                        "detection_class_names", "detection_masks", "detection_keypoints",
                        "detection_keypoint_probs", "image_sizes"}  # fmt: skip
    want = expected[f"{TINY}/cli"]
    assert raw["num_detections"].tolist() == [len(want["scores"])] and len(want["scores"]) > 0
    assert_same_detections(detections_per_image(raw)[0], want)


def test_graph_holds_only_stock_ops(tiny_model):
    check_stock_ops(tiny_model[1])


def check_stock_ops(out):
    """Every op of every graph and function of the SavedModel in `out` is registered in stock TensorFlow."""
    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((out / "saved_model.pb").read_bytes())
    forbidden = {"PyFunc", "PyFuncStateless", "EagerPyFunc", "NumpyFunction"}
    for meta_graph in saved.meta_graphs:
        library = meta_graph.graph_def.library
        functions = {f.signature.name for f in library.function}
        nodes = list(meta_graph.graph_def.node) + [n for f in library.function for n in f.node_def]
        ops = {node.op for node in nodes}
        assert len(functions) > 10 and {"Conv2D", "DecodeJpeg", "DecodeImage", "While"} <= ops  # the walk saw it all
        not_stock = sorted(op for op in ops - functions if op in forbidden or op_def_registry.get(op) is None)
        assert not_stock == []


def test_serving_config_lists_every_model_and_version(tiny_model, tmp_path):
    text_format = pytest.importorskip("google.protobuf.text_format")
    config_pb2 = pytest.importorskip(
        "tensorflow_serving.config.model_server_config_pb2", reason="needs tensorflow-serving-api (the test extra)"
    )
    base = tiny_model[1].parent.parent
    extra = tmp_path / "base"
    for name, version in [("mask_rcnn", 1), ("mask_rcnn", 7), ("keypoint_rcnn", 2)]:
        (extra / name / str(version) / "variables").mkdir(parents=True)
        (extra / name / str(version) / "saved_model.pb").write_bytes(b"")
    (extra / "mask_rcnn" / ".8-export-tmp").mkdir()  # an unfinished export is not a version
    (extra / "notes").mkdir()
    assert serving_config.main(["--base", str(extra), "--model-root", "/models"]) == 0
    config = text_format.Parse((extra / "models.config").read_text(), config_pb2.ModelServerConfig())
    entries = {c.name: c for c in config.model_config_list.config}
    assert sorted(entries) == ["keypoint_rcnn", "mask_rcnn"]
    assert entries["mask_rcnn"].base_path == "/models/mask_rcnn"
    assert list(entries["mask_rcnn"].model_version_policy.specific.versions) == [1, 7]
    assert entries["keypoint_rcnn"].model_platform == "tensorflow"
    out = tmp_path / "latest.config"
    assert serving_config.main(["--base", str(base), "--out", str(out), "--latest"]) == 0
    config = text_format.Parse(out.read_text(), config_pb2.ModelServerConfig())
    assert {c.name: c.base_path for c in config.model_config_list.config} == {
        TINY: str((base / TINY).resolve())
    }
    assert not any(c.HasField("model_version_policy") for c in config.model_config_list.config)


def test_serving_config_without_models_is_an_error(tmp_path, capsys):
    assert serving_config.main(["--base", str(tmp_path)]) == 1
    assert "no SavedModel under" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_slow_r50_model_is_served_like_the_predictor(images, tmp_path_factory, name):
    """The default tests' serving checks for an R-50 model with random weights (Mask R-CNN from a
    .pkl, Keypoint R-CNN from a .weights.h5) on the demo photos, the PNG of the pixel means among
    them without any detection: served by a fresh interpreter that never imports our packages."""
    base, work = tmp_path_factory.mktemp("serving"), tmp_path_factory.mktemp("processes")
    predictor, out = export_demo_model(name, base, tmp_path_factory.mktemp("weights"))
    report, outputs, wants = served_one_model(work, name, predictor, out, DEMO_REQUESTS, images)
    assert report["our_modules"] == []
    check_batch(outputs[f"{name}/batch"], wants["batch"], DEMO_REQUESTS, predictor.cfg, images, blank_is_empty=True)
    check_undecodable(report, outputs, name, predictor.cfg, wants["after_bad"])
    check_stock_ops(out)


def test_a_missing_config_file_is_one_line(tmp_path, capsys):
    out = tmp_path / "serving" / TINY / "1"
    missing = tmp_path / "outputs" / "run" / "config.yaml"
    assert export_main(["--cfg", str(missing), "--weights", "unused.weights.h5", "--out", str(out)]) == 1
    assert capsys.readouterr().err == f"error: config file not found: {missing}\n"
    assert not (tmp_path / "serving").exists()
