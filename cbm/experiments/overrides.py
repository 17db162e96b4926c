"""Deprecated alias: ``cbm.experiments.overrides`` moved to :mod:`cbm.core.overrides` (the ground floor, ``cbm.core``); this
name is the same module for one more release (see CHANGELOG)."""

import sys
import warnings

from cbm.core import overrides as _moved

warnings.warn("cbm.experiments.overrides moved to cbm.core.overrides", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
