"""Statistics of the ICL study, on scipy / statsmodels.

* accuracy with its standard error ``sqrt(p (1 - p) / n)``;
* exact McNemar between two conditions on the same episodes (binomial test on the discordant
  pairs, two-sided), Cochran's Q across all conditions;
* Wilcoxon signed-rank between two conditions and Friedman across conditions on a judge metric
  (paired by episode);
* Spearman between each judge metric and correctness, the p-values corrected over the tests of
  one family (the paper: every metric x condition, 9 x 4 = 36 tests; Holm by default, or
  Bonferroni as the paper: ``statsmodels.stats.multitest``);
* mean and standard error of scores (``sd / sqrt(n)``, ``ddof=1``) for the judge tables;
* judge vs human: Tolerance-Weighted Agreement (1 for the same score, 0.75 one point apart,
  0 otherwise), Spearman and mean absolute error.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

CORRECTIONS = ("holm", "bonferroni")
#: Fewest paired scores a Spearman test is run on.
MIN_SPEARMAN_N = 3


def accuracy(correct: Sequence[bool]) -> dict[str, float]:
    """``{"n", "acc", "se"}``; ``acc`` and ``se`` are NaN with no trials."""
    x = np.asarray(correct, dtype=float)
    n = len(x)
    if n == 0:
        return {"n": 0, "acc": math.nan, "se": math.nan}
    p = float(x.mean())
    return {"n": n, "acc": p, "se": math.sqrt(p * (1 - p) / n)}


def mean_se(values: Sequence[float]) -> dict[str, float]:
    """``{"n", "mean", "se"}`` with ``se = sd / sqrt(n)`` (sample sd, ddof 1); NaN where undefined."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    mean = float(x.mean()) if n else math.nan
    se = float(x.std(ddof=1) / math.sqrt(n)) if n >= 2 else math.nan
    return {"n": n, "mean": mean, "se": se}


def mcnemar_exact(a: Sequence[bool], b: Sequence[bool]) -> dict[str, float]:
    """Exact McNemar test of paired outcomes ``a`` vs ``b``: ``b01`` (a right, b wrong), ``b10``
    and the two-sided binomial p-value on the discordant pairs (1.0 when there are none)."""
    from scipy.stats import binomtest

    a, b = np.asarray(a, bool), np.asarray(b, bool)
    if a.shape != b.shape:
        raise ValueError("mcnemar_exact: a and b must pair the same trials")
    n01, n10 = int((a & ~b).sum()), int((~a & b).sum())
    p = 1.0 if n01 + n10 == 0 else float(binomtest(n01, n01 + n10, 0.5).pvalue)
    return {"a_only": n01, "b_only": n10, "p": p}


def cochrans_q(table: np.ndarray) -> dict[str, float]:
    """Cochran's Q over ``table [trials, conditions]`` of 0/1 outcomes (statsmodels)."""
    from statsmodels.stats.contingency_tables import cochrans_q as q

    t = np.asarray(table, dtype=float)
    if t.ndim != 2 or t.shape[1] < 2 or t.shape[0] < 1:
        raise ValueError("cochrans_q: need [trials, >= 2 conditions]")
    if np.all(t == t[:, :1]):  # every trial the same across conditions: no evidence of a difference
        return {"q": 0.0, "df": t.shape[1] - 1, "p": 1.0}
    res = q(t)
    return {"q": float(res.statistic), "df": int(res.df), "p": float(res.pvalue)}


#: Up to this many pairs, a Wilcoxon test with tied or zero differences enumerates every sign
#: assignment (scipy's own threshold for its exact permutation test: 2^13 < its 9,999 resamples).
WILCOXON_ENUMERATE_MAX = 13


