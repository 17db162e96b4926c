"""Deprecated alias: ``cbm.config.safe_paths`` moved to :mod:`cbm.core.safe_paths` (the ground floor, ``cbm.core``); this
name is the same module for one more release (see CHANGELOG)."""

import sys
import warnings

from cbm.core import safe_paths as _moved

warnings.warn("cbm.config.safe_paths moved to cbm.core.safe_paths", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
