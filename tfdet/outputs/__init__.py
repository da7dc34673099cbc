"""What a detection run writes besides its pictures: `detection_writer` (pictures, videos, detections.json,
images.json, for `tfdet.infer` and `savedmodel.run`) and `videopose3d` (VideoPose3D's per-video .npz).
Submodules are imported by name; importing this package imports nothing."""
