"""Deprecated alias: ``cbm.experiments.lifeline`` moved to :mod:`cbm.core.lifeline` (the ground floor, ``cbm.core``); this
name is the same module for one more release (see CHANGELOG)."""

import sys
import warnings

from cbm.core import lifeline as _moved

warnings.warn("cbm.experiments.lifeline moved to cbm.core.lifeline", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
