"""Intervention budgets as the CBM commands write them (``ks=[0, 1, 3, max]``) and the per-concept costs
they may count in (``costs.concepts``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

#: The key of a cost spec that prices every concept no other key names.
REST = "rest"


def check_budgets(ks: list, where: str = "ks", allow_empty: bool = False) -> None:
    """Intervention budgets: distinct integers >= 0 or ``max`` (all concepts); the one rule every
    command uses (a budget that equals ``max`` once the concepts are known: ``resolve_ks``)."""
    if not ks and not allow_empty:
        raise ValueError(f"{where} must list at least one budget (e.g. [0, 1, 3, max])")
    for k in ks:
        if not (k == "max" or (isinstance(k, int) and not isinstance(k, bool) and k >= 0)):
            raise ValueError(f"{where} entries must be integers >= 0 or 'max', got {k!r}")
    twice = next((k for i, k in enumerate(ks) if k in ks[:i]), None)
    if twice is not None:
        raise ValueError(f"{where} lists the budget {twice!r} twice, got {list(ks)} (each budget once)")


def check_costs(spec: Mapping[str, Any] | None, where: str = "costs.concepts") -> dict[str, float] | None:
    """A cost spec as written in a config: ``{concept name or glob: cost}`` plus an optional
    ``rest``; every cost a finite number > 0. Torch-free (the schemas call it)."""
    if spec is None:
        return None
    if not isinstance(spec, Mapping) or not spec:
        raise ValueError(f"{where} must be a mapping {{concept: cost}} (e.g. {{has_knees: 5, rest: 1}}), got {spec!r}")
    out: dict[str, float] = {}
    for key, value in spec.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"{where}: keys are concept names or glob patterns, got {key!r}")
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0
        if not ok:
            raise ValueError(f"{where}.{key} must be a finite number > 0, got {value!r}")
        out[key] = float(value)
    return out
