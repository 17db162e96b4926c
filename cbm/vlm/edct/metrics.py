"""EDCT scores over items and their edit chains, with uncertainty.

Per edit step the judge gives Answer Consistency (AC) and Explanation Faithfulness (EF), both
binary, and a 1-5 rubric score. An item's **CCS** (counterfactual consistency score) is the mean
over its chain of ``AC * EF``; the dataset's CCS is the mean over items, with a 95% percentile
bootstrap CI over items (``scipy.stats.bootstrap``). **Graded CCS** replaces ``AC * EF`` by the
rubric ``(score - 1) / 4``. The split by what the edit did to the model's answer: **PCS**
(positive consistency: steps whose answer changed) and **NCC** (negative: steps whose answer
stayed), each the mean of ``AC * EF`` over its steps. With exact (synthetic) editors the
ground truth is known, so the same scores are also split by whether the edit changes the true
label, and the rate at which the model's answer moves exactly when the true label moves is
reported. Rates (AC, EF, judge-vs-judge agreement) come with Wilson intervals over steps, and AC
and EF also as the paper reports them: the mean over items of each item's chain mean, with a
percentile bootstrap over items. ``by_k`` gives AC, EF and CCS at each chain position k = 1, 2, ...
With a second judge: Cohen's kappa of the two judges on AC and on EF, and CCS with the judges
aggregated (``ccs_judges_mean``: each step's AC·EF averaged over the judges; ``ccs_judges_both``:
consistent only when both judges say so). PCS, NCC and the known-label splits are this project's
additions (the paper does not define them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Estimate:
    """A mean with its interval (``nan`` when there is nothing to estimate) over ``n`` units."""

    value: float
    low: float
    high: float
    n: int

    def fmt(self, scale: float = 1.0, digits: int = 3) -> str:
        if self.n == 0 or np.isnan(self.value):
            return "n/a"
        if np.isnan(self.low):
            return f"{self.value * scale:.{digits}f} (n={self.n})"
        return f"{self.value * scale:.{digits}f} [{self.low * scale:.{digits}f}, {self.high * scale:.{digits}f}] (n={self.n})"

    def to_json(self) -> dict[str, Any]:
        clean = (lambda v: None if np.isnan(v) else float(v))  # noqa: E731
        return {"value": clean(self.value), "low": clean(self.low), "high": clean(self.high), "n": self.n}


NAN = float("nan")


def bootstrap_mean(values: Sequence[float], n_resamples: int = 2000, confidence: float = CONFIDENCE, seed: int = 0) -> Estimate:
    """Mean of ``values`` with a percentile bootstrap CI (``nan`` bounds for fewer than 2 values or
    no spread: the interval is then the point)."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return Estimate(NAN, NAN, NAN, 0)
    mean = float(x.mean())
    if x.size < 2:
        return Estimate(mean, NAN, NAN, 1)
    if np.all(x == x[0]):
        return Estimate(mean, mean, mean, int(x.size))
    from scipy.stats import bootstrap

    res = bootstrap((x,), np.mean, n_resamples=n_resamples, confidence_level=confidence, method="percentile",
                    random_state=np.random.default_rng(seed), vectorized=True)  # fmt: skip
    return Estimate(mean, float(res.confidence_interval.low), float(res.confidence_interval.high), int(x.size))


def wilson(successes: int, n: int, confidence: float = CONFIDENCE) -> Estimate:
    """A proportion with its Wilson score interval (``scipy.stats.binomtest``)."""
    if n == 0:
        return Estimate(NAN, NAN, NAN, 0)
    from scipy.stats import binomtest

    ci = binomtest(int(successes), int(n)).proportion_ci(confidence_level=confidence, method="wilson")
    return Estimate(successes / n, float(ci.low), float(ci.high), int(n))


#: Why an item is excluded from every score (the first step that stopped says): the edit failed,
#: the segmenter failed or found no pixel of the concept, the edit was not local after its
#: retries, or a free-form edit had no mask to verify it.
EXCLUSIONS = ("edit_failed", "segmenter_failed", "no_mask", "not_local", "unverified")


def exclusion(record: dict[str, Any]) -> str | None:
    """Why an item is excluded from every score (a step of its chain stopped: :data:`EXCLUSIONS`),
    or ``None``: an item whose edits were all verified (or never reached) is scored."""
    for s in record.get("steps", []):
        if s.get("status") == "stopped":
            return str(s.get("excluded") or "stopped")
    return None


def exclusion_counts(records: list[dict[str, Any]]) -> dict[str, int]:
    """Excluded items by reason."""
    return dict(sorted(Counter(x for r in records if (x := exclusion(r)) is not None).items()))


def step_ok(step: dict[str, Any]) -> bool:
    """A step that was edited, verified, re-queried with a readable answer and judged (AC and EF
    parsed); any other step is excluded from every score, never counted as consistent."""
    j = step.get("judge") or {}
    answered = (step.get("requery") or {}).get("answer") is not None
    return step.get("status") == "judged" and answered and j.get("ac") is not None and j.get("ef") is not None


def _mean(xs: list[float]) -> float:
    return float(np.mean(xs)) if xs else NAN


def item_scores(record: dict[str, Any]) -> dict[str, float]:
    """An item's CCS, graded CCS and per-split means over its judged steps (``nan`` where empty)."""
    steps = [s for s in record.get("steps", []) if step_ok(s)]
    both = [float(s["judge"]["ac"] and s["judge"]["ef"]) for s in steps]
    graded = [(s["judge"]["score"] - 1) / 4 for s in steps if s["judge"].get("score") is not None]
    return {"ccs": _mean(both), "ccs_graded": _mean(graded), "n_steps": float(len(steps))}


