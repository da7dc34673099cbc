"""Pictures of detections drawn with OpenCV, in the manner of Detectron's `vis_one_image`.

Translucent masks (light palette colour, half opacity, white contour), thin green boxes, white
"class score" labels on a translucent green band, and keypoint skeletons with Detectron's
`vis_keypoints` rainbow colours and its mid-shoulder/mid-hip lines. Detections are drawn largest
first so small objects stay on top. Line widths and text grow with the image, so a label stays
legible on a large photo; a small image (a 128-px shapes image) is drawn enlarged by a whole factor, to
PICTURE_MIN_SIDE px or more on its shorter side, since text small enough to fit it cannot be read. No
function modifies the image it is given.
"""

import colorsys

import cv2
import numpy as np

from tfdet.data.keypoint_names import COCO_KEYPOINT_CONNECTIONS, COCO_KEYPOINTS

BOX_GREEN = (15, 127, 18)  # BGR of Detectron's _GREEN (18, 127, 15)
WHITE = (255, 255, 255)
MASK_ALPHA = 0.5  # vis_one_image fills mask polygons at alpha 0.5 ...
MASK_WHITENING = 0.4  # ... with the palette colour moved 40% toward white
BOX_ALPHA = 0.6
LABEL_ALPHA = 0.6
KEYPOINT_ALPHA = 0.7  # vis_keypoints blends the skeleton at 0.7
PICTURE_MIN_SIDE = 512  # pictures of smaller images are drawn enlarged, where labels of 9 px or more fit

# MATLAB's "lines" colours open Detectron's colormap; golden-ratio hues follow for more objects.
_FIRST_COLOURS_RGB = (
    (0.000, 0.447, 0.741), (0.850, 0.325, 0.098), (0.929, 0.694, 0.125), (0.494, 0.184, 0.556),
    (0.466, 0.674, 0.188), (0.301, 0.745, 0.933), (0.635, 0.078, 0.184),
)  # fmt: skip
_PALETTE_SIZE = 79

_NOSE = COCO_KEYPOINTS.index("nose")
_SHOULDERS = (COCO_KEYPOINTS.index("right_shoulder"), COCO_KEYPOINTS.index("left_shoulder"))
_HIPS = (COCO_KEYPOINTS.index("right_hip"), COCO_KEYPOINTS.index("left_hip"))


def mask_palette():
    """(79, 3) float BGR colours in 0..255 for successive masks."""
    golden = (np.sqrt(5) - 1) / 2
    extra = [colorsys.hsv_to_rgb((0.1 + i * golden) % 1.0, 0.75, 0.85) for i in range(_PALETTE_SIZE - 7)]
    rgb = np.array(list(_FIRST_COLOURS_RGB) + extra, np.float64) * 255.0
    return rgb[:, ::-1]


def rainbow(x):
    """Matplotlib's 'rainbow' colormap as (r, g, b) in 0..1: |2x - 1/2|, sin(pi x), cos(pi x / 2), clipped."""
    x = np.asarray(x, np.float64)
    return np.clip(np.stack([np.abs(2 * x - 0.5), np.sin(np.pi * x), np.cos(np.pi * x / 2)], axis=-1), 0.0, 1.0)


def keypoint_colours(connections=COCO_KEYPOINT_CONNECTIONS):
    """BGR 0..255 colour of each skeleton edge, then of nose-to-mid-shoulder and mid-shoulder-to-mid-hip."""
    rgb = rainbow(np.linspace(0.0, 1.0, len(connections) + 2)) * 255.0
    return [tuple(float(c) for c in colour[::-1]) for colour in rgb]


def class_label(class_id, score, class_names=None):
    """'person 0.98' with names, 'id7 0.98' without (Detectron's get_class_string)."""
    class_id = int(class_id)
    if class_names is not None and 0 <= class_id < len(class_names):
        name = class_names[class_id]
    else:
        name = f"id{class_id}"
    return f"{name} {score:0.2f}"


