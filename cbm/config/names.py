"""The choices config values may take, in one torch-free module: the command-line front validates a
whole config with them before anything heavy is imported, and the implementing modules import them
from here (one source of truth; tests check each registry against its tuple)."""

from __future__ import annotations

#: Data splits of every generated dataset.
SPLITS = ("train", "val", "calib", "test")
#: Intervention policies (``cbm.interventions.policies``).
POLICIES = ("random", "uncertainty", "responsiveness")
#: Where the uncertainty policy reads uncertainty from.
UNCERTAINTY_SOURCES = ("auto", "probs", "state")
#: Responsiveness subset search and its linear-head fast path.
SEARCH_METHODS = ("auto", "exact", "greedy")
FAST_PATH_MODES = ("auto", "off")
#: Interveners of ``cbm-intervene`` and of the automation flow (no LLM there).
INTERVENERS = ("oracle", "expert", "llm")
AUTOMATION_INTERVENERS = ("oracle", "expert")
#: Abstention scores and threshold calibration methods (``cbm.selective``).
SCORES = ("probability", "uncertainty")
CALIBRATION_METHODS = ("empirical", "plugin", "sgr", "ltt")
#: The ``device`` option of the evaluation commands.
DEVICES = ("auto", "cpu", "cuda")
