"""tfdet's configuration: Detectron's keys and defaults, YAML loading, overrides and strict checks.

    from tfdet.config import load_config
    cfg = load_config("configs/e2e_mask_rcnn_R-50-FPN_1x.yaml", ["TEST.SCALE", "600"])
    cfg.MODEL.NUM_CLASSES

Every key, its default and its meaning: tfdet/config/defaults.py; what tfdet does with each, and
`check_supported(cfg, use)`, which refuses at the point of use the values it does not implement:
tfdet/config/support.py. Importing this package does not import TensorFlow.
"""

from tfdet.config.config_node import Config
from tfdet.config.errors import ConfigError, ConfigWarning, FrozenConfigError
from tfdet.config.loader import get_default_config, load_config
from tfdet.config.support import check_supported

__all__ = [
    "Config",
    "ConfigError",
    "ConfigWarning",
    "FrozenConfigError",
    "check_supported",
    "get_default_config",
    "load_config",
]
