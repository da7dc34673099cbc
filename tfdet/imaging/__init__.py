"""Image code without TensorFlow: NumPy and OpenCV only, shared by the Predictor and by `savedmodel.run`, the
runner that needs only a runtime (it must never import TensorFlow). Test-time preparation is Detectron's
`prep_im_for_blob`, the mask paste its `segm_results`, the keypoint decoding its `heatmaps_to_keypoints`.
Submodules are imported by name; importing this package imports nothing."""
