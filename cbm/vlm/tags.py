"""Deprecated alias: ``cbm.vlm.tags`` moved to :mod:`cbm.core.tags` (the one reply parser both wings
use); this name is the same module for one more release (see CHANGELOG)."""

import sys
import warnings

from cbm.core import tags as _moved

warnings.warn("cbm.vlm.tags moved to cbm.core.tags", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