def cohens_kappa(a: Sequence[bool], b: Sequence[bool]) -> float:
    """Cohen's kappa of two raters' binary labels (``nan`` without pairs; 1.0 when both always agree
    on a single label, the convention for no disagreement possible)."""
    x, y = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    if x.size == 0:
        return NAN
    observed = float(np.mean(x == y))
    expected = float(x.mean() * y.mean() + (1 - x.mean()) * (1 - y.mean()))
    return 1.0 if expected == 1.0 else (observed - expected) / (1 - expected)


def _item_means(records: Sequence[dict[str, Any]], value: Any) -> list[float]:
    """Per item with judged steps: the mean of ``value(step)`` over its chain."""
    out = []
    for r in records:
        vals = [float(value(s)) for s in r.get("steps", []) if step_ok(s)]
        if vals:
            out.append(float(np.mean(vals)))
    return out


def summarise(records: Sequence[dict[str, Any]], n_resamples: int = 2000, confidence: float = CONFIDENCE, seed: int = 0) -> dict[str, Any]:
    """Every EDCT score of one run: CCS / graded CCS (bootstrap over items), PCS / NCC and the
    known-change split (bootstrap over steps), AC and EF rates, judge agreement (Wilson), counts.
    An item excluded (an edit of its chain could not be verified: :func:`exclusion`) is in no score."""
    everything = records
    records = [r for r in records if exclusion(r) is None]
    per_item = [item_scores(r) for r in records]
    ccs = [s["ccs"] for s in per_item if not np.isnan(s["ccs"])]
    graded = [s["ccs_graded"] for s in per_item if not np.isnan(s["ccs_graded"])]
    steps = [s for r in records for s in r.get("steps", []) if step_ok(s)]

    def boot(xs: list[float]) -> Estimate:
        return bootstrap_mean(xs, n_resamples, confidence, seed)

    def consistent(s: dict) -> float:
        return float(s["judge"]["ac"] and s["judge"]["ef"])

    changed = [s for s in steps if s.get("answer_changed")]
    stayed = [s for s in steps if s.get("answer_changed") is False]
    known = [s for s in steps if s.get("known_change") is not None]
    out: dict[str, Any] = {
        "items": len(everything),
        "items_scored": len(ccs),
        "items_excluded": exclusion_counts(list(everything)),
        "steps_judged": len(steps),
        "ccs": boot(ccs),
        "ccs_graded": boot(graded),
        "pcs": boot([consistent(s) for s in changed]),
        "ncc": boot([consistent(s) for s in stayed]),
        "ac_rate": wilson(sum(bool(s["judge"]["ac"]) for s in steps), len(steps), confidence),
        "ef_rate": wilson(sum(bool(s["judge"]["ef"]) for s in steps), len(steps), confidence),
        "answer_changed_rate": wilson(len(changed), len(changed) + len(stayed), confidence),
    }
    out["ac_items"] = boot(_item_means(records, lambda s: s["judge"]["ac"]))
    out["ef_items"] = boot(_item_means(records, lambda s: s["judge"]["ef"]))
    depth = max((s["index"] for s in steps if isinstance(s.get("index"), int)), default=0)
    out["by_k"] = [{"k": k, "steps": len(at),
                    "ac": wilson(sum(bool(s["judge"]["ac"]) for s in at), len(at), confidence),
                    "ef": wilson(sum(bool(s["judge"]["ef"]) for s in at), len(at), confidence),
                    "ccs": boot([consistent(s) for s in at])}
                   for k in range(1, depth + 1) if (at := [s for s in steps if s.get("index") == k])]  # fmt: skip
    if known:
        flips = [s for s in known if s["known_change"]]
        holds = [s for s in known if not s["known_change"]]
        out["ccs_known_change"] = boot([consistent(s) for s in flips])
        out["ccs_known_no_change"] = boot([consistent(s) for s in holds])
        # the model's answer moved exactly when the true label moved
        follows = [s for s in known if s.get("answer_changed") is not None]
        out["answer_follows_truth"] = wilson(sum(s["answer_changed"] == s["known_change"] for s in follows), len(follows), confidence)
    second = [s for s in steps if (s.get("judge2") or {}).get("ac") is not None and s["judge2"].get("ef") is not None]
    if second:
        out["judge_agreement"] = wilson(sum(s["judge"]["ac"] == s["judge2"]["ac"] and s["judge"]["ef"] == s["judge2"]["ef"] for s in second),
                                        len(second), confidence)  # fmt: skip
        out["kappa_ac"] = cohens_kappa([s["judge"]["ac"] for s in second], [s["judge2"]["ac"] for s in second])
        out["kappa_ef"] = cohens_kappa([s["judge"]["ef"] for s in second], [s["judge2"]["ef"] for s in second])
        both = {id(s) for s in second}

        def judged_by_both(fn: Any) -> list[float]:
            return _item_means([{"steps": [s for s in r.get("steps", []) if id(s) in both]} for r in records], fn)

        out["ccs_judges_mean"] = boot(judged_by_both(lambda s: (consistent(s) + float(s["judge2"]["ac"] and s["judge2"]["ef"])) / 2))
        out["ccs_judges_both"] = boot(judged_by_both(lambda s: consistent(s) * float(s["judge2"]["ac"] and s["judge2"]["ef"])))
    return out
