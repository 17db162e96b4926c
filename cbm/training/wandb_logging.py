"""Deprecated alias: ``cbm.training.wandb_logging`` moved to :mod:`cbm.tracking.lightning` (W&B through
Lightning's loggers, which the VLM wing uses too); this name is the same module for one more release."""

import sys
import warnings

from cbm.tracking import lightning as _moved

warnings.warn("cbm.training.wandb_logging moved to cbm.tracking.lightning", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
