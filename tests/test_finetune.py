"""Fine-tuning to other classes: TRAIN.WEIGHTS of an 81-class (COCO-named) model into a 6-class one; of a model
with the same class count whose classes are in another order or have other names; of a class-specific model into
class-agnostic box and mask heads (and back).

The source is a tiny model with seeded random weights, written as a Detectron `.pkl` and as our `.weights.h5`
(its classes stored, config.yaml beside it). The class-specific blobs must keep the values the fresh model drew
(checked against Detectron's fills, restated here from its fast_rcnn_heads / mask_rcnn_heads / keypoint_rcnn_heads
/ retinanet_heads), except the rows of classes named as the source's, copied from the source (the row arithmetic is
restated below with explicit loops); every other blob must be the source's; any other mismatch is refused.
"""

import logging
import math
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from porting.detectron_writer import model_to_blobs, write_detectron_pkl
from support.training_fixtures import tiny_cfg
from tfdet.config import load_config
from tfdet.data.coco_classes import COCO_CATEGORY_IDS, COCO_CLASSES, ModelCategories
from tfdet.data.model_labels import write_model_categories
from tfdet.data.roidb import Roidb
from tfdet.engine.trainer import Trainer
from tfdet.engine.weights import load_initial_weights
from tfdet.layers import placeholder_initialization
from tfdet.modeling import build_model
from tfdet.modeling.class_transfer import ClassTransfer, count_layouts
from tfdet.modeling.detectron_names import model_blobs
from tfdet.modeling.retinanet import num_anchors

RETINANET_CONFIG = "configs/shapes_retinanet.yaml"
COCO = ModelCategories(COCO_CLASSES, (0,) + COCO_CATEGORY_IDS)
# The new training set's classes: three with COCO names (one in other case, one with extra spaces), two new ones.
MODEL_NAMES = ("__background__", "person", "widget", "Dog", "gizmo", " traffic  light ")
# model class -> the COCO class whose rows it gets (COCO_CLASSES[1] person, [17] dog, [10] traffic light)
COPIED = {0: 0, 1: 1, 3: 17, 5: 10}
SEED = 11

# blob -> (source shape, model shape), Caffe2 layout, of the tiny R-CNN: 81 -> 6 classes, 5 -> 3 keypoints
# (64-wide fc6, 32-wide mask and keypoint heads, 4x4 deconvs).
RCNN_REINITIALISED = {
    "cls_score_w": ((81, 64), (6, 64)), "cls_score_b": ((81,), (6,)),
    "bbox_pred_w": ((324, 64), (24, 64)), "bbox_pred_b": ((324,), (24,)),
    "mask_fcn_logits_w": ((81, 32, 1, 1), (6, 32, 1, 1)), "mask_fcn_logits_b": ((81,), (6,)),
    "kps_score_lowres_w": ((32, 5, 4, 4), (32, 3, 4, 4)), "kps_score_lowres_b": ((5,), (3,)),
    "kps_score_w": ((5, 5, 4, 4), (3, 3, 4, 4)), "kps_score_b": ((5,), (3,)),
}  # fmt: skip


def source_cfg():
    return tiny_cfg("MODEL.NUM_CLASSES", "81")


def model_cfg(*overrides):
    return tiny_cfg("MODEL.NUM_CLASSES", "6", "KRCNN.NUM_KEYPOINTS", "3", *overrides)


def retinanet_cfg(num_classes):
    return load_config(RETINANET_CONFIG, ["MODEL.NUM_CLASSES", str(num_classes)])


def caffe2_values(model, mask_head=""):
    """{blob: value in Caffe2 layout} of a model's variables."""
    return {name: np.array(to_caffe2(var.numpy())) for name, var, to_caffe2, _ in model_blobs(model, mask_head)}


def write_source(cfg, directory, with_config=True, with_pkl=True, categories=COCO):
    """An inference model of `cfg` with seeded random weights, written as directory/model.pkl (`with_pkl`) and
    directory/h5/model_final.weights.h5 (`categories` stored; config.yaml beside it when `with_config`);
    returns its {blob: Caffe2 value}."""
    directory.mkdir(exist_ok=True)
    with placeholder_initialization():
        model = build_model(cfg)
    rng = np.random.default_rng(SEED)
    for variable in model.weights:
        variable.assign(rng.normal(0.0, 0.1, variable.shape).astype(np.float32))
    blobs = model_to_blobs(model, cfg.MRCNN.ROI_MASK_HEAD)
    if with_pkl:
        write_detectron_pkl(directory / "model.pkl", blobs, cfg.dump())
    (directory / "h5").mkdir()
    model.save_weights(directory / "h5" / "model_final.weights.h5")
    write_model_categories(directory / "h5" / "model_final.weights.h5", categories)
    if with_config:
        (directory / "h5" / "config.yaml").write_text(cfg.dump())
    return blobs


