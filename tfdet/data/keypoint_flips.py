"""Which keypoints swap under a horizontal flip: shared by the roidb (the pairs of a dataset's keypoint
names) and the shapes generator (the pairs of its own schema)."""


def keypoint_flip_pairs(keypoint_names, flip_map=None):
    """Index pairs (i, j) of keypoints that swap under a horizontal flip.

    `flip_map` ({name: name}) gives them explicitly, as Detectron's `keypoint_flip_map`; otherwise
    every name containing "left" is paired with the same name with "right" when that exists
    (`left_eye` <-> `right_eye`, `hand_left` <-> `hand_right`).
    """
    index = {name: i for i, name in enumerate(keypoint_names)}
    if flip_map is None:
        flip_map = {n: n.replace("left", "right") for n in keypoint_names if "left" in n}
        flip_map = {a: b for a, b in flip_map.items() if b in index}
    pairs = []
    for a, b in flip_map.items():
        if a not in index or b not in index:
            raise ValueError(f"keypoint flip map names {a!r} <-> {b!r}, not both among {list(keypoint_names)}")
        pairs.append((index[a], index[b]))
    return tuple(sorted(pairs))
