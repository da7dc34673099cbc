"""The exception and warning types of the config system."""


class ConfigError(ValueError):
    """A config key or value tfdet cannot accept; the message names the full dotted key."""


class FrozenConfigError(ConfigError, AttributeError):
    """A write to a frozen config (load_config returns frozen configs; clone() gives a mutable copy)."""


class ConfigWarning(UserWarning):
    """An old Detectron spelling was accepted and rewritten, or a deprecated key was ignored."""