@pytest.fixture(scope="module")
def rcnn_source(tmp_path_factory):
    directory = tmp_path_factory.mktemp("rcnn_source")
    return directory, write_source(source_cfg(), directory)


@pytest.fixture(scope="module")
def untouched_model():
    """A 6-class training model (placeholder values) for loads that must be refused and change nothing."""
    cfg = model_cfg()
    with placeholder_initialization():
        model = build_model(cfg, training=True)
    before = caffe2_values(model, cfg.MRCNN.ROI_MASK_HEAD)
    yield cfg, model
    after = caffe2_values(model, cfg.MRCNN.ROI_MASK_HEAD)
    assert all(np.array_equal(after[name], before[name]) for name in before)


def transfer_lines(caplog):
    return [r.getMessage() for r in caplog.records if "re-initialised" in r.getMessage()]


def check_rows(loaded, built, source, changed, expected_rows):
    """The `changed` blobs hold the built values but for the rows `expected_rows(name, built value, source value)`
    gives; every other blob is the source's (bit for bit)."""
    for name in changed:
        np.testing.assert_array_equal(loaded[name], expected_rows(name, built[name], source[name]), err_msg=name)
    others = set(loaded) - set(changed)
    assert others and others <= set(source)
    for name in others:
        np.testing.assert_array_equal(loaded[name], source[name], err_msg=name)


def check_fine_tuned(loaded, built, source, reinitialised, lines, expected_rows):
    """The re-initialised blobs (each named once with both shapes) hold the built values but for the rows
    `expected_rows(name, built value, source value)` gives; every other blob is the source's."""
    assert len(lines) == len(reinitialised)
    for name, (old, new) in reinitialised.items():
        (line,) = [line for line in lines if f"re-initialised {name}:" in line]
        assert f"source {old}, model {new}" in line
        assert loaded[name].shape == new
    check_rows(loaded, built, source, reinitialised, expected_rows)


def rcnn_rows(copied, agnostic=()):
    """NumPy restatement: cls_score row c, bbox_pred rows 4c..4c+3 and mask_fcn_logits channel c of model class c
    are source class copied[c]'s; everything else (keypoints, the `agnostic` blobs) stays as built."""

    def expected_rows(name, built, source):
        expected = built.copy()
        if name.startswith("kps_score") or name in agnostic:
            return expected
        rows = 4 if name.startswith("bbox_pred") else 1
        for c, s in copied.items():
            for k in range(rows):
                expected[rows * c + k] = source[rows * s + k]
        return expected

    return expected_rows


rcnn_expected_rows = rcnn_rows(COPIED)


def check_rcnn_lines(lines):
    for line in lines:
        if "re-initialised kps_score" in line:
            assert "(5 -> 3 keypoints)" in line and "copied" not in line
        else:
            assert "(81 -> 6 classes)" in line
            assert "copied from same-name source classes: '__background__' 0->0, 'person' 1->1, 'Dog' 17->3, " in line
            assert "' traffic  light ' 10->5" in line


def check_detectron_initialisation(built, cfg):
    """The built (left) values follow Detectron's fills: cls_score N(0, 0.01), bbox_pred N(0, 0.001), mask logits
    and keypoint deconv MRCNN/KRCNN.CONV_INIT MSRAFill (N(0, 2 / fan_out), Caffe2's fan_out = size / shape[1]),
    the keypoint upsampling the fixed bilinear kernel of Detectron's BilinearInterpolation, zero biases."""
    assert cfg.MRCNN.CONV_INIT == cfg.KRCNN.CONV_INIT == "MSRAFill"

    def msra_std(weight):
        return math.sqrt(2.0 / (weight.size / weight.shape[1]))

    for name, std in (("cls_score_w", 0.01), ("bbox_pred_w", 0.001),
                      ("mask_fcn_logits_w", msra_std(built["mask_fcn_logits_w"])),
                      ("kps_score_lowres_w", msra_std(built["kps_score_lowres_w"]))):  # fmt: skip
        values = built[name].ravel()
        assert abs(values.std() / std - 1.0) < 0.25, name
        assert abs(values.mean()) < 4 * std / math.sqrt(values.size), name
    for name in ("cls_score_b", "bbox_pred_b", "mask_fcn_logits_b", "kps_score_lowres_b", "kps_score_b"):
        np.testing.assert_array_equal(built[name], 0.0)
    size = 2 * cfg.KRCNN.UP_SCALE  # Detectron's upsample_filt(size)
    factor = (size + 1) // 2
    center = factor - 1 if size % 2 == 1 else factor - 0.5
    rows, cols = np.ogrid[:size, :size]
    bilinear = (1 - abs(rows - center) / factor) * (1 - abs(cols - center) / factor)
    kernel = np.zeros((3, 3, size, size), np.float32)
    for k in range(3):
        kernel[k, k] = bilinear
    np.testing.assert_allclose(built["kps_score_w"], kernel, rtol=1e-6)


