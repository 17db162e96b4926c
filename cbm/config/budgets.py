"""Intervention budgets as the CBM commands write them (``ks=[0, 1, 3, max]``)."""

from __future__ import annotations


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
