"""The serving signatures' output names, and their batched tensors -> per-image Predictor dicts.

Shared by the exporter (which names the outputs) and the clients (which read them back as
`tfdet.inference.Predictor.predict` returns them). Imports no TensorFlow unless RoI masks must be
pasted, so that a REST client needs numpy only.
"""

import numpy as np

NUM_DETECTIONS = "num_detections"
BOXES = "detection_boxes"
SCORES = "detection_scores"
CLASSES = "detection_classes"
CLASS_NAMES = "detection_class_names"
MASKS = "detection_masks"
KEYPOINTS = "detection_keypoints"
KEYPOINT_PROBS = "detection_keypoint_probs"
IMAGE_SIZES = "image_sizes"

MASK_FORMATS = ("image", "roi")

# Signature input names; a REST client sends the encoded images as {"b64": ...} instances.
ENCODED_INPUT = "image_bytes"
TENSOR_INPUT = "images"


def detections_per_image(outputs, mask_format="image", mask_threshold=0.5):
    """Batched signature outputs (numpy-convertible) -> list of Predictor-style dicts, one per image.

    Each dict has `boxes` (N, 4) float32 x1,y1,x2,y2 in input pixels, `scores` (N,) float32,
    `classes` (N,) int32, `class_names` (a list of N str) when the model serves them, `masks` (N, H, W)
    bool when the model has masks, `keypoints` (N, K, 3) and `keypoint_probs` (N, K) float32 when it has
    keypoints, N = num_detections of that image. `mask_format` says
    how the model was exported: "image" masks are cropped to `image_sizes`; "roi" masks (M x M
    probabilities) are pasted into the image as Detectron does, above `mask_threshold`.
    """
    if mask_format not in MASK_FORMATS:
        raise ValueError(f"mask_format must be one of {MASK_FORMATS}, got {mask_format!r}")
    missing = [name for name in (NUM_DETECTIONS, BOXES, SCORES, CLASSES, IMAGE_SIZES) if name not in outputs]
    if missing:
        raise ValueError(f"not a tfdet detection signature's outputs: missing {', '.join(missing)}")
    arrays = {name: np.asarray(value) for name, value in outputs.items()}
    if MASKS in arrays and mask_format == "image":
        masks_size = arrays[MASKS].shape[-2:]
        if tuple(masks_size) != tuple(arrays[IMAGE_SIZES].max(axis=0)):
            raise ValueError(
                f"{MASKS} of size {tuple(masks_size)} are not image masks (images up to "
                f"{tuple(arrays[IMAGE_SIZES].max(axis=0))}): was the model exported with --mask-format roi?"
            )
    return [_one_image(arrays, i, mask_format, mask_threshold) for i in range(len(arrays[NUM_DETECTIONS]))]


def _one_image(arrays, index, mask_format, mask_threshold):
    count = int(arrays[NUM_DETECTIONS][index])
    height, width = (int(v) for v in arrays[IMAGE_SIZES][index])
    result = {
        "boxes": arrays[BOXES][index, :count].astype(np.float32),
        "scores": arrays[SCORES][index, :count].astype(np.float32),
        "classes": arrays[CLASSES][index, :count].astype(np.int32),
    }
    if CLASS_NAMES in arrays:  # bytes over gRPC and in TensorFlow, str over REST
        result["class_names"] = [_text(name) for name in arrays[CLASS_NAMES][index, :count]]
    if MASKS in arrays:
        masks = arrays[MASKS][index, :count]
        if mask_format == "image":
            result["masks"] = masks[:, :height, :width].astype(bool)
        else:
            result["masks"] = _paste(masks, result["boxes"], height, width, mask_threshold)
    if KEYPOINTS in arrays:
        result["keypoints"] = arrays[KEYPOINTS][index, :count].astype(np.float32)
        result["keypoint_probs"] = arrays[KEYPOINT_PROBS][index, :count].astype(np.float32)
    return result


def _text(name):
    """A served class name as str (UTF-8 bytes from TensorFlow and gRPC, str from REST's JSON)."""
    return name.decode("utf-8") if isinstance(name, bytes) else str(name)


def _paste(masks, boxes, height, width, threshold):
    """RoI mask probabilities -> binary image masks with tfdet's Detectron-exact paste."""
    from tfdet.ops.masks import paste_masks

    return paste_masks(masks.astype(np.float32), boxes, height, width, threshold).numpy()
