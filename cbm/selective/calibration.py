"""Calibrate the abstention threshold ``tau`` to a target selective accuracy.

The threshold is chosen on the held-out **calibration split only**; the rule is the one of
:mod:`cbm.selective.abstention` (accept iff ``score > tau``). Three methods:

``empirical``
    The widest coverage whose *calibration* selective accuracy meets the target. No
    guarantee: the chosen threshold is the one that looked best on a finite sample, so the
    true selective accuracy falls below the target about half the time or more.
``sgr``
    Selection with Guaranteed Risk (Geifman & El-Yaniv, 2017). Binary search over the sorted
    calibration scores for ``ceil(log2 n)`` steps; at each step the selective risk gets a
    one-sided binomial (Clopper–Pearson) upper bound at level ``delta / ceil(log2 n)``
    (a union bound over the thresholds tried). The widest-coverage threshold tried whose
    bound meets the target is returned.
``plugin``
    concept-benchmark 0.4.1's plug-in threshold (``concept_benchmark/evaluation/metrics.py``,
    ``abstention_threshold``): the same widest coverage as ``empirical``, with ``tau`` placed just
    below the last calibration score kept (``min(1e-6, half the gap to the next score dropped)``
    below it, the next score being 0.5 when none is dropped) instead of at the first score dropped,
    so a test score between the two is abstained on, as 0.4 abstains on it.
``ltt``
    Learn then Test (Angelopoulos et al., 2021) with fixed-sequence testing: a grid of
    thresholds fixed in advance (:func:`ltt_grid`) is walked from the most conservative
    (``tau = 1``) downwards; at each threshold the null "selective accuracy < target" is
    tested with the exact binomial p-value ``P(Binom(n_acc, target) >= n_correct)`` at
    level ``delta``, and the walk stops at the first non-rejection. The walk starts at the
    first threshold accepting at least ``min(4 * n_min, n)`` calibration examples, where ``n_min`` is
    the fewest with which zero errors could reject (``target**n_min <= delta``): the tests
    above it have too little power and would end the walk at once. The starting point
    depends only on the unlabelled scores, never on which predictions are correct.

For ``sgr`` and ``ltt``, with probability at least ``1 - delta`` over the calibration
sample, the true selective accuracy of the returned threshold is at least ``bound`` (and so
at least the target). For ``empirical`` the reported ``bound`` is the uncorrected
Clopper–Pearson bound of the single chosen threshold, for information only.

Everything is vectorised: the scores are sorted once and correct counts are cumulative sums.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy.stats import beta, binom

from cbm.config.names import CALIBRATION_METHODS as METHODS


class CalibrationError(ValueError):
    """No usable threshold (empty calibration split, target out of reach ...)."""


class TargetUnreachable(CalibrationError):
    """The calibration data are fine but no threshold reaches the target: a result, not bad input."""


@dataclass(frozen=True)
class Calibration:
    """The chosen threshold and what it achieved on the calibration split.

    Attributes
    ----------
    method : ``empirical``, ``sgr`` or ``ltt``.
    tau : accept iff ``score > tau``.
    target_accuracy, delta : the request (``delta`` is the allowed failure probability).
    n_cal : calibration examples.
    n_accepted : calibration examples accepted at ``tau``.
    coverage_cal, selective_acc_cal : coverage and selective accuracy on the calibration split.
    bound : lower confidence bound on the true selective accuracy at ``tau`` (level ``1 - delta``
        after the method's correction for the thresholds tried; uncorrected for ``empirical``).
    guaranteed : whether ``bound`` carries the finite-sample guarantee.
    n_thresholds : thresholds evaluated (``sgr``: binary-search steps, the union-bound size).
    """

    method: str
    tau: float
    target_accuracy: float
    delta: float
    n_cal: int
    n_accepted: int
    coverage_cal: float
    selective_acc_cal: float
    bound: float
    guaranteed: bool
    n_thresholds: int

    def to_dict(self) -> dict:
        return asdict(self)


# ----------------------------------------------------------------------------- helpers
def check_inputs(scores, correct) -> tuple[np.ndarray, np.ndarray]:
    """``float64`` scores and ``bool`` correctness, validated."""
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    c = np.asarray(correct).reshape(-1)
    if s.shape != c.shape:
        raise ValueError(f"scores ({s.size}) and correct ({c.size}) must have the same length")
    if not np.isfinite(s).all():
        raise ValueError("confidence scores must be finite (found NaN or inf)")
    if c.dtype != np.bool_:
        if not np.isin(c, (0, 1)).all():
            raise ValueError("correct must be boolean (or 0/1)")
        c = c.astype(bool)
    return s, c


def check_request(target_accuracy: float, delta: float, method: str) -> None:
    if method not in METHODS:
        raise ValueError(f"calibration method must be one of {METHODS}, got '{method}'")
    if not 0.0 < target_accuracy <= 1.0:
        raise ValueError(f"target_accuracy must be in (0, 1], got {target_accuracy}")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")


def below(value: float) -> float:
    """A threshold that accepts every score ``>= value``: ``0`` when ``value > 0``, else the
    float just below ``value``."""
    return 0.0 if value > 0 else float(np.nextafter(value, -np.inf))


def cut_table(scores: np.ndarray, correct: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every distinct selection of a threshold rule, most conservative first.

    Returns ``(tau, n_accepted, n_correct)`` of length ``D + 1`` for ``D`` distinct scores:
    entry 0 accepts nothing (``tau = max score``), entry ``j`` accepts the scores
    ``>= v_j`` (the ``j``-th largest distinct value) with ``tau = v_{j+1}`` (or :func:`below`
    the smallest score for the last entry). Ties are never split.
    """
    values, inverse = np.unique(scores, return_inverse=True)  # ascending
    counts = np.bincount(inverse, minlength=values.size)[::-1]
    correct_counts = np.bincount(inverse, weights=correct.astype(np.float64), minlength=values.size)[::-1]
    desc = values[::-1]
    n_acc = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    n_cor = np.concatenate([[0], np.cumsum(correct_counts)]).round().astype(np.int64)
    tau = np.concatenate([desc, [below(desc[-1])]]) if desc.size else np.array([1.0])
    return tau, n_acc, n_cor


def counts_at(scores: np.ndarray, correct: np.ndarray, taus: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(n_accepted, n_correct)`` at each threshold of ``taus`` (accept iff ``score > tau``)."""
    order = np.argsort(scores, kind="stable")
    s_asc = scores[order]
    correct_suffix = np.concatenate([np.cumsum(correct[order][::-1])[::-1], [0]])
    first = np.searchsorted(s_asc, taus, side="right")  # first index with score > tau
    return (scores.size - first).astype(np.int64), correct_suffix[first].astype(np.int64)


def accuracy_lower_bound(n_correct, n_accepted, delta) -> np.ndarray:
    """One-sided Clopper–Pearson lower bound on an accuracy: ``P(Binom(n, L) >= k) = delta``.

    ``0`` where nothing is accepted or nothing is correct.
    """
    k = np.asarray(n_correct, dtype=np.float64)
    n = np.asarray(n_accepted, dtype=np.float64)
    ok = (k > 0) & (n > 0)
    out = np.zeros(np.broadcast(k, n).shape)
    if np.any(ok):
        kk, nn = np.broadcast_to(k, out.shape)[ok], np.broadcast_to(n, out.shape)[ok]
        out[ok] = beta.ppf(delta, kk, nn - kk + 1)
    return out


def binomial_pvalue(n_correct, n_accepted, target_accuracy: float) -> np.ndarray:
    """p-value of the null "selective accuracy < target": ``P(Binom(n, target) >= k)``
    (``1`` when nothing is accepted)."""
    k = np.asarray(n_correct, dtype=np.int64)
    n = np.asarray(n_accepted, dtype=np.int64)
    return np.where(n > 0, binom.sf(k - 1, n, target_accuracy), 1.0)


def min_accepted(target_accuracy: float, delta: float) -> int | None:
    """Fewest accepted examples with which a guaranteed method can reach the target at all
    (zero errors: ``target**n <= delta``); ``None`` when no sample size suffices (target 1)."""
    if target_accuracy >= 1.0:
        return None
    return max(1, math.ceil(math.log(delta) / math.log(target_accuracy) - 1e-12))


def ltt_grid(n_linear: int = 1000) -> np.ndarray:
    """Data-independent LTT thresholds, descending from 1: a linear grid of step
    ``1/n_linear`` plus ``1 - 10**-t`` for ``t`` in 3..8 by 0.25 (confident models put many
    scores just below 1)."""
    tail = 1.0 - 10.0 ** -np.arange(3.0, 8.01, 0.25)
    return np.unique(np.concatenate([np.linspace(0.0, 1.0, n_linear + 1), tail]))[::-1]


# ----------------------------------------------------------------------------- methods
def _no_threshold(method: str, target: float, delta: float, n: int, best: str) -> TargetUnreachable:
    if method == "empirical":
        how = "lower target_accuracy or improve the model"
        conf = ""
    else:
        need = min_accepted(target, delta)
        how = "lower target_accuracy, raise delta or use more calibration data"
        if need is not None:
            how += f" (at least {need} accepted examples are needed even with no errors)"
        conf = f" with confidence {1 - delta:.0%}"
    return TargetUnreachable(
        f"{method} calibration: no threshold reaches selective accuracy {target:.2%}{conf} on the "
        f"{n} calibration examples ({best}); {how}"
    )


def _result(method, tau, target, delta, n, n_acc, n_cor, bound, guaranteed, n_thr) -> Calibration:
    return Calibration(
        method=method,
        tau=float(tau),
        target_accuracy=float(target),
        delta=float(delta),
        n_cal=int(n),
        n_accepted=int(n_acc),
        coverage_cal=float(n_acc / n),
        selective_acc_cal=float(n_cor / n_acc),
        bound=float(bound),
        guaranteed=guaranteed,
        n_thresholds=int(n_thr),
    )


def calibrate_empirical(scores, correct, target_accuracy: float = 0.95, delta: float = 0.1) -> Calibration:
    """Widest calibration coverage whose calibration selective accuracy is ``>= target``."""
    s, c = _prepare(scores, correct, target_accuracy, delta, "empirical")
    tau, n_acc, n_cor = cut_table(s, c)
    acc = np.divide(n_cor, n_acc, out=np.full(n_acc.shape, np.nan), where=n_acc > 0)
    ok = np.flatnonzero((n_acc > 0) & (acc >= target_accuracy))
    if ok.size == 0:
        j = int(np.nanargmax(acc))
        raise _no_threshold(
            "empirical",
            target_accuracy,
            delta,
            s.size,
            f"best calibration selective accuracy {acc[j]:.2%} at coverage {n_acc[j] / s.size:.2%}",
        )
    j = ok[-1]
    bound = accuracy_lower_bound(n_cor[j], n_acc[j], delta)
    return _result(
        "empirical", tau[j], target_accuracy, delta, s.size, n_acc[j], n_cor[j], bound, False, tau.size
    )


#: 0.4's margin between the last kept confidence and its threshold (at most; half the gap if smaller).
PLUGIN_MARGIN = 1e-6


def calibrate_plugin(scores, correct, target_accuracy: float = 0.95, delta: float = 0.1) -> Calibration:
    """concept-benchmark 0.4.1's plug-in threshold: :func:`calibrate_empirical`'s selection, ``tau``
    just below its lowest kept score (see the module docstring)."""
    s, c = _prepare(scores, correct, target_accuracy, delta, "plugin")
    try:
        emp = calibrate_empirical(s, c, target_accuracy, delta)
    except TargetUnreachable as err:
        raise TargetUnreachable(str(err).replace("empirical calibration", "plugin calibration", 1)) from None
    kept = s[s > emp.tau]
    low = float(kept.min())
    dropped = s[s < low]
    nxt = float(dropped.max()) if dropped.size else 0.5
    tau = low - min(PLUGIN_MARGIN, 0.5 * max(low - nxt, 0.0))
    if not tau < low:  # a gap below float resolution: the empirical threshold keeps the same set
        tau = emp.tau
    return Calibration(**{**emp.to_dict(), "method": "plugin", "tau": float(tau)})


def calibrate_sgr(scores, correct, target_accuracy: float = 0.95, delta: float = 0.1) -> Calibration:
    """Selection with Guaranteed Risk: binary search, ``delta`` split over ``ceil(log2 n)`` steps."""
    s, c = _prepare(scores, correct, target_accuracy, delta, "sgr")
    n = s.size
    steps = max(1, math.ceil(math.log2(n)))
    level = delta / steps
    s_asc = np.sort(s, kind="stable")
    # Geifman & El-Yaniv: z indexes the ascending scores (1-based); theta = s_(z); accept s >= theta.
    z_min, z_max = 1, n
    best: tuple[int, int, float] | None = None  # (n_acc, n_cor, theta)
    best_bound = 0.0
    for _ in range(steps):
        z = math.ceil((z_min + z_max) / 2)
        theta = s_asc[z - 1]
        n_acc, n_cor = counts_at(s, c, np.array([below_value(s_asc, theta)]))
        n_acc, n_cor = int(n_acc[0]), int(n_cor[0])
        best_bound = max(best_bound, float(accuracy_lower_bound(n_cor, n_acc, level)))
        if binomial_pvalue(n_cor, n_acc, target_accuracy) <= level:
            if best is None or n_acc > best[0]:
                best = (n_acc, n_cor, theta)
            z_max = z
        else:
            z_min = z
    if best is None:
        raise _no_threshold("sgr", target_accuracy, delta, n, f"best lower bound {best_bound:.2%}")
    n_acc, n_cor, theta = best
    bound = accuracy_lower_bound(n_cor, n_acc, level)
    return _result(
        "sgr", below_value(s_asc, theta), target_accuracy, delta, n, n_acc, n_cor, bound, True, steps
    )


def calibrate_ltt(
    scores,
    correct,
    target_accuracy: float = 0.95,
    delta: float = 0.1,
    grid: np.ndarray | None = None,
    start_accepted: int | None = None,
) -> Calibration:
    """Learn then Test: fixed-sequence binomial tests over a data-independent grid.

    ``grid``: the thresholds (default :func:`ltt_grid`); ``start_accepted``: the walk starts at
    the first threshold accepting at least this many calibration examples (default
    ``4 * min_accepted(target, delta)``, capped at the split size; never below ``min_accepted``).
    """
    s, c = _prepare(scores, correct, target_accuracy, delta, "ltt")
    taus = np.sort(np.asarray(ltt_grid() if grid is None else grid, dtype=np.float64))[::-1]
    n_acc, n_cor = counts_at(s, c, taus)
    pvals = binomial_pvalue(n_cor, n_acc, target_accuracy)
    need = min_accepted(target_accuracy, delta)
    if need is not None:  # capped at n so that a small calibration split is still usable
        start_accepted = max(need, min(4 * need, s.size) if start_accepted is None else int(start_accepted))
    testable = n_acc >= (start_accepted if start_accepted is not None else np.iinfo(np.int64).max)
    start = int(np.argmax(testable)) if testable.any() else taus.size
    fails = np.flatnonzero(pvals[start:] > delta)
    stop = start + (int(fails[0]) if fails.size else taus.size - start)  # first non-rejection
    if stop == start:
        if start == taus.size:
            why = f"no grid threshold accepts the {start_accepted} examples the first test needs"
        else:
            why = (
                f"the first test, at tau={taus[start]:.6g}, fails: {n_cor[start]}/{n_acc[start]} correct, "
                f"p-value {pvals[start]:.3g} > delta"
            )
        raise _no_threshold("ltt", target_accuracy, delta, s.size, why)
    j = stop - 1
    bound = accuracy_lower_bound(n_cor[j], n_acc[j], delta)
    return _result(
        "ltt", taus[j], target_accuracy, delta, s.size, n_acc[j], n_cor[j], bound, True, stop - start
    )


def below_value(s_asc: np.ndarray, theta: float) -> float:
    """``tau`` with ``{score > tau} == {score >= theta}``: the largest score below ``theta``."""
    i = int(np.searchsorted(s_asc, theta, side="left"))
    return float(s_asc[i - 1]) if i > 0 else below(float(theta))


def _prepare(scores, correct, target_accuracy, delta, method) -> tuple[np.ndarray, np.ndarray]:
    check_request(target_accuracy, delta, method)
    s, c = check_inputs(scores, correct)
    if s.size == 0:
        raise CalibrationError(
            "calibration split is empty: cannot calibrate the abstention threshold (need labelled held-out examples)"
        )
    return s, c


def calibrate(
    scores, correct, target_accuracy: float = 0.95, method: str = "ltt", delta: float = 0.1, **kwargs
) -> Calibration:
    """Choose ``tau`` on calibration ``scores`` / ``correct`` (``correct[i]``: prediction ``i`` is right).

    Examples
    --------
    >>> cal = calibrate([0.99, 0.9, 0.8, 0.7], [True, True, False, True], 0.9, method="empirical")
    >>> cal.tau, cal.coverage_cal
    (0.8, 0.5)
    """
    check_request(target_accuracy, delta, method)
    fn = {"empirical": calibrate_empirical, "plugin": calibrate_plugin, "sgr": calibrate_sgr, "ltt": calibrate_ltt}[method]
    return fn(scores, correct, target_accuracy, delta, **kwargs)
