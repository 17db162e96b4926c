"""Test-time concept interventions: interveners (values) x policies (which concepts)."""

from cbm.interventions.base import (
    Intervener,
    OracleIntervener,
    Policy,
    RandomPolicy,
    apply_intervention,
    topk_mask,
    true_concepts,
)

__all__ = ["Intervener", "OracleIntervener", "Policy", "RandomPolicy", "apply_intervention", "topk_mask", "true_concepts"]
