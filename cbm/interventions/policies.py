"""Policies: which concepts to request under a budget ``k``.

* :class:`RandomPolicy` — ``k`` uniformly random concepts (seeded).
* :class:`UncertaintyPolicy` — the ``k`` most uncertain concepts: the architecture's own
  uncertainty (``state.uncertainty``, e.g. ProbCBM's variance) when it has one, else the
  probabilities closest to 0.5.
* :class:`ResponsivenessPolicy` — the subset ``S`` (``|S| <= k``) whose answers are most
  likely to change the prediction (see :mod:`cbm.interventions.responsiveness`); an
  example requests nothing unless ``max resp > threshold``.

Every policy has ``select(model, state, k) -> bool [B,m]`` with at most ``k`` requested,
not-yet-intervened, allowed concepts per row.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import Tensor

from cbm.config.names import FAST_PATH_MODES, POLICIES, UNCERTAINTY_SOURCES
from cbm.interventions.base import RandomPolicy, available_concepts, topk_mask
from cbm.interventions.responsiveness import (
    DEFAULT_CHUNK_MB,
    DEFAULT_EXACT_MAX_CANDIDATES,
    DEFAULT_MAX_ASSIGNMENTS,
    SearchResult,
    choose_exact,
    choose_prefix,
    greedy_chain,
    make_prior,
    search_method,
    subset_responsiveness,
    subset_table,
)
from cbm.models.state import ConceptState

__all__ = ["POLICIES", "RandomPolicy", "ResponsivenessPolicy", "UncertaintyPolicy", "build_policy"]


class UncertaintyPolicy:
    """The ``k`` most uncertain available concepts per example.

    ``source``: ``state`` uses ``state.uncertainty`` (an error when the architecture has none),
    ``probs`` the closeness of the probability to 0.5, ``auto`` the former when present.
    """

    def __init__(self, source: str = "auto", allowed: Tensor | Sequence[int] | None = None):
        if source not in UNCERTAINTY_SOURCES:
            raise ValueError(f"uncertainty.source must be one of {UNCERTAINTY_SOURCES}, got {source!r}")
        self.source = source
        self.allowed = allowed

    def scores(self, state: ConceptState) -> Tensor:
        """``[B,m]`` uncertainty, larger = more uncertain."""
        if self.source == "state" or (self.source == "auto" and state.uncertainty is not None):
            if state.uncertainty is None:
                raise ValueError("uncertainty policy: source 'state' but this architecture's state has no uncertainty")
            return state.uncertainty.float()
        return -(state.probs.float() - 0.5).abs()

    def select(self, model, state: ConceptState, k: int) -> Tensor:
        avail = available_concepts(state, self.allowed)
        scores = self.scores(state).masked_fill(~avail, float("-inf"))
        return topk_mask(scores, k) & avail


class ResponsivenessPolicy:
    """Request ``argmax_{|S|<=k} resp(S)`` when that maximum exceeds ``threshold``.

    Parameters
    ----------
    threshold : ``T``; an example whose best subset has ``resp <= T`` requests nothing.
    prior : ``independent`` (the model's probabilities), ``empirical`` (joint of ``labels``) or a
        prior object from :mod:`cbm.interventions.responsiveness`.
    labels : ``[N,m]`` training concept labels, for the empirical prior.
    search : ``exact`` | ``greedy`` | ``auto`` (exact when the (subset, assignment) pairs per example
        number at most ``exact_max_candidates``).
    max_assignments : greedy steps enumerate ``2^|S|`` assignments up to this many, else sample it.
    chunk_mb : memory budget of one evaluation chunk.
    fast_path : ``auto`` uses the linear-head fast path when the model offers it; ``off`` never.
    allowed : concepts that may be requested (bool mask or indices); default all.
    seed : seeds the samples of greedy steps with too many assignments.

    The policy caches the search of the last state it saw, so budgets ``k`` asked about the
    same state reuse one exact evaluation / one greedy chain; :meth:`prepare` lets the engine
    size that evaluation for all of its budgets at once. ``last`` holds the last
    :class:`~cbm.interventions.responsiveness.SearchResult`.
    """

    def __init__(
        self,
        threshold: float = 0.2,
        prior: str | object = "independent",
        labels: Tensor | None = None,
        search: str = "auto",
        exact_max_candidates: int = DEFAULT_EXACT_MAX_CANDIDATES,
        max_assignments: int = DEFAULT_MAX_ASSIGNMENTS,
        chunk_mb: float = DEFAULT_CHUNK_MB,
        fast_path: str = "auto",
        allowed: Tensor | Sequence[int] | None = None,
        seed: int = 0,
    ):
        search_method(1, 1, search)  # validates the name
        if fast_path not in FAST_PATH_MODES:
            raise ValueError(f"responsiveness.fast_path must be one of {FAST_PATH_MODES}, got {fast_path!r}")
        if exact_max_candidates < 0 or max_assignments < 2 or chunk_mb <= 0:
            raise ValueError("responsiveness: exact_max_candidates >= 0, max_assignments >= 2 and chunk_mb > 0 are required")
        self.threshold = float(threshold)
        self.prior = make_prior(prior, labels)  # type: ignore[arg-type]
        self.search_mode = search
        self.exact_max_candidates = exact_max_candidates
        self.max_assignments = max_assignments
        self.chunk_mb = chunk_mb
        self.fast_path = fast_path
        self.allowed = allowed
        self.seed = seed
        self.last: SearchResult | None = None
        self._state: ConceptState | None = None
        self._exact: tuple | None = None
        self._greedy: tuple | None = None

    def _method(self, n: int, k: int) -> str:
        return search_method(n, k, self.search_mode, self.exact_max_candidates)

    def prepare(self, model, state: ConceptState, ks: Iterable[int]) -> None:
        """Evaluate once for the largest exact and the largest greedy budget among ``ks``."""
        avail = available_concepts(state, self.allowed)
        n = int(avail.any(0).sum())
        biggest: dict[str, int] = {}
        for k in ks:
            kk = min(int(k), n)
            if kk > 0:
                how = self._method(n, kk)
                biggest[how] = max(biggest.get(how, 0), kk)
        for kk in biggest.values():
            self.search(model, state, kk)

    @torch.no_grad()
    def search(self, model, state: ConceptState, k: int) -> SearchResult:
        """The most responsive subset of at most ``k`` concepts per example (no threshold)."""
        if state is not self._state:
            self._state, self._exact, self._greedy = state, None, None
        avail = available_concepts(state, self.allowed)
        universe = avail.any(0).nonzero(as_tuple=True)[0].tolist()
        m = state.n_concepts
        kk = min(int(k), len(universe))
        if kk <= 0:
            b = state.batch_size
            empty = torch.zeros(b, m, dtype=torch.bool, device=state.probs.device)
            result = SearchResult(empty, state.probs.new_full((b,), float("-inf")), "none")
        elif self._method(len(universe), kk) == "exact":
            if self._exact is None or self._exact[0] < kk:
                table = subset_table(m, kk, universe, state.probs.device)
                resp = subset_responsiveness(
                    model, state, table, self.prior, avail, fast_path=self.fast_path, chunk_mb=self.chunk_mb
                )
                self._exact = (kk, table, resp)
            _, table, resp = self._exact
            result = choose_exact(resp, table, kk)
        else:
            if self._greedy is None or self._greedy[0] < kk:
                order, values = greedy_chain(
                    model, state, kk, self.prior, avail,
                    fast_path=self.fast_path, chunk_mb=self.chunk_mb, max_assignments=self.max_assignments,
                    generator=torch.Generator().manual_seed(self.seed),
                )
                self._greedy = (kk, order, values)
            _, order, values = self._greedy
            result = choose_prefix(order, values, kk, m)
        self.last = result
        return result

    def select(self, model, state: ConceptState, k: int) -> Tensor:
        return self.search(model, state, k).thresholded(self.threshold)


def build_policy(
    name: str,
    *,
    seed: int = 0,
    allowed: Tensor | Sequence[int] | None = None,
    uncertainty_source: str = "auto",
    responsiveness: dict | None = None,
    labels: Tensor | None = None,
):
    """A policy by name (``random`` | ``uncertainty`` | ``responsiveness``)."""
    if name == "random":
        return RandomPolicy(seed, allowed=allowed)
    if name == "uncertainty":
        return UncertaintyPolicy(uncertainty_source, allowed=allowed)
    if name == "responsiveness":
        return ResponsivenessPolicy(**(responsiveness or {}), labels=labels, allowed=allowed, seed=seed)
    raise ValueError(f"unknown policy '{name}', expected one of {list(POLICIES)}")
