"""Deprecated alias: ``synthetic.atomic`` moved to :mod:`cbm.core.atomic` (the ground floor, ``cbm.core``); this
name is the same module for one more release (see CHANGELOG)."""

import sys
import warnings

from cbm.core import atomic as _moved

warnings.warn("synthetic.atomic moved to cbm.core.atomic", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