def test_detectron_pkl_81_to_6_classes(rcnn_source, caplog):
    directory, source = rcnn_source
    cfg = model_cfg()
    keras.utils.set_random_seed(SEED)
    model = build_model(cfg, training=True)
    built = caffe2_values(model, cfg.MRCNN.ROI_MASK_HEAD)
    check_detectron_initialisation(built, cfg)
    with caplog.at_level(logging.INFO, logger="tfdet.engine.weights"):
        load_initial_weights(model, cfg, str(directory / "model.pkl"), MODEL_NAMES)
    lines = transfer_lines(caplog)
    loaded = caffe2_values(model, cfg.MRCNN.ROI_MASK_HEAD)
    check_fine_tuned(loaded, built, source, RCNN_REINITIALISED, lines, rcnn_expected_rows)
    check_rcnn_lines(lines)


def test_weights_h5_81_to_6_classes_through_the_trainer(rcnn_source, tmp_path, caplog):
    """TRAIN.WEIGHTS our .weights.h5 (its config.yaml beside it) in Trainer.initialize: the training set's names
    (Trainer.roidb.class_names) decide the copied rows."""
    directory, source = rcnn_source
    cfg = model_cfg("TRAIN.WEIGHTS", str(directory / "h5" / "model_final.weights.h5"), "OUTPUT_DIR", str(tmp_path))
    roidb = Roidb([], (1, 2, 3, 4, 5), MODEL_NAMES, ("a", "b", "c"), (), 0)
    trainer = Trainer(cfg, roidb=roidb)
    built = caffe2_values(trainer.model, cfg.MRCNN.ROI_MASK_HEAD)
    with caplog.at_level(logging.INFO, logger="tfdet.engine.weights"):
        assert trainer.initialize() == 0
    lines = transfer_lines(caplog)
    assert all(line.startswith(f"TRAIN.WEIGHTS {cfg.TRAIN.WEIGHTS}: re-initialised ") for line in lines)
    loaded = caffe2_values(trainer.model, cfg.MRCNN.ROI_MASK_HEAD)
    check_fine_tuned(loaded, built, source, RCNN_REINITIALISED, lines, rcnn_expected_rows)
    check_rcnn_lines(lines)


def test_other_mismatches_are_still_refused(rcnn_source, untouched_model, tmp_path):
    """A blob that differs for another reason than the class count (the FPN width) refuses the load, naming the
    blob and both shapes, and changes nothing; the class blobs are not reported as mismatches."""
    directory, source = rcnn_source
    cfg, model = untouched_model
    narrow = dict(source, fpn_inner_res5_2_sum_w=np.ones((16, 2048, 1, 1), np.float32))
    write_detectron_pkl(tmp_path / "narrow.pkl", narrow, None)
    with pytest.raises(ValueError) as refusal:
        load_initial_weights(model, cfg, str(tmp_path / "narrow.pkl"), MODEL_NAMES)
    message = str(refusal.value)
    assert "SHAPE MISMATCH fpn_inner_res5_2_sum_w: model expects (32, 2048, 1, 1), file has (16, 2048, 1, 1)" in message
    assert message.count("SHAPE MISMATCH") == 1

    narrow_cfg = tiny_cfg("MODEL.NUM_CLASSES", "81", "FPN.DIM", "16")  # our .weights.h5 of a narrower FPN
    write_source(narrow_cfg, tmp_path / "narrow", with_pkl=False)
    narrow_fpn = r"shape mismatch: fpn_inner_res5_2_sum_w \(1, 1, 2048, 16\) vs \(1, 1, 2048, 32\)"  # Keras layouts
    with pytest.raises(ValueError, match=narrow_fpn) as refusal:
        load_initial_weights(model, cfg, str(tmp_path / "narrow" / "h5" / "model_final.weights.h5"), MODEL_NAMES)
    assert "cls_score" not in str(refusal.value) and "\n" not in str(refusal.value)