def wilcoxon(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    """Wilcoxon signed-rank test of paired scores (zero differences dropped; p = 1 when all are zero).

    scipy's p-value, computed faster where scipy is slow: with ties or zeros among at most
    :data:`WILCOXON_ENUMERATE_MAX` pairs scipy runs a permutation test over every sign assignment
    with a Python call per assignment (~4 s a test); here the same null distribution is one
    matrix product (ms)."""
    from scipy.stats import rankdata
    from scipy.stats import wilcoxon as w

    x, y = np.asarray(a, float), np.asarray(b, float)
    d = x - y
    nz = d[d != 0]
    if not len(nz):
        return {"n": int(len(d)), "stat": 0.0, "p": 1.0}
    ranks = rankdata(np.abs(nz))
    ties = len(np.unique(ranks)) < len(ranks) or len(nz) < len(d)
    if not ties or len(d) > WILCOXON_ENUMERATE_MAX:
        res = w(x, y, zero_method="wilcox")
        return {"n": int(len(nz)), "stat": float(res.statistic), "p": float(res.pvalue)}
    r_plus = float(ranks[nz > 0].sum())
    signs = (np.arange(2 ** len(nz))[:, None] >> np.arange(len(nz))) & 1  # every sign assignment
    null = signs @ ranks  # R+ under each
    tol = abs(r_plus) * 1e-14  # scipy's relative tolerance for ties of the statistic
    p = min(1.0, 2 * min(np.mean(null >= r_plus - tol), np.mean(null <= r_plus + tol)))
    return {"n": int(len(nz)), "stat": float(min(r_plus, ranks.sum() - r_plus)), "p": float(p)}


def friedman(table: np.ndarray) -> dict[str, float]:
    """Friedman test over ``table [trials, conditions]`` of scores (>= 3 conditions)."""
    from scipy.stats import friedmanchisquare

    t = np.asarray(table, float)
    if t.ndim != 2 or t.shape[1] < 3:
        raise ValueError("friedman: need [trials, >= 3 conditions]")
    if np.all(t == t[:, :1]):
        return {"stat": 0.0, "p": 1.0}
    res = friedmanchisquare(*t.T)
    return {"stat": float(res.statistic), "p": float(res.pvalue)}


def correct_pvalues(p: Sequence[float], method: str = "holm") -> np.ndarray:
    """Family-wise corrected p-values (``holm`` or ``bonferroni``; NaN stays NaN)."""
    from statsmodels.stats.multitest import multipletests

    if method not in CORRECTIONS:
        raise ValueError(f"correction must be one of {CORRECTIONS}, got '{method}'")
    p = np.asarray(p, float)
    out = np.full_like(p, np.nan)
    ok = ~np.isnan(p)
    if ok.any():
        out[ok] = multipletests(p[ok], method=method)[1]
    return out


def spearman_rows(scores: dict[str, Sequence[float]], correct: Sequence[bool]) -> list[dict[str, Any]]:
    """Spearman rho (and raw p) between each metric and correctness, with the n of each test; a
    constant metric or outcome (or fewer than 3 scores) gives NaN: no test."""
    from scipy.stats import spearmanr

    y = np.asarray(correct, float)
    rows = []
    for name, s in scores.items():
        s = np.asarray(s, float)
        ok = ~np.isnan(s)
        if ok.sum() < MIN_SPEARMAN_N or np.ptp(s[ok]) == 0 or np.ptp(y[ok]) == 0:
            rows.append({"metric": name, "n": int(ok.sum()), "rho": math.nan, "p": math.nan})
            continue
        res = spearmanr(s[ok], y[ok])
        rows.append({"metric": name, "n": int(ok.sum()), "rho": float(res.statistic), "p": float(res.pvalue)})
    return rows


def correct_rows(rows: list[dict[str, Any]], method: str) -> int:
    """Adds ``p_adj`` (corrected over every row with a p-value: one family) and ``correction`` to
    ``rows``; returns the family's size."""
    adj = correct_pvalues([r["p"] for r in rows], method)
    for r, a in zip(rows, adj):
        r["p_adj"] = float(a)
        r["correction"] = method
    return int(sum(not math.isnan(r["p"]) for r in rows))


def spearman_with_correctness(scores: dict[str, Sequence[float]], correct: Sequence[bool], method: str = "holm") -> list[dict[str, Any]]:
    """:func:`spearman_rows`, the p-values corrected over the metrics tested together."""
    rows = spearman_rows(scores, correct)
    correct_rows(rows, method)
    return rows


def tolerance_weighted_agreement(judge: Sequence[float], human: Sequence[float]) -> float:
    """Mean credit: 1 for equal scores, 0.75 one point apart, 0 otherwise."""
    d = np.abs(np.asarray(judge, float) - np.asarray(human, float))
    if len(d) == 0:
        return math.nan
    return float(np.where(d == 0, 1.0, np.where(d == 1, 0.75, 0.0)).mean())


def judge_vs_human(judge: Sequence[float], human: Sequence[float]) -> dict[str, float]:
    """TWA, Spearman rho (NaN when either side is constant) and MAE of paired scores."""
    from scipy.stats import spearmanr

    j, h = np.asarray(judge, float), np.asarray(human, float)
    if j.shape != h.shape:
        raise ValueError("judge_vs_human: the scores must be paired")
    rho = float(spearmanr(j, h).statistic) if len(j) >= 3 and np.ptp(j) > 0 and np.ptp(h) > 0 else math.nan
    return {"n": int(len(j)), "twa": tolerance_weighted_agreement(j, h), "spearman": rho,
            "mae": float(np.abs(j - h).mean()) if len(j) else math.nan}  # fmt: skip
