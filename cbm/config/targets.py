"""Deprecated alias: ``cbm.config.targets`` moved to :mod:`cbm.core.targets` (the ground floor, ``cbm.core``); this
name is the same module for one more release (see CHANGELOG)."""

import sys
import warnings

from cbm.core import targets as _moved

warnings.warn("cbm.config.targets moved to cbm.core.targets", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
