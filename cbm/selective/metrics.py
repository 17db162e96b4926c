"""Selective-prediction and automation value metrics.

* coverage = fraction of examples the model decides; selective accuracy = accuracy on those.
  When nothing is decided the selective accuracy is **undefined** and reported as ``None``
  (never a silent ``0/0``).
* risk–coverage curve: for every distinct threshold, (coverage, selective risk); AURC is the
  area under it in the usual per-example form ``1/n * sum_k risk(top-k)`` with ties kept
  together; E-AURC subtracts the AURC of a perfect ranking (Geifman et al., 2019).
* NetWorkAutomated (NWA) = ``E[automated] - E[cost(S(x))]`` where ``cost(S) = sum_{j in S} w_j``
  with ``w_j = cost_j / m``: a concept of unit cost is ``1/m`` of a full review (concept-benchmark
  0.4.1's NWA, ``coverage - cost / (examples x m)``). Uniform costs give the seed's
  ``E[f(x) != abstain] - E[|S(x)|/m]``, a full review costing 1.
  Every requested concept is paid for, whether or not the example ends up automated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from cbm.selective.calibration import check_inputs, cut_table


def selective_summary(accepted, correct) -> dict[str, float | int | None]:
    """``n``, ``n_accepted``, ``coverage`` and ``selective_accuracy`` (``None`` if nothing accepted)."""
    a = np.asarray(accepted, dtype=bool).reshape(-1)
    c = np.asarray(correct, dtype=bool).reshape(-1)
    if a.shape != c.shape:
        raise ValueError("accepted and correct must have the same length")
    if a.size == 0:
        raise ValueError("no examples: coverage and selective accuracy are undefined")
    n_acc = int(a.sum())
    return {
        "n": int(a.size),
        "n_accepted": n_acc,
        "coverage": n_acc / a.size,
        "selective_accuracy": float(c[a].mean()) if n_acc else None,
    }


def risk_coverage_curve(scores, correct) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(coverage, risk, tau)`` at every distinct threshold, from the smallest non-zero coverage
    to full coverage (the empty selection, whose risk is undefined, is left out)."""
    s, c = check_inputs(scores, correct)
    if s.size == 0:
        raise ValueError("no examples: the risk-coverage curve is undefined")
    tau, n_acc, n_cor = cut_table(s, c)
    tau, n_acc, n_cor = tau[1:], n_acc[1:], n_cor[1:]
    return n_acc / s.size, 1.0 - n_cor / n_acc, tau


def aurc(scores, correct) -> float:
    """Area under the risk–coverage curve, ``1/n * sum_k risk(top-k)`` (tie groups share their risk)."""
    s, c = check_inputs(scores, correct)
    if s.size == 0:
        raise ValueError("no examples: AURC is undefined")
    _, n_acc, n_cor = cut_table(s, c)
    risk = 1.0 - n_cor[1:] / n_acc[1:]
    return float(np.sum(risk * np.diff(n_acc)) / s.size)


def optimal_aurc(correct) -> float:
    """AURC of a perfect ranking (all correct examples first)."""
    c = np.asarray(correct, dtype=bool).reshape(-1)
    n, n_right = c.size, int(c.sum())
    if n == 0:
        raise ValueError("no examples: AURC is undefined")
    k = np.arange(1, n + 1)
    return float(np.sum(np.maximum(0, k - n_right) / k) / n)


def excess_aurc(scores, correct) -> float:
    """E-AURC = AURC - AURC of a perfect ranking of the same predictions."""
    return aurc(scores, correct) - optimal_aurc(correct)


def reliability_bins(confidence, correct, n_bins: int = 10, low: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The reliability diagram's points: ``(mean confidence, accuracy, count)`` of each non-empty bin.

    ``confidence``: the probability each prediction is right (e.g. the predicted class's
    probability, in ``[low, 1]``; a binary model's is at least 0.5, so ``low=0.5``); ``correct``:
    whether it was. ``n_bins`` equal-width bins on ``[low, 1]``, the last one closed; a calibrated
    model's accuracy equals its mean confidence in every bin.
    """
    s, c = check_inputs(confidence, correct)
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    if not 0.0 <= low < 1.0:
        raise ValueError(f"low must be in [0, 1), got {low}")
    if s.size and (s.min() < low or s.max() > 1.0):
        raise ValueError(f"confidence must lie in [{low}, 1], got [{s.min():.4g}, {s.max():.4g}]")
    edges = np.linspace(low, 1.0, n_bins + 1)
    which = np.clip(np.searchsorted(edges, s, side="right") - 1, 0, n_bins - 1)
    count = np.bincount(which, minlength=n_bins)
    conf_sum = np.bincount(which, weights=s, minlength=n_bins)
    right = np.bincount(which, weights=c.astype(np.float64), minlength=n_bins)
    keep = count > 0
    return conf_sum[keep] / count[keep], right[keep] / count[keep], count[keep]


def expected_calibration_error(confidence, correct, n_bins: int = 10, low: float = 0.0) -> float:
    """ECE: the count-weighted mean of ``|accuracy - mean confidence|`` over :func:`reliability_bins`."""
    conf, acc, count = reliability_bins(confidence, correct, n_bins, low)
    if count.sum() == 0:
        raise ValueError("no examples: the calibration error is undefined")
    return float(np.sum(count * np.abs(acc - conf)) / count.sum())


# ----------------------------------------------------------------------------- costs and NWA
def concept_costs(concept_names: Sequence[str], costs: Mapping[str, float] | None = None) -> Tensor:
    """Per-concept costs ``[m]`` in shares of a full review: ``cost_j / m`` (module doc).

    ``costs=None``: uniform ``1/m``. A mapping is the cost spec of ``cbm-intervene costs.concepts``
    (:func:`cbm.interventions.costs.cost_list`: names or globs, ``rest``, each cost > 0, in units of
    one concept's check; concepts it leaves out cost 1)."""
    from cbm.interventions.costs import cost_list

    names = list(concept_names)
    m = len(names)
    if m == 0:
        return torch.zeros(0, dtype=torch.float64)
    raw = cost_list(names, costs, "costs") if costs is not None else [1.0] * m
    return torch.tensor(raw, dtype=torch.float64) / m


def request_cost(mask: Tensor, costs: Tensor) -> Tensor:
    """Cost ``[B]`` of the requested concepts ``mask [B,m]`` under normalised ``costs [m]``."""
    return mask.to(torch.float64) @ costs.to(mask.device, torch.float64)


def net_work_automated(automated, cost) -> float:
    """``mean(automated) - mean(cost)``: ``automated[i]`` whether example ``i`` was decided by
    the model (before or after its intervention), ``cost[i]`` what its requests cost
    (``|S(x)|/m`` for uniform costs; 0 for examples nobody was asked about)."""
    a = np.asarray(automated, dtype=np.float64).reshape(-1)
    c = np.asarray(cost, dtype=np.float64).reshape(-1)
    if a.shape != c.shape:
        raise ValueError("automated and cost must have the same length")
    if a.size == 0:
        raise ValueError("no examples: NetWorkAutomated is undefined")
    return float(a.mean() - c.mean())
