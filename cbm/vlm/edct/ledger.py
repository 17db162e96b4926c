"""The usage ledger: requests, tokens and cost of every run into one output folder, summed across
resumes (``usage_total.json``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: The run's usage over every invocation (a resumed run adds to it), kept beside ``run.json``.
LEDGER = "usage_total.json"
_SUMMED = ("requests", "cache_hits", "retries", "prompt_tokens", "completion_tokens", "cost_usd", "latency_s")


def add_usage(base: dict[str, Any], now: dict[str, Any]) -> dict[str, Any]:
    """Per role: ``base``'s counts plus ``now``'s (failures by kind too); a role in one only is kept."""
    out = {role: dict(u) for role, u in base.items()}
    for role, u in now.items():
        b = out.get(role) or {}
        merged = {**u, **{k: round(float(b.get(k, 0)) + float(u.get(k, 0)), 6) if k in ("cost_usd", "latency_s")
                          else int(b.get(k, 0)) + int(u.get(k, 0)) for k in _SUMMED}}  # fmt: skip
        fails = dict(b.get("failures") or {})
        for kind, n in (u.get("failures") or {}).items():
            fails[kind] = int(fails.get(kind, 0)) + int(n)
        merged["failures"] = fails
        out[role] = merged
    return out


def read_ledger(root: Path, run: str) -> dict[str, Any]:
    """The usage of this run's earlier invocations (empty when there were none, the ledger is of
    another run, or it cannot be read)."""
    from cbm.vlm.sealed import read_json

    try:
        body = read_json(root / LEDGER)
    except (OSError, ValueError):
        return {}
    if not isinstance(body, dict) or body.get("run") != run or not isinstance(body.get("usage"), dict):
        return {}
    return {k: v for k, v in body["usage"].items() if isinstance(v, dict)}
