"""Keypoint R-CNN head (Detectron's keypoint_rcnn_heads.py): conv stack, then heatmap logits.

`add_roi_pose_head_v1convX`: RoIAlign -> `conv_fcn1..N` (+ ReLU). `add_keypoint_outputs`:
`kps_score_lowres` (ConvTranspose, 2x) -> `kps_score` (fixed bilinear ConvTranspose, UP_SCALE x):
(R, HEATMAP_SIZE, HEATMAP_SIZE, NUM_KEYPOINTS) logits, 56x56 for the zoo's 14x14 RoIs.
"""

from tfdet.modeling.backbones.conv_norm import conv, relu
from tfdet.modeling.registry import KEYPOINT_HEADS, RoIHeadOutput
from tfdet.modeling.roi_heads.common import bilinear_upsample, caffe2_fill, conv_relu_stack, conv_transpose, pool_rois


def conv_stack_features(cfg, roi_features):
    """NUM_STACKED_CONVS x (`conv_fcn<i>`, CONV_HEAD_KERNEL square, CONV_HEAD_DIM channels, + ReLU)."""
    kernel = cfg.KRCNN.CONV_HEAD_KERNEL
    return conv_relu_stack(
        roi_features, cfg, "conv_fcn", cfg.KRCNN.NUM_STACKED_CONVS, cfg.KRCNN.CONV_HEAD_DIM, kernel,
        padding=kernel // 2, kernel_initializer=caffe2_fill(cfg.KRCNN.CONV_INIT, 0.01),
    )


@KEYPOINT_HEADS.register("keypoint_rcnn_heads.add_roi_pose_head_v1convX")
def add_roi_pose_head_v1convX(cfg, body, rois, box_indices):
    """RoIAlign (KRCNN.ROI_XFORM_*) -> conv_fcn stack."""
    roi_feat = pool_rois(cfg, "KRCNN", body, rois, box_indices, "keypoint_roi_feat")
    return RoIHeadOutput(conv_stack_features(cfg, roi_feat), cfg.KRCNN.CONV_HEAD_DIM)


def _deconv_2x(cfg, x, name, filters, fill):
    """ConvTranspose kernel DECONV_KERNEL, stride 2, pad int(kernel / 2 - 1): 2x for even kernels."""
    kernel = cfg.KRCNN.DECONV_KERNEL
    return conv_transpose(x, name, filters, kernel, 2, int(kernel / 2 - 1), fill)


def add_keypoint_outputs(cfg, head):
    """Keypoint heatmap logits (R, S, S, NUM_KEYPOINTS) from the head's features.

    Optional `kps_deconv` (USE_DECONV) + ReLU; then `kps_score_lowres` (`kps_score` when UP_SCALE
    is 1): a 2x ConvTranspose (USE_DECONV_OUTPUT) or a 1x1 conv; then `kps_score`, the fixed
    bilinear UP_SCALE x upsampling, when UP_SCALE > 1.
    """
    x = head.features
    num_keypoints = cfg.KRCNN.NUM_KEYPOINTS
    if cfg.KRCNN.USE_DECONV:
        x = _deconv_2x(cfg, x, "kps_deconv", cfg.KRCNN.DECONV_DIM, caffe2_fill("GaussianFill", 0.01))
        x = relu(x, "kps_deconv_relu")
    upsample = cfg.KRCNN.UP_SCALE > 1
    name = "kps_score_lowres" if upsample else "kps_score"
    fill = caffe2_fill(cfg.KRCNN.CONV_INIT, 0.001)
    if cfg.KRCNN.USE_DECONV_OUTPUT:
        x = _deconv_2x(cfg, x, name, num_keypoints, fill)
    else:
        x = conv(x, name, num_keypoints, 1, kernel_initializer=fill)
    if upsample:
        x = bilinear_upsample(x, "kps_score", cfg.KRCNN.UP_SCALE)
    return x
