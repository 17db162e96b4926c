"""Deprecated alias: ``cbm.experiments.finetune_cli`` (cbm-finetune) moved to :mod:`cbm.vlm.apps.finetune`; this name is
the same module for one more release, and ``python -m cbm.experiments.finetune_cli`` still runs the command."""

import sys
import warnings

from cbm.vlm.apps import finetune as _moved

warnings.warn("cbm.experiments.finetune_cli moved to cbm.vlm.apps.finetune", DeprecationWarning, stacklevel=2)
if __name__ == "__main__":
    _moved.main()
else:
    sys.modules[__name__] = _moved
