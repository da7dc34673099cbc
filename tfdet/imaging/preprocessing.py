"""Detectron's test-time image preparation (utils/blob.py): mean subtraction, resize, padding."""

import cv2
import numpy as np


def image_scale(height, width, target_size, max_size):
    """Detectron's `prep_im_for_blob` scale: shorter side to target_size unless the longer exceeds max_size."""
    scale = float(target_size) / float(min(height, width))
    if np.round(scale * max(height, width)) > max_size:
        scale = float(max_size) / float(max(height, width))
    return scale


def as_bgr_image(image):
    """An H x W x 3 array of `image` (H x W and H x W x 1 grayscale are repeated over 3 channels)."""
    if image is None:  # what cv2.imread gives for a missing path, before anything reads it as a 0-d array
        raise ValueError("Expected an H x W x 3 BGR image, got None: cv2.imread returns None for a missing or "
                         "unreadable file (check its path)")
    image = np.asarray(image)
    if image.ndim == 2:
        image = image[:, :, None]
    if image.ndim != 3 or image.shape[2] not in (1, 3) or min(image.shape[:2]) < 1:
        raise ValueError(f"Expected an H x W x 3 BGR image, got an array of shape {image.shape}")
    return np.repeat(image, 3, axis=2) if image.shape[2] == 1 else image


def subtract_means(image, pixel_means):
    """Detectron's `im -= PIXEL_MEANS`: float64 means from a float32 image, so numpy computes in float64 and
    rounds the result to float32 (rounding the means first would differ). A uint8 image takes the same
    values from a 256-entry table per channel (cv2.LUT: a 12-megapixel photo in 25 ms instead of 850 ms)."""
    means = np.asarray(pixel_means, np.float64).reshape(1, 1, 3)
    if image.dtype != np.uint8:
        return (image.astype(np.float64) - means).astype(np.float32)
    table = (np.arange(256, dtype=np.float64).reshape(256, 1, 1) - means).astype(np.float32)  # (256, 1, 3)
    return cv2.LUT(np.ascontiguousarray(image), table)


def prepare_image(image_bgr, pixel_means, target_size, max_size):
    """(resized float32 image minus means, scale), computed exactly as Detectron: subtract, then resize.

    The resize is cv2.resize with fx = fy = scale and INTER_LINEAR, as Detectron calls it.
    """
    image = subtract_means(as_bgr_image(image_bgr), pixel_means)
    scale = image_scale(image.shape[0], image.shape[1], target_size, max_size)
    resized = cv2.resize(image, None, None, fx=scale, fy=scale, interpolation=cv2.INTER_LINEAR)
    if resized.ndim == 2:  # cv2 drops a single channel axis; ours always has 3
        resized = resized[:, :, None]
    return resized, scale


def batch_images(images, stride=0):
    """Zero-pad images to one (B, H, W, 3) blob, H and W rounded up to `stride` when > 0 (FPN)."""
    height = max(im.shape[0] for im in images)
    width = max(im.shape[1] for im in images)
    if stride > 0:
        height = int(np.ceil(height / stride) * stride)
        width = int(np.ceil(width / stride) * stride)
    blob = np.zeros((len(images), height, width, 3), np.float32)
    for i, im in enumerate(images):
        blob[i, : im.shape[0], : im.shape[1]] = im
    return blob


def padding_stride(cfg):
    """What input images are padded to a multiple of (0: none beyond the batch's largest image):
    TFDET.SIZE_DIVISIBILITY when set, else Detectron's im_list_to_blob rule (FPN.COARSEST_STRIDE for FPN)."""
    if cfg.TFDET.SIZE_DIVISIBILITY > 0:
        return int(cfg.TFDET.SIZE_DIVISIBILITY)
    return int(cfg.FPN.COARSEST_STRIDE) if cfg.FPN.FPN_ON else 0


def model_inputs(images, cfg, target_size, max_size):
    """The inference model's inputs for a list of BGR images resized to (target_size, max_size): the
    mean-subtracted images padded into one blob (to `padding_stride`), and image_info rows (input
    height, input width, scale)."""
    return prepared_inputs(images, cfg.PIXEL_MEANS, target_size, max_size, padding_stride(cfg))


def prepared_inputs(images, pixel_means, target_size, max_size, stride):
    """`model_inputs` from the config's values: {"images": (B, H, W, 3) float32 blob, "image_info": (B, 3)}."""
    prepared = [prepare_image(im, pixel_means, target_size, max_size) for im in images]
    blob = batch_images([p[0] for p in prepared], stride)
    info = np.array([[im.shape[0], im.shape[1], scale] for im, (_, scale) in zip(images, prepared)], np.float32)
    return {"images": blob, "image_info": info}