@pytest.mark.filterwarnings("ignore:Skipping nested container")  # Keras, on the file it cannot load
def test_weights_h5_without_its_config_that_does_not_fit(rcnn_source, untouched_model, tmp_path):
    """Without config.yaml beside it the file's model is built from the training config with the stored class
    count; its 5 keypoints then do not fit the config's 3: one line naming the file and what to do."""
    directory, _ = rcnn_source
    alone = tmp_path / "model_final.weights.h5"
    shutil.copyfile(directory / "h5" / "model_final.weights.h5", alone)
    cfg, model = untouched_model
    with pytest.raises(ValueError) as refusal:
        load_initial_weights(model, cfg, str(alone), MODEL_NAMES)
    message = str(refusal.value)
    assert message.startswith(f"TRAIN.WEIGHTS {alone}: its weights do not fit the model of the training config with "
                              "the 81 classes the file stores")  # fmt: skip
    assert message.endswith("put the config.yaml of the model it holds beside it") and "\n" not in message
    assert "kps_score_lowres" in message


def test_training_checkpoint_of_other_classes_is_refused_in_one_line(untouched_model, tmp_path):
    with placeholder_initialization():
        coco = build_model(source_cfg(), training=True)
    prefix = tf.train.Checkpoint(model=untouched_model[1]).write(str(tmp_path / "ckpt"))
    with pytest.raises(ValueError) as refusal:
        load_initial_weights(coco, source_cfg(), prefix, COCO_CLASSES)
    message = str(refusal.value)
    assert message.startswith(f"TRAIN.WEIGHTS {prefix!r}: a training checkpoint restores only into the model it was ")
    assert "incompatible tensor" in message and "model_final.weights.h5" in message and "\n" not in message


def retinanet_expected_rows(anchors, source_classes, model_classes):
    """NumPy restatement of Detectron's retnet_cls_pred layout (test_retinanet reshapes the channels to (A, C)):
    sigmoid channels a * (C - 1) + (c - 1); the copied classes' channels of every anchor come from the source."""

    def expected(name, built, source):
        result = built.copy()
        for a in range(anchors):
            for c, coco in COPIED.items():
                if c == 0:
                    continue  # sigmoid: no background channel
                result[a * (model_classes - 1) + c - 1] = source[a * (source_classes - 1) + coco - 1]
        return result

    return expected


def test_retinanet_copies_class_channels_of_every_anchor(tmp_path, caplog):
    """RetinaNet, .pkl and our .weights.h5 without config.yaml (its model is the config's with the stored 81
    classes): retnet_cls_pred re-initialised (Detectron: N(0, 0.01), bias -log((1 - pi) / pi)) but for the
    same-name classes' channels."""
    source = write_source(retinanet_cfg(81), tmp_path, with_config=False)
    cfg = retinanet_cfg(6)
    anchors = cfg.RETINANET.SCALES_PER_OCTAVE * len(cfg.RETINANET.ASPECT_RATIOS)
    reinitialised = {
        "retnet_cls_pred_fpn2_w": ((anchors * 80, 32, 3, 3), (anchors * 5, 32, 3, 3)),
        "retnet_cls_pred_fpn2_b": ((anchors * 80,), (anchors * 5,)),
    }
    keras.utils.set_random_seed(SEED)
    model = build_model(cfg, training=True)
    built = caffe2_values(model)
    weights = built["retnet_cls_pred_fpn2_w"].ravel()
    assert abs(weights.std() / 0.01 - 1.0) < 0.1 and abs(weights.mean()) < 4 * 0.01 / math.sqrt(weights.size)
    prior = cfg.RETINANET.PRIOR_PROB
    np.testing.assert_allclose(built["retnet_cls_pred_fpn2_b"], -math.log((1 - prior) / prior), rtol=1e-6)
    # the .pkl leaves the built values in the channels it does not copy: the .h5 must give the same result
    for path in (tmp_path / "model.pkl", tmp_path / "h5" / "model_final.weights.h5"):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="tfdet.engine.weights"):
            load_initial_weights(model, cfg, str(path), MODEL_NAMES)
        lines = transfer_lines(caplog)
        expected_rows = retinanet_expected_rows(anchors, 81, 6)
        check_fine_tuned(caffe2_values(model), built, source, reinitialised, lines, expected_rows)
        for line in lines:
            assert "(81 -> 6 classes); copied from same-name source classes: 'person' 1->1, 'Dog' 17->3, " in line


def random_pair(rng, source_shape, model_shape):
    return rng.normal(size=source_shape).astype(np.float32), rng.normal(size=model_shape).astype(np.float32)


