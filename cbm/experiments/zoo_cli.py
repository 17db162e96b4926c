"""Deprecated alias: ``cbm.experiments.zoo_cli`` (cbm-vlm-zoo) moved to :mod:`cbm.vlm.apps.zoo`; this name is
the same module for one more release, and ``python -m cbm.experiments.zoo_cli`` still runs the command."""

import sys
import warnings

from cbm.vlm.apps import zoo as _moved

warnings.warn("cbm.experiments.zoo_cli moved to cbm.vlm.apps.zoo", DeprecationWarning, stacklevel=2)
if __name__ == "__main__":
    _moved.main()
else:
    sys.modules[__name__] = _moved
