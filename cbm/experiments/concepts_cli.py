"""Deprecated alias: ``cbm.experiments.concepts_cli`` (cbm-concepts) moved to :mod:`cbm.vlm.apps.concepts`; this name is
the same module for one more release, and ``python -m cbm.experiments.concepts_cli`` still runs the command."""

import sys
import warnings

from cbm.vlm.apps import concepts as _moved

warnings.warn("cbm.experiments.concepts_cli moved to cbm.vlm.apps.concepts", DeprecationWarning, stacklevel=2)
if __name__ == "__main__":
    _moved.main()
else:
    sys.modules[__name__] = _moved