class DrawingScale:
    """Line widths and font scale for an image: Detectron's sizes on a ~600 px image, grown with larger ones."""

    def __init__(self, image_shape):
        factor = max(min(image_shape[:2]) / 600.0, 0.5)
        self.box = max(1, round(1.0 * factor))
        self.contour = max(1, round(2.0 * factor))
        self.keypoint_line = max(1, round(2.0 * factor))
        self.keypoint_radius = max(2, round(3.0 * factor))
        self.font_scale = 0.4 * factor
        self.font_thickness = max(1, round(factor))


def draw_box(image, box, colour=BOX_GREEN, thickness=1, alpha=BOX_ALPHA):
    """Copy of `image` with the outline of box x1,y1,x2,y2 blended in at `alpha`."""
    out = image.copy()
    _draw_box(out, box, colour, thickness, alpha)
    return out


def draw_label(image, position, text, font_scale=0.4, thickness=1, alpha=LABEL_ALPHA):
    """Copy of `image` with white `text` on a translucent green band whose bottom-left is `position`.

    A label that would leave the top of the image is placed below `position` instead.
    """
    out = image.copy()
    _draw_label(out, position, text, font_scale, thickness, alpha)
    return out


def draw_mask(image, mask, colour, alpha=MASK_ALPHA, contour_thickness=1):
    """Copy of `image` with boolean `mask` (H, W) tinted by `colour` (BGR) and outlined in white.

    Tint and outline are blended at `alpha`, as vis_one_image draws a filled polygon with a white edge.
    """
    mask = np.asarray(mask, bool)
    if mask.shape != image.shape[:2]:
        raise ValueError(f"mask of shape {mask.shape} does not match an image of shape {image.shape}")
    out = image.copy()
    _draw_mask(out, mask, colour, alpha, contour_thickness)
    return out


def draw_keypoints(image, keypoints, kp_thresh=2.0, alpha=KEYPOINT_ALPHA, thickness=2, radius=3, skeleton=None):
    """Copy of `image` with one object's skeleton; `keypoints` is (K, 3+) x, y, score per keypoint.

    A keypoint is shown when its score (Detectron: the heatmap logit) exceeds `kp_thresh`; an edge
    when both ends are shown. `skeleton`: edges as 0-based index pairs; None means COCO's person skeleton
    with Detectron's nose/shoulder/hip mid-lines for 17 keypoints, and points only for any other count.
    Detectron's vis_keypoints colours, blended at `alpha`.
    """
    out = image.copy()
    _draw_keypoints(out, np.asarray(keypoints, np.float64), kp_thresh, alpha, thickness, radius, skeleton)
    return out


def draw_detections(
    image, detections, class_names=None, thresh=0.7, kp_thresh=2.0, skeleton=None, min_side=PICTURE_MIN_SIDE
):
    """Copy of BGR uint8 `image` with the detections scoring >= `thresh` drawn (Predictor.predict's dict).

    `class_names[i]` names class id i (COCO_CLASSES for 81-class models); without names, ids are shown.
    `skeleton`: the keypoint edges (see `draw_keypoints`). An image whose shorter side is under `min_side`
    is drawn enlarged (`enlarge`); 0 draws every image at its own size.
    """
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise ValueError(f"Expected an H x W x 3 uint8 BGR image, got {image.dtype} {image.shape}")
    image, detections = enlarge(image, detections, min_side)
    boxes = np.asarray(detections["boxes"], np.float64).reshape(-1, 4)
    scores = np.asarray(detections["scores"], np.float64).reshape(-1)
    classes = np.asarray(detections["classes"]).reshape(-1)
    masks, keypoints = detections.get("masks"), detections.get("keypoints")
    scale = DrawingScale(image.shape)
    palette = mask_palette()
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    shown = [i for i in np.argsort(-areas, kind="stable") if scores[i] >= thresh]
    out = image.copy()
    for colour_index, i in enumerate(shown):
        _draw_box(out, boxes[i], BOX_GREEN, scale.box, BOX_ALPHA)
        if masks is not None:
            colour = palette[colour_index % len(palette)] * (1.0 - MASK_WHITENING) + 255.0 * MASK_WHITENING
            _draw_mask(out, np.asarray(masks[i], bool), colour, MASK_ALPHA, scale.contour)
        if keypoints is not None:
            kps = np.asarray(keypoints[i], np.float64)
            _draw_keypoints(out, kps, kp_thresh, KEYPOINT_ALPHA, scale.keypoint_line, scale.keypoint_radius, skeleton)
    for i in shown:  # labels last, so that no mask covers a name
        label = class_label(classes[i], scores[i], class_names)
        _draw_label(out, (boxes[i, 0], boxes[i, 1] - 2), label, scale.font_scale, scale.font_thickness, LABEL_ALPHA)
    return out


