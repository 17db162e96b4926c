"""Deprecated alias: ``cbm.config.paths`` moved to :mod:`cbm.core.paths` (the ground floor, ``cbm.core``); this
name is the same module for one more release (see CHANGELOG)."""

import sys
import warnings

from cbm.core import paths as _moved

warnings.warn("cbm.config.paths moved to cbm.core.paths", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
