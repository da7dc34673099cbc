"""The TEST.* settings both model families' detection outputs take: Detectron's core/test.py (R-CNN) and
core/test_retinanet.py read the same keys for box regression, NMS and the detections kept."""


def soft_nms_setting(cfg):
    """TEST.SOFT_NMS as (method, sigma), or None when disabled."""
    return (cfg.TEST.SOFT_NMS.METHOD, cfg.TEST.SOFT_NMS.SIGMA) if cfg.TEST.SOFT_NMS.ENABLED else None


def voting_setting(cfg):
    """TEST.BBOX_VOTE as (VOTE_TH, SCORING_METHOD), or None when disabled."""
    return (cfg.TEST.BBOX_VOTE.VOTE_TH, cfg.TEST.BBOX_VOTE.SCORING_METHOD) if cfg.TEST.BBOX_VOTE.ENABLED else None


def detection_settings(cfg):
    """The keyword arguments every detection-output layer takes: TEST.BBOX_REG, TEST.NMS (or TEST.SOFT_NMS) and
    TEST.DETECTIONS_PER_IM."""
    return {
        "apply_regression": cfg.TEST.BBOX_REG,
        "nms_threshold": cfg.TEST.NMS,
        "detections_per_image": cfg.TEST.DETECTIONS_PER_IM,
        "soft_nms": soft_nms_setting(cfg),
    }
