"""Deprecated alias: ``cbm.experiments.edct_cli`` (cbm-edct) moved to :mod:`cbm.vlm.apps.edct`; this name is
the same module for one more release, and ``python -m cbm.experiments.edct_cli`` still runs the command."""

import sys
import warnings

from cbm.vlm.apps import edct as _moved

warnings.warn("cbm.experiments.edct_cli moved to cbm.vlm.apps.edct", DeprecationWarning, stacklevel=2)
if __name__ == "__main__":
    _moved.main()
else:
    sys.modules[__name__] = _moved
