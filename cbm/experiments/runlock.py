"""Deprecated alias: ``cbm.experiments.runlock`` moved to :mod:`cbm.core.runlock` (the ground floor, ``cbm.core``); this
name is the same module for one more release (see CHANGELOG)."""

import sys
import warnings

from cbm.core import runlock as _moved

warnings.warn("cbm.experiments.runlock moved to cbm.core.runlock", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
