"""Typed schemas of the CBM commands' Hydra configs in ``conf/`` (train, intervene, automate,
experiment); the validation vocabulary they use is :mod:`cbm.core.validation`."""

from cbm.core.validation import ConfigError, to_dataclass

__all__ = ["ConfigError", "to_dataclass"]