def test_layouts_of_softmax_retinanet_fc_masks_and_class_specific_boxes():
    """Blob-level layouts restated by hand: softmax RetinaNet (background channel 0 of every anchor, copied too),
    class-specific RetinaNet boxes (4 channels a class, no background), FC mask logits (RESOLUTION^2 rows a class),
    a class-agnostic box head (2 x 4 rows whatever the class count)."""
    rng = np.random.default_rng(0)
    names_81 = COCO_CLASSES
    cfg = load_config(RETINANET_CONFIG, ["MODEL.NUM_CLASSES", "6", "RETINANET.SOFTMAX", "True"])
    layouts = count_layouts(cfg)
    assert set(layouts) == {f"retnet_{head}_pred_fpn2_{kind}" for head in ("cls", "bbox") for kind in "wb"}
    assert layouts["retnet_bbox_pred_fpn2_w"].model_agnostic  # CLASS_SPECIFIC_BBOX False: 4 channels an anchor
    anchors = 6
    transfer = ClassTransfer(layouts, MODEL_NAMES)
    source, model = random_pair(rng, (anchors * 81,), (anchors * 6,))
    values, refused = transfer.resolve({"retnet_cls_pred_fpn2_b": (source, model)}, names_81)
    expected = model.copy()
    for a in range(anchors):
        for c, coco in COPIED.items():
            expected[a * 6 + c] = source[a * 81 + coco]
    np.testing.assert_array_equal(values["retnet_cls_pred_fpn2_b"], expected)
    assert refused == [] and "'__background__' 0->0" in transfer.lines[0]

    # Detectron's retnet_bbox_pred with CLASS_SPECIFIC_BBOX: channel a * 4 * (C - 1) + 4 * (c - 1) + k
    box_cfg = load_config(RETINANET_CONFIG, ["MODEL.NUM_CLASSES", "6", "RETINANET.CLASS_SPECIFIC_BBOX", "True"])
    transfer = ClassTransfer(count_layouts(box_cfg), MODEL_NAMES)
    source, model = random_pair(rng, (anchors * 4 * 80, 8, 3, 3), (anchors * 4 * 5, 8, 3, 3))
    values, _ = transfer.resolve({"retnet_bbox_pred_fpn2_w": (source, model)}, names_81)
    expected = model.copy()
    for a in range(anchors):
        for c, coco in COPIED.items():
            for k in range(4):
                if c:
                    expected[a * 20 + 4 * (c - 1) + k] = source[a * 320 + 4 * (coco - 1) + k]
    np.testing.assert_array_equal(values["retnet_bbox_pred_fpn2_w"], expected)

    fc_cfg = tiny_cfg("MODEL.NUM_CLASSES", "6", "MRCNN.USE_FC_OUTPUT", "True", "MODEL.CLS_AGNOSTIC_BBOX_REG", "True")
    layouts = count_layouts(fc_cfg)
    assert layouts["bbox_pred_w"].model_agnostic and not layouts["mask_fcn_logits_w"].model_agnostic
    side = fc_cfg.MRCNN.RESOLUTION
    transfer = ClassTransfer(layouts, MODEL_NAMES)
    source, model = random_pair(rng, (81 * side * side, 12), (6 * side * side, 12))
    values, _ = transfer.resolve({"mask_fcn_logits_w": (source, model)}, names_81)
    expected = model.copy()
    for c, coco in COPIED.items():
        expected[c * side * side : (c + 1) * side * side] = source[coco * side * side : (coco + 1) * side * side]
    np.testing.assert_array_equal(values["mask_fcn_logits_w"], expected)


def test_what_is_not_a_class_count_change():
    """Refused (left mismatched): another width besides the count, a class blob whose count is not the source's
    (its cls_score's), a blob that is not class-specific. Unknown names or none in common copy nothing and say why."""
    rng = np.random.default_rng(1)
    transfer = ClassTransfer.for_config(model_cfg(), MODEL_NAMES)
    values, refused = transfer.resolve({"cls_score_w": random_pair(rng, (81, 32), (6, 64))}, COCO_CLASSES)
    assert values == {} and refused == ["cls_score_w"]
    mismatches = {"cls_score_b": random_pair(rng, (81,), (6,)), "bbox_pred_b": random_pair(rng, (4 * 80,), (24,))}
    values, refused = transfer.resolve(mismatches, COCO_CLASSES)
    assert list(values) == ["cls_score_b"] and refused == ["bbox_pred_b"]
    assert transfer.resolve({"fc6_b": random_pair(rng, (32,), (64,))}, COCO_CLASSES) == ({}, ["fc6_b"])
    assert len(transfer.lines) == 1 and transfer.lines.pop().startswith("re-initialised cls_score_b: ")

    source, model = random_pair(rng, (81,), (6,))
    values, _ = ClassTransfer.for_config(model_cfg()).resolve({"cls_score_b": (source, model)}, COCO_CLASSES)
    np.testing.assert_array_equal(values["cls_score_b"], model)
    values, _ = transfer.resolve({"cls_score_b": (source, model)}, None)
    np.testing.assert_array_equal(values["cls_score_b"], model)
    other_names = ("__backdrop__",) + tuple(f"thing {c}" for c in range(1, 81))
    values, _ = transfer.resolve({"cls_score_b": (source, model)}, other_names)
    np.testing.assert_array_equal(values["cls_score_b"], model)
    assert transfer.lines[0].endswith("no rows copied: the source's class names are unknown")
    assert transfer.lines[1].endswith("no rows copied: no class name in common")


