"""Predictor: BGR images in, Detectron's detections out (im_detect_all, with test-time augmentation when
the config enables it)."""

import numpy as np
import tensorflow as tf

from tfdet.config import Config, check_supported, load_config
from tfdet.data.coco_classes import model_categories
from tfdet.data.model_labels import read_model_categories
from tfdet.graph_options import cpu_graph_options
from tfdet.imaging.mask_paste import paste_masks
from tfdet.imaging.preprocessing import as_bgr_image, model_inputs
from tfdet.layers import placeholder_initialization
from tfdet.modeling import build_model
from tfdet.op_tracebacks import user_frames_only
from tfdet.test_time_augmentation import TestTimeAugmentation, uses_test_time_augmentation
from tfdet.weights.weights_file import load_weights, weights_file


class Predictor:
    """Runs a generalized R-CNN on images given as H x W x 3 uint8 BGR arrays (as cv2.imread gives).

    `cfg` is a Config or a path to a Detectron YAML; `weights` a `.weights.h5` file of ours, a
    Detectron `.pkl` (ported on the fly), a Detectron URL or `catalog://` name (downloaded and md5-checked), or
    None for the builder's random initialisation. Each is checked here, once: the config's keys
    (`check_supported(cfg, "inference")`), the weights file (`tfdet.weights.weights_file.weights_file`: a missing or
    unknown file is one FileNotFoundError line, before anything is built) and the classes it stores.
    `categories` (a `tfdet.data.coco_classes.ModelCategories`) says what its class ids mean: the classes
    stored in the weights file, else COCO's for 81 classes, else the ids (`model_categories`).

    A command that has checked these itself (to report a problem before a slow step, in its own order) hands
    them over with `Predictor.from_checked`, which checks nothing again.
    """

    def __init__(self, cfg, weights=None):
        cfg = cfg if isinstance(cfg, Config) else load_config(cfg)
        check_supported(cfg, "inference")  # a key tfdet does not implement is refused, never ignored
        source = None if weights is None else weights_file(weights, cfg.DOWNLOAD_CACHE)
        stored = None if source is None else read_model_categories(source.path)
        self._build(cfg, source, model_categories(cfg.MODEL.NUM_CLASSES, cfg.MODEL.KEYPOINTS_ON, stored=stored))

    @classmethod
    def from_checked(cls, cfg, weights, categories):
        """A Predictor of inputs its caller has already checked, each once: `cfg` a Config that passed
        `check_supported(cfg, "inference")`, `weights` a `tfdet.weights.weights_file.WeightsFile` (a local file of a
        known kind; a URL already downloaded) or None, `categories` the ModelCategories its class ids mean
        (`model_categories` of the classes the weights store and of the dataset json the command was given)."""
        predictor = cls.__new__(cls)
        predictor._build(cfg, weights, categories)
        return predictor

    def _build(self, cfg, weights, categories):
        """Build the model of `cfg`, load `weights` (a WeightsFile or None) into it and trace its call."""
        self.cfg = cfg
        if weights is None:
            self.model = build_model(self.cfg)
        else:
            with placeholder_initialization():  # every weight comes from the file
                self.model = build_model(self.cfg)
            load_weights(self.model, self.cfg, weights)
        self.categories = categories
        self._run = tf.function(
            self.model,
            input_signature=[
                {
                    "images": tf.TensorSpec([None, None, None, 3], tf.float32),
                    "image_info": tf.TensorSpec([None, 3], tf.float32),
                }
            ],
            reduce_retracing=True,
            autograph=False,  # the model uses TF control flow explicitly; converting its code costs seconds
        )
        # TEST.BBOX_AUG / MASK_AUG / KPS_AUG: Detectron's augmented test, one image at a time.
        augmented = uses_test_time_augmentation(self.cfg)
        self._augmentation = TestTimeAugmentation(self.cfg, self.model) if augmented else None
        if not augmented:
            # Traced here, once, for every image size: the first predict() pays the first run only, not the
            # trace (docs/design.md decision 7).
            self._run.get_concrete_function()

    @classmethod
    def from_zoo(cls, name):
        """A Predictor of Detectron zoo model `name` (`python -m porting zoo --list` lists them), downloaded and
        ported once into $TFDET_CACHE/zoo/NAME/ (model.weights.h5, config.yaml) and loaded from there after."""
        from porting.zoo import ported_zoo_files  # porting builds on tfdet: imported only here

        return cls(*ported_zoo_files(name))

    def predict(self, image):
        """Detections of one image, or a list of results for a list of images (sizes may differ).

        Returns numpy arrays sorted by descending score: `boxes` (N, 4) float32 x1,y1,x2,y2 in
        input pixels, `scores` (N,), `classes` (N,) int32 in 1..NUM_CLASSES-1, `masks` (N, H, W)
        bool when MASK_ON, `keypoints` (N, K, 3) float32 x, y, heatmap logit when KEYPOINTS_ON
        (Detectron thresholds keypoints on that logit: --kp-thresh 2) and `keypoint_probs` (N, K)
        float32, the heatmap's softmax probability at each keypoint (Detectron's 4th row).
        """
        if isinstance(image, (list, tuple)):
            return self._predict_batch(list(image))
        return self._predict_batch([image])[0]

    def model_inputs(self, images):
        """The model's inputs for a list of BGR images: the resized, mean-subtracted images padded into one
        blob, and image_info rows (input height, input width, scale)."""
        return model_inputs(images, self.cfg, self.cfg.TEST.SCALE, self.cfg.TEST.MAX_SIZE)

    def _predict_batch(self, images):
        images = [as_bgr_image(image) for image in images]  # a missing image (None) in one line, TTA included
        with cpu_graph_options(), user_frames_only():
            if self._augmentation is not None:
                return [self._augmentation.detect(image, self._mask_paster(image.shape[:2])) for image in images]
            outputs = {k: v.numpy() for k, v in self._run(self.model_inputs(images)).items()}
            return [self._image_results(outputs, i, images[i].shape[:2]) for i in range(len(images))]

    def _mask_paster(self, image_size):
        """(N, M, M) soft masks and their boxes -> (N, H, W) boolean masks of an image of `image_size` (H, W),
        pasted as Detectron's segm_results does (`tfdet.imaging.mask_paste`)."""
        height, width = int(image_size[0]), int(image_size[1])
        threshold = self.cfg.MRCNN.THRESH_BINARIZE
        return lambda probs, boxes: paste_masks(probs, boxes, height, width, threshold)

    def _image_results(self, outputs, index, image_size):
        count = int(outputs["num_detections"][index])
        result = {
            "boxes": outputs["boxes"][index, :count].astype(np.float32),
            "scores": outputs["scores"][index, :count].astype(np.float32),
            "classes": outputs["classes"][index, :count].astype(np.int32),
        }
        if "mask_probs" in outputs:
            result["masks"] = self._mask_paster(image_size)(outputs["mask_probs"][index, :count], result["boxes"])
        if "keypoints" in outputs:
            result["keypoints"] = outputs["keypoints"][index, :count, :, :3].astype(np.float32)
            result["keypoint_probs"] = outputs["keypoints"][index, :count, :, 3].astype(np.float32)
        return result
