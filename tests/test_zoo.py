"""Detectron's zoo by name: `python -m porting zoo --list`, `zoo NAME --out DIR`, Predictor.from_zoo and
`tfdet.infer --zoo`, against a loopback mirror of Detectron's download site.

The table's facts are checked against Detectron's MODEL_ZOO.md and projects/GN/README.md (rows quoted below).
The default end-to-end test serves, at a zoo model's URL, a small Detectron-format model_final.pkl (the tiny
shapes config as its saved cfg, random blobs of its shapes, written as Detectron's Python 2 did): what it checks
is the zoo's path (URL, download, md5, a port with the file's own config and TEST settings, the cache and its
reuse), not a zoo architecture (tests/test_porting_zoo.py ports those). Its `slow` twin serves a full-size
e2e_mask_rcnn_R-50-FPN_1x file (44 M random parameters, 180 MB with momentum).
"""

import json

import cv2
import numpy as np
import pytest
import yaml

from porting.__main__ import main as porting_main
from porting.zoo_models import ZOO_MODELS, zoo_model
from support.detectron_fixtures import detectron_cfg_yaml, momentum_junk, random_blobs, write_py2_detectron_file
from support.http_mirror import detectron_mirror  # noqa: F401 (fixture)
from support.paths import shared_path
from support.training_fixtures import TINY_CONFIG
from tfdet.weights.download import C2_DETECTRON_CATALOG, catalog_url

BASE = "https://dl.fbaipublicfiles.com/detectron"

# Rows of the tables, as MODEL_ZOO.md / projects/GN/README.md print them: name -> (task, box, mask, kp, AR, id).
DOCUMENTED_ROWS = {
    # "End-to-End Faster & Mask R-CNN Baselines": R-50-FPN Mask 1x, 37.7 box / 33.9 mask, model id 35858933
    "e2e_mask_rcnn_R-50-FPN_1x": ("Mask R-CNN", "37.7", "33.9", "-", "-", 35858933),
    # same table: R-50-C4 Faster 1x, 34.8 box, 35857197
    "e2e_faster_rcnn_R-50-C4_1x": ("Faster R-CNN", "34.8", "-", "-", "-", 35857197),
    # "RetinaNet Baselines": X-101-64x4d-FPN 1x, 39.8 box, 36768875
    "retinanet_X-101-64x4d-FPN_1x": ("RetinaNet", "39.8", "-", "-", "-", 36768875),
    # "RPN Proposal Baselines": R-50-C4 RPN 1x, prop. AR 51.6, 35998355
    "rpn_R-50-C4_1x": ("RPN", "-", "-", "-", "51.6", 35998355),
    # "Fast & Mask R-CNN Baselines Using Precomputed RPN Proposals": R-50-FPN Fast 1x, 36.4 box, 36225147
    "fast_rcnn_R-50-FPN_1x": ("Fast R-CNN (precomputed proposals)", "36.4", "-", "-", "-", 36225147),
    # "End-to-End Keypoint-Only Mask R-CNN Baselines": R-101-FPN Kps s1x, 55.3 box / 65.8 kp, 37698009
    "e2e_keypoint_rcnn_R-101-FPN_s1x": ("Keypoint R-CNN", "55.3", "-", "65.8", "-", 37698009),
    # "Mask R-CNN with Bells & Whistles": X-152-32x8d-FPN-IN5k Mask s1x, 48.1 / 41.5 (with its test-time aug.)
    "e2e_mask_rcnn_X-152-32x8d-FPN-IN5k_1.44x": ("Mask R-CNN (bells & whistles)", "48.1", "41.5", "-", "-", 37129812),
    # GN README, "Longer training schedule": R-101-FPN, GN, Mask R-CNN 3x, 42.3 / 37.2, 48734779
    "e2e_mask_rcnn_R-101-FPN_3x_gn": ("Mask R-CNN (GN)", "42.3", "37.2", "-", "-", 48734779),
}
# Download links of MODEL_ZOO.md / the GN README for three rows above (their "model" link), below the base.
DOCUMENTED_PATHS = {
    "e2e_mask_rcnn_R-50-FPN_1x": "35858933/12_2017_baselines/e2e_mask_rcnn_R-50-FPN_1x.yaml.01_48_14.DzEQe4wC/output/"
    "train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl",
    "rpn_R-50-C4_1x": "35998355/12_2017_baselines/rpn_R-50-C4_1x.yaml.08_00_43.njH5oD9L/output/train/"
    "coco_2014_train%3Acoco_2014_valminusminival/rpn/model_final.pkl",
    "e2e_mask_rcnn_R-101-FPN_3x_gn": "GN/48734779/04_2018_gn_baselines/e2e_mask_rcnn_R-101-FPN_3x_gn_0417.09_55_23."
    "HMtcR8wg/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl",
}