# Equal class counts: the source's classes a, b, c; the training set's c, a and a new d (same count, 4 with the
# background). Model class -> the source class whose rows it gets; d (3) keeps the model's initialisation.
ABC = ModelCategories(("__background__", "a", "b", "c"), (0, 1, 2, 3))
REORDERED = ("__background__", "c", "a", "d")
MOVED = {0: 0, 1: 3, 2: 1}
RCNN_CLASS_BLOBS = tuple(f"{head}_{kind}" for head in ("cls_score", "bbox_pred", "mask_fcn_logits") for kind in "wb")


def weights_lines(caplog):
    """The messages tfdet.engine.weights logged."""
    return [r.getMessage() for r in caplog.records if r.name == "tfdet.engine.weights"]


def fine_tune(cfg, path, class_names, caplog):
    """(built Caffe2 values, loaded Caffe2 values, transfer lines) of a fresh seeded training model of `cfg` given
    TRAIN.WEIGHTS `path` for the training set's `class_names`."""
    keras.utils.set_random_seed(SEED)
    model = build_model(cfg, training=True)
    built = caffe2_values(model, cfg.MRCNN.ROI_MASK_HEAD)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="tfdet.engine.weights"):
        load_initial_weights(model, cfg, str(path), class_names)
    lines = [line for line in weights_lines(caplog) if not line.startswith("Initialised from ")]
    return built, caffe2_values(model, cfg.MRCNN.ROI_MASK_HEAD), lines


@pytest.fixture(scope="module")
def abc_source(tmp_path_factory):
    """The tiny R-CNN with 4 classes (a, b, c stored with the .weights.h5; the .pkl stores no names)."""
    directory = tmp_path_factory.mktemp("abc_source")
    return directory, write_source(tiny_cfg(), directory, categories=ABC)


def test_equal_count_in_another_order_moves_rows_by_name(abc_source, caplog):
    """Our .weights.h5 of classes a, b, c into a model of c, a, d: every class blob (cls_score, bbox_pred's 4 rows,
    mask_fcn_logits' channel) of c and a comes from the source's same-name class at its new index, d's rows stay
    as the model drew them, in one line naming both."""
    directory, source = abc_source
    path = directory / "h5" / "model_final.weights.h5"
    built, loaded, lines = fine_tune(tiny_cfg(), path, REORDERED, caplog)
    assert lines == [
        f"TRAIN.WEIGHTS {path}: classes matched by name in {', '.join(RCNN_CLASS_BLOBS)} (4 classes on both sides): "
        "copied from same-name source classes: '__background__' 0->0, 'c' 3->1, 'a' 1->2; re-initialised (the "
        "model's initialisation): 'd' 3"
    ]
    check_rows(loaded, built, source, RCNN_CLASS_BLOBS, rcnn_rows(MOVED))
    for name in RCNN_CLASS_BLOBS:  # not a by-index copy: d's rows are not c's
        rows = 4 if name.startswith("bbox_pred") else 1
        assert not np.array_equal(loaded[name][3 * rows : 4 * rows], source[name][3 * rows : 4 * rows]), name


def test_equal_count_with_unknown_names_copies_rows_by_index_and_says_so(abc_source, caplog):
    """The 4-class .pkl stores no class names (only 81 classes are known: COCO's); our .weights.h5 into a model whose
    names are unknown: the class rows load by index, one line saying so."""
    directory, source = abc_source
    blobs = ", ".join(RCNN_CLASS_BLOBS)
    for path, names, unknown in (
        (directory / "model.pkl", REORDERED, "the source's class names are unknown"),
        (directory / "h5" / "model_final.weights.h5", None, "the model's class names are unknown"),
    ):
        _, loaded, lines = fine_tune(tiny_cfg(), path, names, caplog)
        by_index = f"class rows copied by index in {blobs} (4 classes on both sides): {unknown}"
        assert lines == [f"TRAIN.WEIGHTS {path}: {by_index}"]
        check_rows(loaded, {}, source, (), None)


