"""Typed schemas of the Hydra configs in ``conf/`` and their validation."""

from cbm.config.validate import ConfigError, to_dataclass

__all__ = ["ConfigError", "to_dataclass"]
