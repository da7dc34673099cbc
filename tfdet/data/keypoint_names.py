"""COCO person keypoints in Detectron's order (utils/keypoints.py), its flip map and skeleton (utils/vis.py).

Heatmap channel k of a keypoint model is COCO_KEYPOINTS[k]. Flipping an image horizontally swaps
each left/right pair; `flip_permutation` gives the channel order that does it.
"""

COCO_KEYPOINTS = (
    "nose",
    "left_eye",
    "right_eye",
    "left_ear",
    "right_ear",
    "left_shoulder",
    "right_shoulder",
    "left_elbow",
    "right_elbow",
    "left_wrist",
    "right_wrist",
    "left_hip",
    "right_hip",
    "left_knee",
    "right_knee",
    "left_ankle",
    "right_ankle",
)

COCO_KEYPOINT_FLIP_MAP = {
    "left_eye": "right_eye",
    "left_ear": "right_ear",
    "left_shoulder": "right_shoulder",
    "left_elbow": "right_elbow",
    "left_wrist": "right_wrist",
    "left_hip": "right_hip",
    "left_knee": "right_knee",
    "left_ankle": "right_ankle",
}

# Skeleton edges drawn between keypoints, in Detectron's kp_connections order.
COCO_KEYPOINT_CONNECTIONS = tuple(
    (COCO_KEYPOINTS.index(a), COCO_KEYPOINTS.index(b))
    for a, b in (
        ("left_eye", "right_eye"),
        ("left_eye", "nose"),
        ("right_eye", "nose"),
        ("right_eye", "right_ear"),
        ("left_eye", "left_ear"),
        ("right_shoulder", "right_elbow"),
        ("right_elbow", "right_wrist"),
        ("left_shoulder", "left_elbow"),
        ("left_elbow", "left_wrist"),
        ("right_hip", "right_knee"),
        ("right_knee", "right_ankle"),
        ("left_hip", "left_knee"),
        ("left_knee", "left_ankle"),
        ("right_shoulder", "left_shoulder"),
        ("right_hip", "left_hip"),
    )
)


def flip_permutation(names=COCO_KEYPOINTS, flip_map=None):
    """Index k -> index of k's mirror image (itself when unpaired), for reordering flipped keypoints."""
    flip_map = COCO_KEYPOINT_FLIP_MAP if flip_map is None else flip_map
    mirror = {**flip_map, **{right: left for left, right in flip_map.items()}}
    return tuple(names.index(mirror.get(name, name)) for name in names)
