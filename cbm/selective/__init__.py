"""Selective prediction for automation: abstain, calibrate the band, rescue with a few concepts.

* :mod:`~cbm.selective.abstention` — confidence scores and the rule *accept iff score > tau*;
* :mod:`~cbm.selective.calibration` — ``tau`` from the calibration split (empirical, SGR, LTT);
* :mod:`~cbm.selective.automation` — the automate / intervene / defer flow per budget ``k``;
* :mod:`~cbm.selective.metrics` — coverage, selective accuracy, AURC, NetWorkAutomated;
* :mod:`~cbm.selective.plots` — the risk–coverage figure.
"""

from cbm.selective.abstention import (
    abstain,
    accept,
    class_uncertainty,
    confidence,
    predictions,
    probability_score,
    uncertainty_threshold,
    uncertainty_to_score,
)
from cbm.selective.automation import (
    AutomationOutcome,
    Scored,
    calibrate_model,
    run_automation,
    score_confirmed,
    score_split,
)
from cbm.selective.calibration import (
    METHODS,
    Calibration,
    CalibrationError,
    accuracy_lower_bound,
    calibrate,
    calibrate_empirical,
    calibrate_ltt,
    calibrate_sgr,
    ltt_grid,
)
from cbm.selective.metrics import (
    aurc,
    concept_costs,
    excess_aurc,
    net_work_automated,
    request_cost,
    risk_coverage_curve,
    selective_summary,
)

__all__ = [
    "METHODS",
    "AutomationOutcome",
    "Calibration",
    "CalibrationError",
    "Scored",
    "abstain",
    "accept",
    "accuracy_lower_bound",
    "aurc",
    "calibrate",
    "calibrate_empirical",
    "calibrate_ltt",
    "calibrate_model",
    "calibrate_sgr",
    "class_uncertainty",
    "concept_costs",
    "confidence",
    "excess_aurc",
    "ltt_grid",
    "net_work_automated",
    "predictions",
    "probability_score",
    "request_cost",
    "risk_coverage_curve",
    "run_automation",
    "score_confirmed",
    "score_split",
    "selective_summary",
    "uncertainty_threshold",
    "uncertainty_to_score",
]
