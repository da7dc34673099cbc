"""A training run's weights files: TRAIN.WEIGHTS in (with TRAIN.COPY_WEIGHTS), `model_final.weights.h5` out.

What TRAIN.WEIGHTS names is decided by `tfdet.weights.weights_file.weights_file` (as for every other weights
argument): a Detectron `.pkl` (an ImageNet backbone or a whole model), our `.weights.h5` (an inference
model's weights, copied by blob name) or a tfdet training checkpoint. From a file of other classes (another count,
or the same count in another order or with other names) or with a class-agnostic head where the model's is
class-specific (or back), `tfdet.modeling.class_transfer` says which blobs keep the model's initialisation and
which rows are copied where.
"""

import logging
import os
import shutil

import tensorflow as tf

from tfdet.config import load_config
from tfdet.data.coco_classes import model_categories
from tfdet.data.model_labels import read_model_categories, write_model_categories
from tfdet.engine.checkpoint import FINAL_WEIGHTS
from tfdet.layers import placeholder_initialization
from tfdet.modeling import build_model
from tfdet.modeling.blob_transfer import copy_weights_by_blob_name
from tfdet.modeling.class_transfer import ClassTransfer
from tfdet.modeling.domain_adaptation import is_domain_classifier_blob
from tfdet.weights.download import resolve_weights
from tfdet.weights.weights_file import DETECTRON_PICKLE, KERAS_WEIGHTS, load_detectron_pickle, weights_file

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.yaml"
ROLE = "TRAIN.WEIGHTS"


def load_initial_weights(model, cfg, path, class_names=None):
    """TRAIN.WEIGHTS (`path`, a local file, URL or catalog:// name) into the training `model` of `cfg`.

    From a `.pkl` blobs the file lacks keep their initialisation; an inference model has no DA heads, so a DA
    training model keeps theirs from a `.weights.h5`. From a `.pkl` or `.weights.h5`, the blobs that follow the
    class count get the rows of the file's classes named as the model's `class_names` (the training set's), at
    the model's index, and the model's initialisation elsewhere (equal counts and either side's names unknown: the
    rows by index); another keypoint count, or a box or mask head class-agnostic on one side only, keeps the
    model's initialisation (`tfdet.modeling.class_transfer`). What was done is logged: one line per blob of another
    count, one line for the class blobs of an equal count."""
    source = weights_file(path, cfg.DOWNLOAD_CACHE, ROLE, checkpoints=True)
    class_transfer = ClassTransfer.for_config(cfg, class_names)
    if source.kind == DETECTRON_PICKLE:
        report = load_detectron_pickle(model, cfg, source.path, allow_missing=True, class_transfer=class_transfer)
        loaded, missing = len(report.loaded), len(report.missing)
        logger.info("Initialised from %s: %d blobs loaded, %d missing", source.path, loaded, missing)
    elif source.kind == KERAS_WEIGHTS:
        source_model, source_names = weights_file_model(cfg, source.path)
        copy_weights_by_blob_name(
            source_model, model, cfg.MRCNN.ROI_MASK_HEAD, is_domain_classifier_blob, class_transfer, source_names
        )
    else:
        restore_training_checkpoint(model, source.path, path)
    for line in class_transfer.lines:
        logger.info("%s %s: %s", ROLE, path, line)


def weights_file_model(cfg, path):
    """(inference model holding our `.weights.h5` at `path`, its class names or None). The model is built from
    the `config.yaml` beside the file when there is one (the trainer and `python -m porting` write it), else from
    `cfg` with the class count the file stores (`tfdet.data.model_labels`)."""
    config_path = os.path.join(os.path.dirname(path), CONFIG_FILE)
    stored = read_model_categories(path)
    if os.path.isfile(config_path):
        source_cfg, built_from = load_config(config_path), config_path
    else:
        source_cfg, built_from = cfg.clone(), "the training config"
        if stored is not None:
            source_cfg.MODEL.NUM_CLASSES = len(stored.json_ids)
            built_from += f" with the {len(stored.json_ids)} classes the file stores"
    with placeholder_initialization():
        source = build_model(source_cfg)
    try:
        source.load_weights(path)
    except ValueError as error:
        keras_message = " ".join(str(error).split()).split(" Target variable:")[0]  # one line, no values
        raise ValueError(
            f"{ROLE} {path}: its weights do not fit the model of {built_from} ({keras_message}); "
            f"put the config.yaml of the model it holds beside it"
        ) from None
    names = model_categories(source_cfg.MODEL.NUM_CLASSES, source_cfg.MODEL.KEYPOINTS_ON, stored=stored).names
    return source, names


def restore_training_checkpoint(model, checkpoint, named=None):
    """The tfdet training checkpoint at prefix `checkpoint` (`named` so in the config) into `model`, which must
    be the model it was saved from: a checkpoint of other shapes (another class count) is refused in one line."""
    try:
        tf.train.Checkpoint(model=model).read(checkpoint).expect_partial().assert_existing_objects_matched()
    except ValueError as error:
        if "incompatible tensor" not in str(error):
            raise
        raise ValueError(
            f"{ROLE} {named or checkpoint!r}: a training checkpoint restores only into the model it was saved from "
            f"({str(error).strip()}); to fine-tune to other classes, start from that run's {FINAL_WEIGHTS}"
        ) from None


def copy_initial_weights(cfg, output_dir):
    """TRAIN.COPY_WEIGHTS with TRAIN.AUTO_RESUME, as Detectron's `create_model`: unless training already finished
    in `output_dir`, copy the TRAIN.WEIGHTS file there under its own name; returns the copy's path or None."""
    finished = os.path.exists(os.path.join(output_dir, FINAL_WEIGHTS))
    if not (cfg.TRAIN.AUTO_RESUME and cfg.TRAIN.COPY_WEIGHTS) or finished:
        return None
    source = resolve_weights(cfg.TRAIN.WEIGHTS, cfg.DOWNLOAD_CACHE)  # a URL: the checked download
    if not os.path.isfile(source):
        raise FileNotFoundError(f"TRAIN.COPY_WEIGHTS copies the TRAIN.WEIGHTS file, and {source!r} is not a file")
    os.makedirs(output_dir, exist_ok=True)
    target = os.path.join(output_dir, os.path.basename(source))
    shutil.copyfile(source, target)
    logger.info("Copied %s to %s", source, output_dir)
    return target


def export_final_weights(cfg, training_model, directory, categories=None):
    """The training model's weights in an inference model, saved as `model_final.weights.h5` (temp file +
    rename) beside `config.yaml`; returns the weights path. `categories` (a ModelCategories: the training
    set's classes) are stored in the file (`tfdet.data.model_labels`). The inference model is built on the
    default strategy, outside any training strategy's scope. The trainer calls it after its last checkpoint,
    whose save checked that every weight is finite (`TrainingCheckpointer.save`)."""
    with placeholder_initialization():
        inference_model = build_model(cfg)
    copy_weights_by_blob_name(training_model, inference_model, cfg.MRCNN.ROI_MASK_HEAD)
    path = os.path.join(directory, FINAL_WEIGHTS)
    temporary = os.path.join(directory, f".{os.getpid()}.{FINAL_WEIGHTS}")
    inference_model.save_weights(temporary)
    if categories is not None:
        write_model_categories(temporary, categories)
    os.replace(temporary, path)
    with open(os.path.join(directory, CONFIG_FILE), "w", encoding="utf-8") as config_file:
        config_file.write(cfg.dump())
    return path