def test_equal_count_coco_detectron_pkl_with_classes_moved_and_renamed(rcnn_source, caplog):
    """An 81-class Detectron .pkl (COCO's names) into an 81-class model whose json lists person and dog swapped and
    calls car 'automobile': person's and dog's rows swap places, car's are the model's own, the rest load as they
    are; one line."""
    directory, source = rcnn_source
    names = list(COCO_CLASSES)
    names[1], names[17], names[3] = "dog", "person", "automobile"
    moved = {c: c for c in range(81) if c != 3} | {1: 17, 17: 1}
    built, loaded, lines = fine_tune(source_cfg(), directory / "model.pkl", names, caplog)
    check_rows(loaded, built, source, RCNN_CLASS_BLOBS, rcnn_rows(moved))
    (line,) = lines
    pairs = ", ".join(f"{names[c]!r} {s}->{c}" for c, s in sorted(moved.items()))
    assert line == (
        f"TRAIN.WEIGHTS {directory / 'model.pkl'}: classes matched by name in {', '.join(RCNN_CLASS_BLOBS)} "
        f"(81 classes on both sides): copied from same-name source classes: {pairs}; re-initialised (the model's "
        "initialisation): 'automobile' 3"
    )
    assert "'dog' 17->1, 'bicycle' 2->2, " in line and "'person' 1->17" in line


def test_equal_count_retinanet_moves_class_channels_of_every_anchor(tmp_path, caplog):
    """RetinaNet (sigmoid: no background channel): retnet_cls_pred channel a * (C - 1) + c - 1 of model class c is
    the source's same-name class's, for every anchor; the class-agnostic box head loads as it is."""
    source = write_source(retinanet_cfg(4), tmp_path, categories=ABC)
    cfg = retinanet_cfg(4)
    anchors = cfg.RETINANET.SCALES_PER_OCTAVE * len(cfg.RETINANET.ASPECT_RATIOS)
    path = tmp_path / "h5" / "model_final.weights.h5"
    built, loaded, lines = fine_tune(cfg, path, REORDERED, caplog)
    assert lines == [
        f"TRAIN.WEIGHTS {path}: classes matched by name in retnet_cls_pred_fpn2_w, retnet_cls_pred_fpn2_b (4 classes "
        "on both sides): copied from same-name source classes: 'c' 3->1, 'a' 1->2; re-initialised (the model's "
        "initialisation): 'd' 3"
    ]

    def expected_rows(name, built_value, source_value):
        expected = built_value.copy()
        for a in range(anchors):
            for c, s in MOVED.items():
                if c:
                    expected[a * 3 + c - 1] = source_value[a * 3 + s - 1]
        return expected

    check_rows(loaded, built, source, ("retnet_cls_pred_fpn2_w", "retnet_cls_pred_fpn2_b"), expected_rows)


AGNOSTIC = ("MODEL.CLS_AGNOSTIC_BBOX_REG", "True", "MRCNN.CLS_SPECIFIC_MASK", "False")
AGNOSTIC_BLOBS = ("bbox_pred_w", "bbox_pred_b", "mask_fcn_logits_w", "mask_fcn_logits_b")


def check_agnostic_lines(lines, path, shapes, kinds):
    """One line per blob class-specific on one side only, both shapes, the model's initialisation kept."""
    for name, (old, new) in shapes.items():
        expected = (f"TRAIN.WEIGHTS {path}: re-initialised {name}: source {old}, model {new} ({kinds}: the model's "
                    "initialisation kept)")  # fmt: skip
        assert lines.count(expected) == 1, (expected, lines)


def test_class_specific_source_into_class_agnostic_heads(rcnn_source, caplog):
    """81-class class-specific .pkl and .weights.h5 into a 6-class model with a class-agnostic box regressor (2 x 4
    rows) and one mask: those keep the model's initialisation (detectron2 keeps a new layer of another shape),
    cls_score's same-name rows are copied as for any count change."""
    directory, source = rcnn_source
    cfg = model_cfg(*AGNOSTIC)
    shapes = {
        "bbox_pred_w": ((324, 64), (8, 64)), "bbox_pred_b": ((324,), (8,)),
        "mask_fcn_logits_w": ((81, 32, 1, 1), (1, 32, 1, 1)), "mask_fcn_logits_b": ((81,), (1,)),
    }  # fmt: skip
    reinitialised = {name: RCNN_REINITIALISED[name] for name in RCNN_REINITIALISED if name not in shapes} | shapes
    for path in (directory / "model.pkl", directory / "h5" / "model_final.weights.h5"):
        built, loaded, lines = fine_tune(cfg, path, MODEL_NAMES, caplog)
        check_fine_tuned(loaded, built, source, reinitialised, lines, rcnn_rows(COPIED, AGNOSTIC_BLOBS))
        check_agnostic_lines(lines, path, shapes, "class-specific source, class-agnostic model")


