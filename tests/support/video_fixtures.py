"""Videos for the video tests: `write_video` writes frames with OpenCV, and `decode_like_prepare_data_2d_custom`
reads a `tfdet.infer` .npz archive the way VideoPose3D's data/prepare_data_2d_custom.py does."""

import cv2
import numpy as np

def decode_like_prepare_data_2d_custom(filename):
    """VideoPose3D's data/prepare_data_2d_custom.py `decode`, step for step (the script is not importable)."""
    data = np.load(filename, encoding="latin1", allow_pickle=True)
    bb = data["boxes"]
    kp = data["keypoints"]
    metadata = data["metadata"].item()
    results_bb, results_kp = [], []
    for i in range(len(bb)):
        if len(bb[i][1]) == 0 or len(kp[i][1]) == 0:
            results_bb.append(np.full(4, np.nan, dtype=np.float32))
            results_kp.append(np.full((17, 4), np.nan, dtype=np.float32))
            continue
        best_match = np.argmax(bb[i][1][:, 4])
        results_bb.append(bb[i][1][best_match, :4])
        results_kp.append(kp[i][1][best_match].T.copy())
    bb = np.array(results_bb, dtype=np.float32)
    kp = np.array(results_kp, dtype=np.float32)[:, :, :2]
    mask = ~np.isnan(bb[:, 0])
    indices = np.arange(len(bb))
    for i in range(4):
        bb[:, i] = np.interp(indices, indices[mask], bb[mask, i])
    for i in range(17):
        for j in range(2):
            kp[:, i, j] = np.interp(indices, indices[mask], kp[mask, i, j])
    return bb, kp, metadata, mask


def write_video(path, frames, fps=10, codec="MJPG"):
    height, width = frames[0].shape[:2]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*codec), fps, (width, height))
    assert writer.isOpened()
    for frame in frames:
        writer.write(frame)
    writer.release()
