"""Summaries over seeds: mean ± standard error, and paired differences with t confidence intervals.

A seed is the unit of replication: every cell of an experiment is run once per seed, so a claim
"A beats B" is a statement about the distribution over seeds. Differences between two arms run on
the same seed (a model and its black box, two policies on one trained model, a constrained and an
unconstrained model on the same data) are paired: their CI comes from the per-seed differences,
which removes the variance the two arms share (the data draw, the trained encoder).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

#: Two-sided confidence level of every interval in the reports.
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Summary:
    """Mean, standard error (``None`` for one value) and the number of values."""

    mean: float
    se: float | None
    n: int


def summarise(values: Iterable[float | None]) -> Summary | None:
    """Mean ± SE (``stdev / sqrt(n)``) of the non-missing values; ``None`` when there are none."""
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return None
    se = statistics.stdev(vals) / math.sqrt(len(vals)) if len(vals) > 1 else None
    return Summary(statistics.fmean(vals), se, len(vals))


def t_quantile(n: int, confidence: float = CONFIDENCE) -> float:
    """Student-t quantile for a two-sided ``confidence`` interval of a mean of ``n`` values."""
    from scipy.stats import t

    return float(t.ppf(0.5 + confidence / 2, n - 1))


@dataclass(frozen=True)
class Paired:
    """Mean of per-seed differences ``a - b``, its ``confidence`` interval and the seeds used."""

    mean: float
    low: float | None
    high: float | None
    n: int

    @property
    def excludes_zero(self) -> bool:
        """The interval lies on one side of 0 (the difference is resolved at this confidence)."""
        return self.low is not None and self.high is not None and (self.low > 0 or self.high < 0)


def paired(a: Mapping[int, float], b: Mapping[int, float], confidence: float = CONFIDENCE) -> Paired | None:
    """Paired difference over the seeds both arms have (``{seed: value}``); ``None`` if none.

    With one seed there is no interval. With a constant difference the interval is the point.
    """
    seeds = sorted(set(a) & set(b))
    if not seeds:
        return None
    d = [a[s] - b[s] for s in seeds]
    mean = statistics.fmean(d)
    if len(d) < 2:
        return Paired(mean, None, None, 1)
    half = t_quantile(len(d), confidence) * statistics.stdev(d) / math.sqrt(len(d))
    return Paired(mean, mean - half, mean + half, len(d))


def mean_se(values: Iterable[float | None], scale: float = 100.0, signed: bool = False) -> str:
    """``"99.10 ± 0.20"``: mean ± standard error over seeds, scaled (``"99.10"`` for one value,
    ``"n/a"`` for none)."""
    s = summarise(values)
    if s is None:
        return "n/a"
    m = format(scale * s.mean, "+.2f" if signed else ".2f")
    return m if s.se is None else f"{m} ± {scale * s.se:.2f}"


def paired_text(p: Paired | None, scale: float = 100.0) -> str:
    """``"+1.20 [+0.40, +2.00]"`` (mean and CI of the paired difference), ``"n/a"`` without seeds."""
    if p is None:
        return "n/a"
    m = f"{scale * p.mean:+.2f}"
    return m if p.low is None else f"{m} [{scale * p.low:+.2f}, {scale * p.high:+.2f}]"
