"""Deprecated alias: ``cbm.concurrency`` moved to :mod:`cbm.core.concurrency` (the ground floor, ``cbm.core``); this
name is the same module for one more release (see CHANGELOG)."""

import sys
import warnings

from cbm.core import concurrency as _moved

warnings.warn("cbm.concurrency moved to cbm.core.concurrency", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
