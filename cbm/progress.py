"""Deprecated alias: ``cbm.progress`` moved to :mod:`cbm.core.progress` (the ground floor, ``cbm.core``); this
name is the same module for one more release (see CHANGELOG)."""

import sys
import warnings

from cbm.core import progress as _moved

warnings.warn("cbm.progress moved to cbm.core.progress", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
