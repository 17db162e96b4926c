"""Deprecated alias: the validation vocabulary moved to :mod:`cbm.core.validation` and
``check_budgets`` to :mod:`cbm.config.budgets`; these names work for one more release (see
CHANGELOG)."""

import warnings

from cbm.config.budgets import check_budgets  # noqa: F401
from cbm.core.validation import ConfigError, as_dict, to_dataclass  # noqa: F401

warnings.warn("cbm.config.validate moved to cbm.core.validation (check_budgets: cbm.config.budgets)", DeprecationWarning, stacklevel=2)
