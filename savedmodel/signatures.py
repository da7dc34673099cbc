"""The serving module: a detector (R-CNN or RetinaNet) behind TF Serving signatures that take images as
clients have them (encoded bytes or uint8 RGB tensors) and return padded, named detections."""

import numpy as np
import tensorflow as tf

from savedmodel import outputs as names
from savedmodel.label_map import class_name_table
from savedmodel.loaded_model import check_exportable
from savedmodel.preprocessing import prepare_batch, prepare_same_size_batch
from tfdet.data.coco_classes import model_categories
from tfdet.data.transforms import decode_bgr
from tfdet.imaging.preprocessing import padding_stride
from tfdet.ops.masks import paste_masks


class DetectionServingModule(tf.Module):
    """A Keras model behind two signatures, `serve_encoded` and `serve_image_tensor`.

    Both return `num_detections` (B,) int32, `detection_boxes` (B, D, 4) float32 x1,y1,x2,y2 in
    input pixels, `detection_scores` (B, D) float32, `detection_classes` (B, D) int32,
    `detection_class_names` (B, D) string (each detection's class name from a constant table of
    `categories`, a ModelCategories, by default `model_categories` of the config; "" in padding rows),
    `image_sizes` (B, 2) int32 (height, width), plus `detection_masks` when MASK_ON — (B, D, H, W)
    uint8 0/1 pasted into images padded to the batch's largest height and width ("image"), or
    (B, D, M, M) float32 probabilities of each detection's class ("roi") — and
    `detection_keypoints` (B, D, K, 3) float32 x, y, heatmap logit with
    `detection_keypoint_probs` (B, D, K) float32 when KEYPOINTS_ON; D = TEST.DETECTIONS_PER_IM,
    rows past num_detections are zeros.
    """

    def __init__(self, model, cfg, mask_format="image", categories=None):
        super().__init__(name="tfdet_serving")
        if mask_format not in names.MASK_FORMATS:
            raise ValueError(f"mask_format must be one of {names.MASK_FORMATS}, got {mask_format!r}")
        check_exportable(cfg)
        # TF Serving's loader restores the variables the object graph holds as tf.Variables. A
        # tracked Keras 3 model would hold copies of its variables there, and the signatures would
        # read the originals, which nothing restores ("Could not find variable", TF issue #72963):
        # track the underlying tf.Variables and keep the model itself out of the object graph.
        self.model_variables = [variable.value for variable in model.weights]
        self._mask_format = mask_format
        self._pixel_means = np.asarray(cfg.PIXEL_MEANS, np.float64).reshape(3).tolist()
        self._target_size = int(cfg.TEST.SCALE)
        self._max_size = int(cfg.TEST.MAX_SIZE)
        self._stride = padding_stride(cfg)
        self._mask_threshold = float(cfg.MRCNN.THRESH_BINARIZE)
        self._detections_per_image = int(cfg.TEST.DETECTIONS_PER_IM)
        if categories is None:
            categories = model_categories(cfg.MODEL.NUM_CLASSES, cfg.MODEL.KEYPOINTS_ON)
        if len(categories.json_ids) != cfg.MODEL.NUM_CLASSES:
            raise ValueError(f"{len(categories.json_ids)} classes named for a model of {cfg.MODEL.NUM_CLASSES}")
        self._class_names = list(class_name_table(categories))
        # One traced model call shared by both signatures (traced once, stored once). Nothing here is traced
        # with AutoGraph: the model, the preparation's loops over the request's images and the mask paste use
        # TF control flow explicitly, and converting their code cost seconds of every export.
        self._run_model = tf.function(
            lambda images, image_info: model({"images": images, "image_info": image_info}, training=False),
            input_signature=[tf.TensorSpec([None, None, None, 3], tf.float32), tf.TensorSpec([None, 3], tf.float32)],
            autograph=False,
        )
        self.serve_encoded = tf.function(
            self._serve_encoded,
            input_signature=[tf.TensorSpec([None], tf.string, name=names.ENCODED_INPUT)],
            autograph=False,
        )
        self.serve_image_tensor = tf.function(
            self._serve_image_tensor,
            input_signature=[tf.TensorSpec([None, None, None, 3], tf.uint8, name=names.TENSOR_INPUT)],
            autograph=False,
        )

    def signatures(self):
        """The signature map for `tf.saved_model.save`."""
        return {"serving_default": self.serve_encoded, "image_tensor": self.serve_image_tensor}

    def _serve_image_tensor(self, images):
        # One tensor holds images of one size: prepared as one, no loop over them (exports to other runtimes).
        # RGB to BGR by a gather: OpenVINO reads no ReverseV2.
        bgr = tf.gather(images, [2, 1, 0], axis=-1)
        return self._detect(*prepare_same_size_batch(
            bgr, self._pixel_means, self._target_size, self._max_size, self._stride
        ))  # fmt: skip

    def _serve_encoded(self, image_bytes):
        return self._detect(*prepare_batch(
            tf.shape(image_bytes)[0], lambda i: decode_bgr(image_bytes[i]), self._pixel_means, self._target_size,
            self._max_size, self._stride,
        ))  # fmt: skip

    def _detect(self, blob, image_info, image_sizes):
        raw = self._run_model(blob, image_info)
        result = {
            names.NUM_DETECTIONS: tf.cast(raw["num_detections"], tf.int32),
            names.BOXES: tf.cast(raw["boxes"], tf.float32),
            names.SCORES: tf.cast(raw["scores"], tf.float32),
            names.CLASSES: tf.cast(raw["classes"], tf.int32),
            names.IMAGE_SIZES: image_sizes,
        }
        # a constant of the graph (stock Const and GatherV2): any server or process names classes without tfdet
        result[names.CLASS_NAMES] = tf.gather(tf.constant(self._class_names, tf.string), result[names.CLASSES])
        if "mask_probs" in raw:
            masks = tf.cast(raw["mask_probs"], tf.float32)
            if self._mask_format == "image":
                masks = self._paste_batch(masks, result[names.BOXES], result[names.NUM_DETECTIONS], image_sizes)
            result[names.MASKS] = masks
        if "keypoints" in raw:
            result[names.KEYPOINTS] = tf.cast(raw["keypoints"][..., :3], tf.float32)
            result[names.KEYPOINT_PROBS] = tf.cast(raw["keypoints"][..., 3], tf.float32)
        return result

    def _paste_batch(self, probs, boxes, num_detections, image_sizes):
        """Each image's real detections pasted as Predictor does, padded to (D, max H, max W) uint8.

        The real detections of every image are pasted in one pass, each clipped to its own image on a canvas of
        the batch's largest size, then scattered into the padded layout: no loop over the images (a loop inside
        this signature's graph, unlike the model's, reaches ONNX with no shape on its iteration counter, which
        ONNX Runtime refuses)."""
        largest = tf.reduce_max(image_sizes, axis=0)
        batch, slots = tf.shape(probs)[0], self._detections_per_image
        real = tf.range(slots)[None, :] < num_detections[:, None]
        positions = tf.cast(tf.where(tf.reshape(real, [-1]))[:, 0], tf.int32)  # (R,) into B * D, image-major
        image_indices = positions // slots
        sizes = tf.gather(image_sizes, image_indices)
        masks = paste_masks(
            tf.gather(tf.reshape(probs, tf.concat([[-1], tf.shape(probs)[2:]], 0)), positions),
            tf.gather(tf.reshape(boxes, [-1, 4]), positions),
            sizes[:, 0],
            sizes[:, 1],
            self._mask_threshold,
            canvas_size=largest,
        )
        canvas = tf.concat([[batch * slots], largest], axis=0)
        pasted = tf.scatter_nd(positions[:, None], tf.cast(masks, tf.uint8), canvas)
        return tf.reshape(pasted, tf.concat([[batch, slots], largest], axis=0))
