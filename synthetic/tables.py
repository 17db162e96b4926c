"""Deprecated alias: ``synthetic.tables`` moved to :mod:`cbm.core.tables` (the ground floor, ``cbm.core``); this
name is the same module for one more release (see CHANGELOG)."""

import sys
import warnings

from cbm.core import tables as _moved

warnings.warn("synthetic.tables moved to cbm.core.tables", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
