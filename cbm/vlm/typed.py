"""Deprecated alias: ``cbm.vlm.typed`` moved to :mod:`cbm.core.validation` (the ground floor, ``cbm.core``); this
name is the same module for one more release (see CHANGELOG)."""

import sys
import warnings

from cbm.core import validation as _moved

warnings.warn("cbm.vlm.typed moved to cbm.core.validation", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
