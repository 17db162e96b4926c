"""Deprecated alias: ``cbm.experiments.cli`` moved to :mod:`cbm.core.cli` (the ground floor, ``cbm.core``); this
name is the same module for one more release (see CHANGELOG)."""

import sys
import warnings

from cbm.core import cli as _moved

warnings.warn("cbm.experiments.cli moved to cbm.core.cli", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
