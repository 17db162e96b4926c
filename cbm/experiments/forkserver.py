"""Deprecated alias: ``cbm.experiments.forkserver`` moved to :mod:`cbm.core.forkserver` (the ground floor, ``cbm.core``); this
name is the same module for one more release (see CHANGELOG)."""

import sys
import warnings

from cbm.core import forkserver as _moved

warnings.warn("cbm.experiments.forkserver moved to cbm.core.forkserver", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
