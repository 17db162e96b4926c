"""Choosing ``S``: the best subset from an exact responsiveness matrix or the best prefix of a greedy
chain (ties within :data:`TIE_TOL` go to the smaller subset, then the first one), and which search a
budget gets."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from cbm.config.names import SEARCH_METHODS
from cbm.interventions.responsiveness.tables import SubsetTable, n_candidate_pairs

#: Two responsiveness values closer than this are a tie (the smaller subset wins).
TIE_TOL = 1e-6
#: Defaults of the search, which the policy's typed config takes as its own (one source;
#: conf/policy/responsiveness.yaml lists the same values, which a test checks): memory budget of one
#: evaluation chunk (MiB), pairs per example the exact search may evaluate, assignments a greedy step
#: enumerates before sampling.
DEFAULT_CHUNK_MB = 256.0
DEFAULT_EXACT_MAX_CANDIDATES = 100_000
DEFAULT_MAX_ASSIGNMENTS = 256


def first_within(values: Tensor, tol: float = TIE_TOL) -> Tensor:
    """Index of the first entry per row within ``tol`` of the row's maximum."""
    best = values.max(dim=-1, keepdim=True).values
    return (values >= best - tol).to(torch.float32).argmax(dim=-1)


@dataclass
class SearchResult:
    """The most responsive subset per example (before any threshold)."""

    #: ``[B, m]`` bool, the chosen subset (empty when no concept could be requested).
    mask: Tensor
    #: ``[B]`` its responsiveness (``-inf`` when no concept could be requested).
    resp: Tensor
    #: ``"exact"``, ``"greedy"`` or ``"whole"`` (every requestable concept, :mod:`.whole`).
    method: str

    def thresholded(self, threshold: float, inclusive: bool = False) -> Tensor:
        """The mask with rows whose ``resp <= threshold`` emptied (``inclusive``: kept are the rows with
        ``resp >= threshold`` and ``resp > 0``, concept-benchmark 0.4.1's KFlip rule)."""
        keep = (self.resp >= threshold) & (self.resp > 0) if inclusive else self.resp > threshold
        return self.mask & keep[:, None]


def choose_exact(resp: Tensor, table: SubsetTable, k: int) -> SearchResult:
    """``argmax_{|S|<=k}`` over an exact ``[B, Q]`` responsiveness matrix (ties: smaller, then first)."""
    q = table.n_upto(k)
    b = resp.shape[0]
    if q == 0:
        return SearchResult(torch.zeros(b, table.m, dtype=torch.bool, device=resp.device), resp.new_full((b,), float("-inf")), "exact")
    r = resp[:, :q]
    idx = first_within(r)
    best = r.gather(1, idx[:, None])[:, 0]
    mask = table.members[idx] & (best > float("-inf"))[:, None]
    return SearchResult(mask, best, "exact")


def choose_prefix(order: Tensor, values: Tensor, k: int, m: int) -> SearchResult:
    """Best prefix of at most ``k`` concepts of a greedy chain (ties: the shorter prefix)."""
    b = order.shape[0]
    k = min(k, order.shape[1])
    if k == 0:
        return SearchResult(torch.zeros(b, m, dtype=torch.bool, device=order.device), values.new_full((b,), float("-inf")), "greedy")
    vals = values[:, :k]
    t = first_within(vals)
    best = vals.gather(1, t[:, None])[:, 0]
    steps = torch.arange(k, device=order.device)[None]
    keep = (steps <= t[:, None]) & (order[:, :k] >= 0) & (best > float("-inf"))[:, None]
    idx = torch.where(keep, order[:, :k], torch.full_like(order[:, :k], m))
    mask = torch.zeros(b, m + 1, dtype=torch.bool, device=order.device).scatter_(1, idx, True)[:, :m]
    return SearchResult(mask, best, "greedy")


def search_method(n_universe: int, k: int, method: str = "auto", exact_max_candidates: int = DEFAULT_EXACT_MAX_CANDIDATES) -> str:
    """``exact`` or ``greedy`` for a budget ``k`` over ``n_universe`` requestable concepts."""
    if method not in SEARCH_METHODS:
        raise ValueError(f"responsiveness search must be one of {SEARCH_METHODS}, got {method!r}")
    if method != "auto":
        return method
    return "exact" if n_candidate_pairs(n_universe, k) <= exact_max_candidates else "greedy"