def test_class_agnostic_source_into_class_specific_heads(tmp_path, caplog):
    """The other way: an 81-class model with class-agnostic box and mask heads into the 6-class class-specific
    model; the class-specific heads keep the model's initialisation."""
    source = write_source(tiny_cfg("MODEL.NUM_CLASSES", "81", *AGNOSTIC), tmp_path)
    shapes = {
        "bbox_pred_w": ((8, 64), (24, 64)), "bbox_pred_b": ((8,), (24,)),
        "mask_fcn_logits_w": ((1, 32, 1, 1), (6, 32, 1, 1)), "mask_fcn_logits_b": ((1,), (6,)),
    }  # fmt: skip
    reinitialised = {name: RCNN_REINITIALISED[name] for name in RCNN_REINITIALISED if name not in shapes} | shapes
    for path in (tmp_path / "model.pkl", tmp_path / "h5" / "model_final.weights.h5"):
        built, loaded, lines = fine_tune(model_cfg(), path, MODEL_NAMES, caplog)
        check_fine_tuned(loaded, built, source, reinitialised, lines, rcnn_rows(COPIED, AGNOSTIC_BLOBS))
        check_agnostic_lines(lines, path, shapes, "class-agnostic source, class-specific model")


def test_class_agnostic_on_one_side_blob_level():
    """RetinaNet's box head (class-specific A x 4 x (C - 1) channels vs agnostic A x 4) and the upsampled mask head's
    fixed bilinear kernel (C x C vs 1 x 1) keep the model's value, both ways; agnostic on both sides, or a 2-class
    class-specific box head (the shape of an agnostic one), loads as it is."""
    rng = np.random.default_rng(2)
    anchors = num_anchors(retinanet_cfg(6))
    agnostic = ClassTransfer.for_config(retinanet_cfg(6), MODEL_NAMES)
    specific = ClassTransfer.for_config(
        load_config(RETINANET_CONFIG, ["MODEL.NUM_CLASSES", "6", "RETINANET.CLASS_SPECIFIC_BBOX", "True"]), MODEL_NAMES
    )
    cls_pred = random_pair(rng, (anchors * 80,), (anchors * 5,))
    coco_box, agnostic_box, six_box = ((anchors * 4 * n, 8, 3, 3) for n in (80, 1, 5))
    for transfer, (source, model), kinds in (
        (agnostic, random_pair(rng, coco_box, agnostic_box), "class-specific source, class-agnostic model"),
        (specific, random_pair(rng, agnostic_box, six_box), "class-agnostic source, class-specific model"),
    ):
        blobs = {"retnet_cls_pred_fpn2_b": cls_pred, "retnet_bbox_pred_fpn2_w": (source, model)}
        values, refused = transfer.resolve(blobs, COCO_CLASSES)
        assert refused == [] and set(values) == set(blobs)
        np.testing.assert_array_equal(values["retnet_bbox_pred_fpn2_w"], model)
        assert transfer.lines[-1] == (
            f"re-initialised retnet_bbox_pred_fpn2_w: source {source.shape}, model {model.shape} ({kinds}: the model's "
            "initialisation kept)"
        )
    same = random_pair(rng, agnostic_box, agnostic_box)
    lines = len(agnostic.lines)
    assert agnostic.resolve({"retnet_bbox_pred_fpn2_w": same}, COCO_CLASSES) == ({}, [])
    assert len(agnostic.lines) == lines

    upsampled = tiny_cfg("MODEL.NUM_CLASSES", "6", "MRCNN.UPSAMPLE_RATIO", "2", "MRCNN.CLS_SPECIFIC_MASK", "False")
    transfer = ClassTransfer.for_config(upsampled, MODEL_NAMES)
    source, model = random_pair(rng, (81, 81, 4, 4), (1, 1, 4, 4))
    blobs = {"cls_score_b": random_pair(rng, (81,), (6,)), "mask_fcn_logits_up_w": (source, model)}
    values, _ = transfer.resolve(blobs)
    np.testing.assert_array_equal(values["mask_fcn_logits_up_w"], model)
    assert transfer.lines[-1] == (
        "re-initialised mask_fcn_logits_up_w: source (81, 81, 4, 4), model (1, 1, 4, 4) (class-specific source, "
        "class-agnostic model: the model's initialisation kept)"
    )

    two_classes = ClassTransfer.for_config(tiny_cfg("MODEL.NUM_CLASSES", "2", *AGNOSTIC), ("__background__", "x"))
    box = random_pair(rng, (8, 64), (8, 64))
    assert two_classes.resolve({"cls_score_b": random_pair(rng, (2,), (2,)), "bbox_pred_w": box}, None) == ({}, [])