def listed(capsys, *argv):
    """{name: row cells} of `python -m porting zoo --list` (cells split on runs of 2+ spaces)."""
    assert porting_main(["zoo", "--list", *argv]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["name", "task", "box", "AP", "mask", "AP", "kp", "AP", "prop", "AR", "size"]
    rows = {}
    for line in lines[1:-1]:
        cells = [cell.strip() for cell in line.split("  ") if cell.strip()]
        rows[cells[0]] = cells[1:]
    assert lines[-1].startswith(f"{len(rows)} models (Detectron's MODEL_ZOO.md and projects/GN)")
    return rows


def test_zoo_list_holds_every_trained_model_with_its_table_facts(capsys):
    rows = listed(capsys)
    # MODEL_ZOO.md links 74 model_final.pkl files (RPN 5, precomputed-proposal Fast/Mask 20, end-to-end
    # Faster/Mask 20, RetinaNet 8, bells & whistles 1, person RPN 4, keypoints 8 + 8); the GN README 4.
    assert len(rows) == len(ZOO_MODELS) == 78
    assert sum(name.endswith("_gn") for name in rows) == 4
    for name, (task, box, mask, kp, ar, model_id) in DOCUMENTED_ROWS.items():
        assert rows[name] == [task, box, mask, kp, ar, "-"], name  # size "-": not downloaded
        assert zoo_model(name).model_id == model_id
    for name, path in DOCUMENTED_PATHS.items():
        assert zoo_model(name).url == f"{BASE}/{path}"
    # maskrcnn-benchmark's catalog (its paths_catalog.py) and MODEL_ZOO.md agree on every model both name
    for entry in C2_DETECTRON_CATALOG:
        model_id, name = entry.split("/")
        assert catalog_url(f"catalog://Caffe2Detectron/COCO/{entry}") == zoo_model(name).url
        assert zoo_model(name).model_id == int(model_id)


def test_an_unknown_zoo_name_is_one_line_with_the_closest_names(tmp_path, capsys):
    assert porting_main(["zoo", "e2e_mask_rcnn_R50-FPN_1x", "--out", str(tmp_path / "out")]) == 1
    assert capsys.readouterr().err == (
        "error: 'e2e_mask_rcnn_R50-FPN_1x' is not a Detectron zoo model (closest: e2e_mask_rcnn_R-50-FPN_1x, "
        "e2e_mask_rcnn_R-50-FPN_2x, e2e_mask_rcnn_R-101-FPN_1x; python -m porting zoo --list lists all 78)\n"
    )
    assert not (tmp_path / "out").exists()


def test_zoo_list_sizes_come_from_the_server(detectron_mirror, capsys):
    detectron_mirror.remaining = len(ZOO_MODELS)
    model = zoo_model("rpn_R-50-C4_1x")
    detectron_mirror.add(model.path, bytes(3 * 2**20))
    rows = listed(capsys, "--sizes")
    assert rows["rpn_R-50-C4_1x"][-1] == "3 MB"
    assert rows["e2e_mask_rcnn_R-50-FPN_1x"][-1] == "-"  # the mirror has no such file
    assert detectron_mirror.paths("HEAD") == [m.path for m in ZOO_MODELS] and not detectron_mirror.paths()


# The tiny shapes config as a Faster R-CNN with Detectron's AffineChannel body and plain-conv box head: the
# cheapest model to build and run that still has a body, FPN, RPN and box head.
FASTER_TINY = {
    "MODEL": {"MASK_ON": False, "KEYPOINTS_ON": False, "BBOX_REG_WEIGHTS": (10.0, 10.0, 5.0, 5.0)},  # as files hold it
    "RESNETS": {"STEM_FUNC": "basic_bn_stem", "TRANS_FUNC": "bottleneck_transformation",
                "SHORTCUT_FUNC": "basic_bn_shortcut"},
    "FPN": {"USE_GN": False},
    "FAST_RCNN": {"ROI_BOX_HEAD": "fast_rcnn_heads.add_roi_Xconv1fc_head"},
}  # fmt: skip


def tiny_model_final(path, rng):
    """A Detectron-format model_final.pkl of the tiny Faster R-CNN: its blobs (random) and momentum, and its
    settings as the saved cfg (nested AttrDicts, as Detectron saves `cfg`). Returns (the blobs, the cfg)."""
    from tfdet.config import load_config
    from tfdet.layers import placeholder_initialization
    from tfdet.modeling import build_model
    from tfdet.modeling.detectron_names import detectron_inventory

    saved = yaml.safe_load(TINY_CONFIG.read_text())
    del saved["TRAIN"]["WEIGHTS"], saved["OUTPUT_DIR"]  # '' and a run folder: nothing a port reads
    for section, values in FASTER_TINY.items():
        saved[section].update(values)
    cfg = load_config(saved)
    with placeholder_initialization():
        model = build_model(cfg)
    blobs = random_blobs(detectron_inventory(model, cfg.MRCNN.ROI_MASK_HEAD), rng)
    write_py2_detectron_file(path, {**blobs, **momentum_junk(blobs)}, detectron_cfg_yaml(saved))
    return blobs, cfg


def assert_model_holds(model, cfg, blobs):
    """`model` holds `blobs`: a few of each kind (body, FPN, RPN, box head), compared in Caffe2 layout."""
    from porting.detectron_writer import model_to_blobs

    exported = model_to_blobs(model, cfg.MRCNN.ROI_MASK_HEAD)
    for name in ("conv1_w", "res3_0_branch2b_w", "fpn_inner_res5_2_sum_w", "conv_rpn_fpn2_w", "cls_score_w"):
        np.testing.assert_array_equal(exported[name], blobs[name], err_msg=name)


ZOO_NAME = "e2e_faster_rcnn_R-50-FPN_1x"


def test_zoo_port_end_to_end_then_from_zoo_and_infer_reuse_the_cached_port(detectron_mirror, tmp_path, capsys):
    from tfdet import infer
    from tfdet.config import load_config
    from tfdet.inference import Predictor

    model = zoo_model(ZOO_NAME)
    blobs, saved_cfg = tiny_model_final(tmp_path / "model_final.pkl", np.random.default_rng(0))
    detectron_mirror.add(model.path, (tmp_path / "model_final.pkl").read_bytes())

    out = tmp_path / "ported"
    assert porting_main(["zoo", ZOO_NAME, "--out", str(out)]) == 0
    assert detectron_mirror.paths() == [f"{model.path}.md5sum", model.path]
    cfg = load_config(out / "config.yaml")
    # the port's config is the file's own: its model and its TEST settings (not Detectron's defaults)
    assert (cfg.MODEL.NUM_CLASSES, cfg.MODEL.MASK_ON, cfg.TEST.SCALE, cfg.TEST.DETECTIONS_PER_IM) == (4, False, 128, 20)
    assert cfg.dump() == saved_cfg.dump()
    assert (out / "model.weights.h5").is_file()
    assert f"wrote {out / 'model.weights.h5'}" in capsys.readouterr().out

    predictor = Predictor.from_zoo(ZOO_NAME)  # the same port into the cache: the download is only re-checked
    port = detectron_mirror.cache / "zoo" / ZOO_NAME
    assert (port / "config.yaml").read_text() == (out / "config.yaml").read_text()
    assert detectron_mirror.paths()[2:] == [f"{model.path}.md5sum"]
    assert_model_holds(predictor.model, predictor.cfg, blobs)
    assert not [p for p in port.parent.iterdir() if p.name.startswith(".")]  # no staging folder left
    capsys.readouterr()

    # tfdet.infer --zoo takes the cached port's config and weights, then runs as with --cfg / --weights (which
    # tests/test_infer.py runs); here it stops at its input check, before building the model (the slow twin runs it)
    missing = tmp_path / "missing.png"
    assert infer.main(["--zoo", ZOO_NAME, "--input", str(missing), "--output", str(tmp_path / "o")]) == 2
    messages = capsys.readouterr().err.splitlines()
    assert messages[0] == f"using the port of {ZOO_NAME} cached in {port}"
    assert messages[-1].startswith("error: ") and str(missing) in messages[-1]
    assert len(detectron_mirror.requests) == 3  # the cached port is reused: no request at all


def test_infer_zoo_replaces_cfg_and_weights():
    from tfdet.infer import parse_args

    assert parse_args(["--zoo", ZOO_NAME, "--input", "a.jpg"]).zoo == ZOO_NAME
    for argv in (["--zoo", ZOO_NAME, "--cfg", "c.yaml", "a.jpg"], ["--zoo", ZOO_NAME, "--wts", "w", "a.jpg"]):
        with pytest.raises(SystemExit):
            parse_args(argv)


@pytest.mark.slow
def test_full_size_zoo_model_ports_from_the_mirror(detectron_mirror, tmp_path):
    """e2e_mask_rcnn_R-50-FPN_1x at full size: its blobs (support/detectron_fixtures.py's inventory of reference
    §2), momentum, MSRA's R-50.pkl junk, and Detectron's own YAML as the saved cfg; downloaded, checked and ported
    by name."""
    from porting.detectron_writer import model_to_blobs
    from support.detectron_fixtures import R50_MASK_FPN, body_blob_shapes, msra_imagenet_junk, zoo_blob_shapes
    from support.numpy_reference import PIXEL_MEANS
    from tfdet import infer
    from tfdet.config import load_config
    from tfdet.layers import placeholder_initialization
    from tfdet.modeling import build_model

    model = zoo_model("e2e_mask_rcnn_R-50-FPN_1x")
    blobs = random_blobs(zoo_blob_shapes(R50_MASK_FPN), np.random.default_rng(0))
    saved = yaml.safe_load(shared_path("detectron", "configs", "12_2017_baselines", "e2e_mask_rcnn_R-50-FPN_1x.yaml").read_text())
    saved["PIXEL_MEANS"] = PIXEL_MEANS
    junk = {**momentum_junk(blobs), **msra_imagenet_junk(body_blob_shapes(R50_MASK_FPN))}
    write_py2_detectron_file(tmp_path / "model_final.pkl", {**blobs, **junk}, detectron_cfg_yaml(saved))
    detectron_mirror.add(model.path, (tmp_path / "model_final.pkl").read_bytes())
    (tmp_path / "model_final.pkl").unlink()

    out = tmp_path / "ported"
    assert porting_main(["zoo", model.name, "--out", str(out)]) == 0
    cfg = load_config(out / "config.yaml")
    assert (cfg.MODEL.CONV_BODY, cfg.TEST.SCALE, cfg.TEST.MAX_SIZE) == ("FPN.add_fpn_ResNet50_conv5_body", 800, 1333)
    with placeholder_initialization():
        keras_model = build_model(cfg)
    keras_model.load_weights(str(out / "model.weights.h5"))
    exported = model_to_blobs(keras_model, cfg.MRCNN.ROI_MASK_HEAD)
    for name, value in blobs.items():
        np.testing.assert_array_equal(exported[name], value, err_msg=name)

    image = np.random.default_rng(1).integers(0, 255, (240, 320, 3), np.uint8)
    cv2.imwrite(str(tmp_path / "photo.png"), image)
    argv = ["--zoo", model.name, "--input", str(tmp_path / "photo.png"), "--output", str(tmp_path / "o")]
    assert infer.main(argv) == 0  # ported again into the cache (the download re-checked), then run
    assert detectron_mirror.paths() == [f"{model.path}.md5sum", model.path, f"{model.path}.md5sum"]
    images = json.loads((tmp_path / "o" / "images.json").read_text())
    assert [image["file_name"] for image in images["images"]] == [str(tmp_path / "photo.png")]
