"""The DA fork's YAML files (krumo/Domain-Adaptive-Faster-RCNN-PyTorch, configs/da_faster_rcnn/, copied here):
`FORK_YAMLS` {file name: text}, `write_yaml` to put one in a folder, `quiet_load` to load one through
`load_config` keeping the report it writes on stderr."""

import contextlib
import io

from tfdet.config import load_config

_COMMON = """MODEL:
  META_ARCHITECTURE: "GeneralizedRCNN"
  WEIGHT: "catalog://ImageNetPretrained/MSRA/R-50"
  DOMAIN_ADAPTATION_ON: True
  RPN:
    PRE_NMS_TOP_N_TEST: 6000
    POST_NMS_TOP_N_TEST: 1000
  ROI_BOX_HEAD:
    NUM_CLASSES: {classes}
  ROI_HEADS:
    BATCH_SIZE_PER_IMAGE: 256
    NMS: 0.3
  DA_HEADS:
    DA_IMG_GRL_WEIGHT: 0.1
    DA_INS_GRL_WEIGHT: 0.1
DATALOADER:
  SIZE_DIVISIBILITY: 32
DATASETS:
  TRAIN: ("{source}",)
  SOURCE_TRAIN: ("{source}",)
  TARGET_TRAIN: ("{target}",)
  TEST: ("{test}",)
INPUT:
  MIN_SIZE_TRAIN: (600,)
  MAX_SIZE_TRAIN: 1200
  MIN_SIZE_TEST: 600
  MAX_SIZE_TEST: 1200
SOLVER:
  BASE_LR: 0.001
  WEIGHT_DECAY: 0.0005
  STEPS: (50000,)
  MAX_ITER: 70000
  IMS_PER_BATCH: 2
TEST:
  IMS_PER_BATCH: 1
"""
# The four files differ only in these values (checked against the fork's text when they were copied).
FORK_YAMLS = {
    "e2e_da_faster_rcnn_R_50_C4_cityscapes_to_foggy_cityscapes.yaml": _COMMON.format(
        classes=9, source="cityscapes_fine_instanceonly_seg_train_cocostyle",
        target="foggy_cityscapes_fine_instanceonly_seg_train_cocostyle",
        test="foggy_cityscapes_fine_instanceonly_seg_val_cocostyle",
    ),
    "e2e_da_faster_rcnn_R_50_C4_cityscapes_to_kitti.yaml": _COMMON.format(
        classes=2, source="cityscapes_car_train_cocostyle", target="kitti_cocostyle", test="kitti_cocostyle"
    ),
    "e2e_da_faster_rcnn_R_50_C4_kitti_to_cityscapes.yaml": _COMMON.format(
        classes=2, source="kitti_cocostyle", target="cityscapes_car_train_cocostyle",
        test="cityscapes_car_val_cocostyle",
    ),
    "e2e_da_faster_rcnn_R_50_C4_sim10k.yaml": _COMMON.format(
        classes=2, source="sim10k_cocostyle", target="cityscapes_car_train_cocostyle",
        test="cityscapes_car_val_cocostyle",
    ),
}  # fmt: skip


def write_yaml(folder, name, text=None):
    path = folder / name
    path.write_text(FORK_YAMLS[name] if text is None else text)
    return path


def quiet_load(path, overrides=()):
    """(config, report written on stderr) of load_config."""
    report = io.StringIO()
    with contextlib.redirect_stderr(report):
        cfg = load_config(path, list(overrides))
    return cfg, report.getvalue()