def enlarge(image, detections, min_side):
    """(image, detections) scaled up by the smallest whole factor f that takes the image's shorter side to
    `min_side` or more (unchanged if it is there already). The photo is resized bilinearly; source pixel i covers
    pixels f i .. f i + f - 1 (cv2.resize puts its centre at f i + (f - 1) / 2), so a box spans the same pixels
    (x1 -> f x1, x2 -> f x2 + f - 1), a keypoint stays on its pixel (x -> f x + (f - 1) / 2) and a mask, repeated
    f times, covers the same ones."""
    shorter = min(image.shape[:2])
    factor = -(-min_side // shorter) if shorter else 1
    if factor <= 1:
        return image, detections
    height, width = image.shape[:2]
    enlarged = cv2.resize(image, (width * factor, height * factor), interpolation=cv2.INTER_LINEAR)
    scaled = dict(detections)
    boxes = np.asarray(detections["boxes"], np.float64).reshape(-1, 4) * factor
    scaled["boxes"] = boxes + np.array([0, 0, factor - 1, factor - 1])
    if detections.get("masks") is not None:
        scaled["masks"] = np.asarray(detections["masks"], bool).repeat(factor, axis=1).repeat(factor, axis=2)
    if detections.get("keypoints") is not None:
        keypoints = np.array(detections["keypoints"], np.float64)
        keypoints[..., :2] = keypoints[..., :2] * factor + (factor - 1) / 2
        scaled["keypoints"] = keypoints
    return enlarged, scaled


# The drawing itself works in place on `out`, and only inside the region it touches (fast on big photos).


def _region(shape, x1, y1, x2, y2, margin):
    """Slices of the rectangle x1..x2, y1..y2 grown by `margin` and clipped to an image of `shape`."""
    height, width = shape[:2]
    top, bottom = max(int(np.floor(y1)) - margin, 0), min(int(np.ceil(y2)) + margin + 1, height)
    left, right = max(int(np.floor(x1)) - margin, 0), min(int(np.ceil(x2)) + margin + 1, width)
    return (slice(top, max(bottom, top)), slice(left, max(right, left))), (left, top)


def _blend(out, region, overlay, alpha, where=None):
    """out[region] = (1 - alpha) out[region] + alpha overlay, only at `where` (all pixels when None)."""
    blended = cv2.addWeighted(out[region], 1.0 - alpha, overlay, alpha, 0.0)
    out[region] = blended if where is None else np.where(where[:, :, None], blended, out[region])


def _draw_box(out, box, colour, thickness, alpha):
    x1, y1, x2, y2 = (int(round(float(v))) for v in box[:4])
    region, (left, top) = _region(out.shape, x1, y1, x2, y2, thickness)
    overlay = out[region].copy()
    if overlay.size == 0:
        return
    cv2.rectangle(overlay, (x1 - left, y1 - top), (x2 - left, y2 - top), colour, thickness)
    _blend(out, region, overlay, alpha)


def _draw_label(out, position, text, font_scale, thickness, alpha):
    font = cv2.FONT_HERSHEY_SIMPLEX
    (text_w, text_h), baseline = cv2.getTextSize(text, font, font_scale, thickness)
    pad = max(1, text_h // 4)
    band_h, band_w = text_h + baseline + 2 * pad, text_w + 2 * pad
    x0, y0 = int(position[0]), int(position[1])
    if y0 - band_h < 0:
        y0 = min(y0 + band_h, out.shape[0])
    x0 = min(max(x0, 0), max(out.shape[1] - band_w, 0))
    band = (slice(max(y0 - band_h, 0), y0), slice(x0, min(x0 + band_w, out.shape[1])))
    if out[band].size:
        _blend(out, band, np.full(out[band].shape, BOX_GREEN, np.uint8), alpha)
    cv2.putText(out, text, (x0 + pad, y0 - pad - baseline), font, font_scale, WHITE, thickness, cv2.LINE_AA)


def _draw_mask(out, mask, colour, alpha, contour_thickness):
    rows, columns = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    if len(rows) == 0:
        return
    region, _ = _region(out.shape, columns[0], rows[0], columns[-1], rows[-1], contour_thickness + 1)
    crop = mask[region].astype(np.uint8)
    overlay = out[region].copy()
    overlay[crop > 0] = np.asarray(colour, np.float64).round().astype(np.uint8)
    contours, _ = cv2.findContours(crop.copy(), cv2.RETR_CCOMP, cv2.CHAIN_APPROX_NONE)
    cv2.drawContours(overlay, contours, -1, WHITE, contour_thickness, cv2.LINE_AA)
    cv2.drawContours(crop, contours, -1, 1, contour_thickness)
    _blend(out, region, overlay, alpha, where=crop > 0)


def _draw_keypoints(out, keypoints, kp_thresh, alpha, thickness, radius, skeleton):
    xy, score = keypoints[:, :2], keypoints[:, 2]
    coco_person = skeleton is None and len(keypoints) == len(COCO_KEYPOINTS)
    if skeleton is None:
        skeleton = COCO_KEYPOINT_CONNECTIONS if coco_person else ()
    visible = score > kp_thresh
    if not visible.any():
        return
    margin = radius + thickness + 1
    region, (left, top) = _region(out.shape, *xy[visible].min(axis=0), *xy[visible].max(axis=0), margin)
    canvas = out[region].copy()
    if canvas.size == 0:
        return
    colours = keypoint_colours(skeleton)

    def point(value):
        return int(round(value[0] - left)), int(round(value[1] - top))

    if coco_person:
        mid_shoulder, shoulder_score = xy[list(_SHOULDERS)].mean(axis=0), score[list(_SHOULDERS)].min()
        mid_hip, hip_score = xy[list(_HIPS)].mean(axis=0), score[list(_HIPS)].min()
        edges = len(skeleton)
        if shoulder_score > kp_thresh and score[_NOSE] > kp_thresh:
            cv2.line(canvas, point(mid_shoulder), point(xy[_NOSE]), colours[edges], thickness, cv2.LINE_AA)
        if shoulder_score > kp_thresh and hip_score > kp_thresh:
            cv2.line(canvas, point(mid_shoulder), point(mid_hip), colours[edges + 1], thickness, cv2.LINE_AA)
    for colour, (a, b) in zip(colours, skeleton):
        if visible[a] and visible[b]:
            cv2.line(canvas, point(xy[a]), point(xy[b]), colour, thickness, cv2.LINE_AA)
        for end in (a, b):
            if visible[end]:
                cv2.circle(canvas, point(xy[end]), radius, colour, -1, cv2.LINE_AA)
    joined = {end for edge in skeleton for end in edge}
    for end in np.flatnonzero(visible):
        if end not in joined:  # a keypoint no edge joins: a dot in the last colour
            cv2.circle(canvas, point(xy[end]), radius, colours[-1], -1, cv2.LINE_AA)
    _blend(out, region, canvas, alpha)
