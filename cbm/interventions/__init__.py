"""Test-time concept interventions: interveners (values) x policies (which concepts), the registry
that builds them from configs, responsiveness, and the engine that evaluates them over budgets ``k``.

Importing this package does not import torch; names load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "BuildContext": "cbm.interventions.registry",
    "registry": "cbm.interventions.registry",
    "Intervener": "cbm.interventions.interveners.base",
    "true_concepts": "cbm.interventions.interveners.base",
    "OracleIntervener": "cbm.interventions.interveners.oracle",
    "ExpertIntervener": "cbm.interventions.interveners.expert",
    "uniform_hash": "cbm.interventions.interveners.expert",
    "LLMIntervener": "cbm.interventions.interveners.llm",
    "LLMAnswerError": "cbm.interventions.interveners.llm",
    "LLMClient": "cbm.interventions.interveners.llm",
    "parse_answers": "cbm.interventions.interveners.llm",
    "Policy": "cbm.interventions.policies.base",
    "ScorePolicy": "cbm.interventions.policies.base",
    "available_concepts": "cbm.interventions.policies.base",
    "concept_mask": "cbm.interventions.policies.base",
    "topk_mask": "cbm.interventions.policies.base",
    "RandomPolicy": "cbm.interventions.policies.random",
    "UncertaintyPolicy": "cbm.interventions.policies.uncertainty",
    "ResponsivenessPolicy": "cbm.interventions.policies.responsiveness",
    "ResultsGrid": "cbm.interventions.engine",
    "apply_intervention": "cbm.interventions.engine",
    "blackbox_accuracy": "cbm.interventions.engine",
    "model_accuracy": "cbm.interventions.engine",
    "run_grid": "cbm.interventions.engine",
    "intervention_accuracy": "cbm.interventions.evaluate",
    "resolve_ks": "cbm.interventions.evaluate",
}


def __getattr__(name: str) -> Any:
    if name == "registry":
        return importlib.import_module("cbm.interventions.registry")
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'cbm.interventions' has no attribute {name!r}")


__all__ = sorted(_EXPORTS)
