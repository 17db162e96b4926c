"""Counts over an EDCT run's records: items by status, parse errors and re-asks by stage."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

log = logging.getLogger("cbm.vlm")

#: Item statuses a rerun keeps (``done`` = chain finished); ``error`` (the endpoint failed after its
#: retries) is picked up again where it stopped.

def status_counts(records: list[dict[str, Any]]) -> dict[str, int]:
    steps = Counter(s.get("status", "?") for r in records for s in r.get("steps", []))
    return {**{f"item_{k}": v for k, v in Counter(r["status"] for r in records).items()}, **{f"step_{k}": v for k, v in steps.items()}}


def _stages(records: list[dict[str, Any]]):
    """``(stage, its record)`` of every parsed reply of the run."""
    for r in records:
        for stage in ("baseline", "concepts", "chain"):
            if r.get(stage):
                yield stage, r[stage]
                if stage == "baseline" and isinstance(r[stage].get("explain"), dict):
                    yield "baseline_explanation", r[stage]["explain"]
        for s in r.get("steps", []):
            for stage in ("requery", "judge", "judge2"):
                if s.get(stage):
                    yield stage, s[stage]
                    if stage == "requery" and isinstance(s[stage].get("explain"), dict):
                        yield "requery_explanation", s[stage]["explain"]


def parse_error_counts(records: list[dict[str, Any]]) -> dict[str, int]:
    """Parse errors per stage and kind of the replies the run kept (``baseline/missing``: 3 ...)."""
    c: Counter = Counter()
    for stage, rec in _stages(records):
        for e in rec.get("errors", []):
            c[f"{stage}/{e.split(':')[0]}"] += 1
    return dict(sorted(c.items()))


def reask_counts(records: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per stage: replies re-asked, and how many of those the re-ask made readable."""
    out: dict[str, Counter] = {}
    for stage, rec in _stages(records):
        if "reask" in rec:
            c = out.setdefault(stage, Counter())
            c["reasked"] += 1
            c["recovered"] += "first_errors" in rec and not _lost(stage, rec)
    return {k: {"reasked": v["reasked"], "recovered": v["recovered"]} for k, v in sorted(out.items())}


def _lost(stage: str, rec: dict[str, Any]) -> bool:
    """Whether a stage's reply gave nothing usable (the same tests as the re-ask's)."""
    if stage in ("baseline", "requery"):
        return rec.get("answer") is None
    if stage == "concepts":
        return not rec.get("concepts") and bool(rec.get("errors"))
    if stage == "chain":
        return not rec.get("edits")
    if stage.endswith("_explanation"):
        return rec.get("explanation") is None
    return bool(rec.get("errors"))
