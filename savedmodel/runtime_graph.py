"""The graph every runtime export holds: the detector from prepared images to its raw detections.

The runner prepares images and finishes detections as `tfdet.inference.Predictor` does, with the same
TensorFlow-free code (`tfdet.imaging.preprocessing`, `tfdet.imaging.mask_paste`, `tfdet.imaging.keypoint_decoding`); the
runtime runs only what lies between. Inputs: `images` (B, H, W, 3) float32, the resized, mean-subtracted BGR images
padded into one blob, and `image_info` (B, 3) float32 rows (input height, input width, scale). Outputs
(`RAW_OUTPUTS`): `num_detections` (B,) int32, `boxes` (B, D, 4) float32 x1, y1, x2, y2 in input pixels, `scores`
(B, D), `classes` (B, D) int32, plus `mask_probs` (B, D, M, M) of each detection's class when MASK_ON and
`keypoint_heatmaps` (B, D, S, S, K) logits when KEYPOINTS_ON (keypoints are decoded by the runner: each box's
heatmaps are resized to the box's own size, which no fixed-shape graph holds).
"""

import keras
import tensorflow as tf

from tfdet.layers.detection_output import ScatterToDetections

RAW_OUTPUTS = ("num_detections", "boxes", "scores", "classes", "mask_probs", "keypoint_heatmaps")
IMAGES, IMAGE_INFO = "images", "image_info"


def raw_detection_model(model):
    """`model` (tfdet's inference keras.Model) with keypoint heatmaps in place of decoded keypoints."""
    outputs = dict(model.output)
    if "keypoints" in outputs:
        heatmaps = model.get_layer("roi_keypoints").input[0]  # (R, S, S, K) of the real detections
        _, positions, classes = model.get_layer("keypoints").input
        del outputs["keypoints"]
        outputs["keypoint_heatmaps"] = ScatterToDetections(name="keypoint_heatmaps")([heatmaps, positions, classes])
    return keras.Model(model.input, outputs, name=f"{model.name}_raw")


class RawDetectionModule(tf.Module):
    """`detect(images, image_info)`: the raw detection model as one signature, its variables tracked."""

    def __init__(self, model):
        super().__init__(name="tfdet_raw_detections")
        raw = raw_detection_model(model)
        # As in savedmodel.signatures: track the tf.Variables, keep the Keras model out of the object graph.
        self.model_variables = [variable.value for variable in raw.weights]
        self.detect = tf.function(
            lambda images, image_info: {
                name: tensor
                for name, tensor in raw({IMAGES: images, IMAGE_INFO: image_info}, training=False).items()
                if name in RAW_OUTPUTS
            },
            input_signature=[
                tf.TensorSpec([None, None, None, 3], tf.float32, name=IMAGES),
                tf.TensorSpec([None, 3], tf.float32, name=IMAGE_INFO),
            ],
            autograph=False,
        )


def write_raw_saved_model(model, path):
    """A SavedModel at `path` whose `serving_default` signature is `RawDetectionModule.detect` of `model`.

    RoIAlign's crops are traced as gathers (`portable_crop_and_resize`): runtimes without CropAndResize
    read them."""
    from tfdet.ops.roi_align import portable_crop_and_resize

    with portable_crop_and_resize():
        module = RawDetectionModule(model)
        signature = module.detect.get_concrete_function()
    options = tf.saved_model.SaveOptions(experimental_custom_gradients=False)
    tf.saved_model.save(module, str(path), signatures={"serving_default": signature}, options=options)
    return path
