"""Accuracy after test-time interventions over budgets ``k`` (the ``cbm-train`` results-table columns),
a thin layer over :mod:`cbm.interventions.engine`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from torch import Tensor

from cbm.interventions.engine import run_grid
from cbm.interventions.interveners.base import Intervener
from cbm.interventions.interveners.oracle import OracleIntervener
from cbm.interventions.policies.random import RandomPolicy


def resolve_ks(ks: Sequence[int | str], n_concepts: int | float) -> list[int | float]:
    """Budgets with ``'max'`` replaced by ``n_concepts``, each once: ``max`` and a budget equal to it
    are one budget (the default ``[0, 1, 3, max]`` on a 3-concept set is ``[0, 1, 3]``); a budget above
    ``m``, or one written twice (``check_budgets`` refuses that on the command line), is an error.
    Under costs ``n_concepts`` is the total cost of the requestable concepts (``max`` buys them all)."""
    out: list[int | float] = []
    for k in ks:
        try:
            kk = n_concepts if k == "max" else int(k)
        except (TypeError, ValueError):
            raise ValueError(f"intervention budget k={k!r} must be an integer or 'max'") from None
        if kk < 0 or kk > n_concepts:
            raise ValueError(f"intervention budget k={k} is outside [0, {n_concepts}] (the model has {n_concepts} concepts)")
        if kk in out and kk == n_concepts and "max" in ks:
            continue  # 'max' named the same budget
        if kk in out:
            raise ValueError(f"intervention budget k={kk} is listed twice in {list(ks)}: list each budget once")
        out.append(kk)
    return out


def intervention_accuracy(
    model,
    batches: Iterable[dict[str, Tensor]],
    ks: Sequence[int],
    policy_factory=lambda: RandomPolicy(0),
    intervener: Intervener | None = None,
) -> dict[int, float]:
    """Task accuracy after intervening on ``k`` concepts, for each ``k`` in ``ks``.

    Each ``k`` uses a fresh policy from ``policy_factory`` so results do not depend on
    the order of ``ks``. The model is encoded once per batch.
    """
    grid = run_grid(model, batches, {"i": intervener or OracleIntervener()}, {"p": policy_factory}, ks)
    return {int(k): grid.row("i", "p", int(k))["accuracy"] for k in ks}
