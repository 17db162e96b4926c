"""Test-time concept interventions: interveners (values) x policies (which concepts), and the
engine that evaluates them over budgets ``k``."""

from cbm.interventions.base import (
    Intervener,
    OracleIntervener,
    Policy,
    RandomPolicy,
    apply_intervention,
    available_concepts,
    concept_mask,
    topk_mask,
    true_concepts,
)
from cbm.interventions.engine import (
    KResult,
    ResultsGrid,
    blackbox_accuracy,
    model_accuracy,
    run_grid,
    run_interventions,
)
from cbm.interventions.evaluate import intervention_accuracy, resolve_ks
from cbm.interventions.interveners import (
    ExpertIntervener,
    LLMAnswerError,
    LLMClient,
    LLMIntervener,
    parse_answers,
)
from cbm.interventions.policies import ResponsivenessPolicy, UncertaintyPolicy, build_policy
from cbm.interventions.responsiveness import (
    EmpiricalPrior,
    IndependentPrior,
    SearchResult,
    most_responsive,
    responsiveness_loop,
    subset_responsiveness,
    subset_table,
)

__all__ = [
    "EmpiricalPrior",
    "ExpertIntervener",
    "IndependentPrior",
    "Intervener",
    "KResult",
    "LLMAnswerError",
    "LLMClient",
    "LLMIntervener",
    "OracleIntervener",
    "Policy",
    "RandomPolicy",
    "ResponsivenessPolicy",
    "ResultsGrid",
    "SearchResult",
    "UncertaintyPolicy",
    "apply_intervention",
    "available_concepts",
    "blackbox_accuracy",
    "build_policy",
    "concept_mask",
    "intervention_accuracy",
    "model_accuracy",
    "most_responsive",
    "parse_answers",
    "resolve_ks",
    "responsiveness_loop",
    "run_grid",
    "run_interventions",
    "subset_responsiveness",
    "subset_table",
    "topk_mask",
    "true_concepts",
]
