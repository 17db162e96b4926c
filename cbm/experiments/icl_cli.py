"""Deprecated alias: ``cbm.experiments.icl_cli`` (cbm-icl) moved to :mod:`cbm.vlm.apps.icl`; this name is
the same module for one more release, and ``python -m cbm.experiments.icl_cli`` still runs the command."""

import sys
import warnings

from cbm.vlm.apps import icl as _moved

warnings.warn("cbm.experiments.icl_cli moved to cbm.vlm.apps.icl", DeprecationWarning, stacklevel=2)
if __name__ == "__main__":
    _moved.main()
else:
    sys.modules[__name__] = _moved
