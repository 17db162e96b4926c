"""``responsiveness``: request ``argmax_{|S|<=k} resp(S)`` when that maximum exceeds a threshold
(:mod:`cbm.interventions.responsiveness` computes ``resp`` and searches the subsets)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cbm.config.names import FAST_PATH_MODES, SEARCH_METHODS
from cbm.interventions.policies.base import available_concepts
from cbm.interventions.responsiveness.search import (
    DEFAULT_CHUNK_MB,
    DEFAULT_EXACT_MAX_CANDIDATES,
    DEFAULT_MAX_ASSIGNMENTS,
)

#: ``policy.responsiveness.at_max``: what a budget covering every requestable concept asks for.
AT_MAX = ("best", "all")

if TYPE_CHECKING:
    from torch import Tensor

    from cbm.interventions.context import BuildContext
    from cbm.interventions.responsiveness import SearchResult
    from cbm.models.state import ConceptState


class ResponsivenessPolicy:
    """Request ``argmax_{|S|<=k} resp(S)`` when that maximum exceeds ``threshold``.

    The policy caches the search of the last state it saw, so budgets ``k`` asked about the same
    state reuse one exact evaluation / one greedy chain; :meth:`prepare_batch` lets the engine size that
    evaluation for all of its budgets at once. ``last`` holds the last ``SearchResult``.
    """

    @dataclass
    class Config:
        #: ``T``: an example whose best subset has ``resp <= T`` requests nothing.
        threshold: float = 0.2
        #: independent (the model's probabilities) | empirical (joint of the training concept labels)
        prior: str = "independent"
        #: auto (exact when the pairs per example fit exact_max_candidates) | exact | greedy
        search: str = "auto"
        exact_max_candidates: int = DEFAULT_EXACT_MAX_CANDIDATES
        #: greedy steps enumerate 2^|S| assignments up to this many, else sample this many
        max_assignments: int = DEFAULT_MAX_ASSIGNMENTS
        #: memory budget of one evaluation chunk (MiB)
        chunk_mb: float = DEFAULT_CHUNK_MB
        #: auto (the model's additive fast path when it has one) | off (always pair_logits)
        fast_path: str = "auto"
        #: request when ``resp >= threshold`` (and ``resp > 0``), concept-benchmark 0.4.1's KFlip rule,
        #: instead of ``resp > threshold``
        inclusive: bool = False
        #: a budget that covers every requestable concept (``k = max``): ``best`` asks for the most
        #: responsive subset; ``all`` asks for every requestable concept of the rows whose ``resp`` of
        #: that whole set passes the threshold (KFlip at k = max: only that subset is evaluated)
        at_max: str = "best"

        def __post_init__(self) -> None:
            if not 0.0 <= self.threshold < 1.0:
                raise ValueError(f"threshold must be in [0, 1), got {self.threshold}")
            if self.prior not in ("independent", "empirical"):
                raise ValueError(f"prior must be 'independent' or 'empirical', got '{self.prior}'")
            if self.search not in SEARCH_METHODS:
                raise ValueError(f"search must be one of {SEARCH_METHODS}, got '{self.search}'")
            if self.fast_path not in FAST_PATH_MODES:
                raise ValueError(f"fast_path must be one of {FAST_PATH_MODES}, got '{self.fast_path}'")
            if self.at_max not in AT_MAX:
                raise ValueError(f"at_max must be one of {AT_MAX}, got '{self.at_max}'")
            if self.exact_max_candidates < 0 or self.max_assignments < 2 or self.chunk_mb <= 0:
                raise ValueError("exact_max_candidates >= 0, max_assignments >= 2 and chunk_mb > 0 are required")

    def __init__(
        self,
        threshold: float = Config.threshold,
        prior: str | Any = Config.prior,
        labels: Tensor | None = None,
        search: str = Config.search,
        exact_max_candidates: int = Config.exact_max_candidates,
        max_assignments: int = Config.max_assignments,
        chunk_mb: float = Config.chunk_mb,
        fast_path: str = Config.fast_path,
        inclusive: bool = Config.inclusive,
        at_max: str = Config.at_max,
        allowed: Tensor | Sequence[int] | None = None,
        seed: int = 0,
    ):
        from cbm.interventions.responsiveness import make_prior

        self.Config(
            threshold, prior if isinstance(prior, str) else "independent", search, exact_max_candidates,
            max_assignments, chunk_mb, fast_path, inclusive, at_max,
        )  # fmt: skip
        self.threshold = float(threshold)
        self.prior = make_prior(prior, labels)
        self.search_mode = search
        self.exact_max_candidates = exact_max_candidates
        self.max_assignments = max_assignments
        self.chunk_mb = chunk_mb
        self.fast_path = fast_path
        self.inclusive = bool(inclusive)
        self.at_max = at_max
        self.allowed = allowed
        self.seed = seed
        self.last: SearchResult | None = None
        self._state: ConceptState | None = None
        self._exact: tuple | None = None
        self._greedy: tuple | None = None

    @classmethod
    def from_config(cls, cfg: Config, ctx: BuildContext) -> ResponsivenessPolicy:
        labels = None
        if cfg.prior == "empirical":
            labels = ctx.labels() if ctx.labels is not None else None
            if labels is None or len(labels) == 0:
                raise ValueError("policy.responsiveness.prior=empirical needs the training concept labels, but the train split is empty")
        return cls(
            cfg.threshold, cfg.prior, labels, cfg.search, cfg.exact_max_candidates, cfg.max_assignments, cfg.chunk_mb,
            cfg.fast_path, cfg.inclusive, cfg.at_max, allowed=ctx.allowed, seed=ctx.seed,
        )  # fmt: skip

    def _method(self, n: int, k: int) -> str:
        from cbm.interventions.responsiveness import search_method

        return search_method(n, k, self.search_mode, self.exact_max_candidates)

    def prepare_batch(self, model, state: ConceptState, ks: Iterable[int]) -> None:
        """Evaluate once for the largest exact and the largest greedy budget among ``ks``."""
        avail = available_concepts(state, self.allowed)
        n = int(avail.any(0).sum())
        biggest: dict[str, int] = {}
        for k in ks:
            kk = min(int(k), n)
            if kk > 0 and not self._whole(kk, n):
                how = self._method(n, kk)
                biggest[how] = max(biggest.get(how, 0), kk)
        for kk in biggest.values():
            self.search(model, state, kk)

    def search(self, model, state: ConceptState, k: int) -> SearchResult:
        """The most responsive subset of at most ``k`` concepts per example (no threshold)."""
        import torch

        from cbm.interventions import responsiveness as R

        with torch.no_grad():
            if state is not self._state:
                self._state, self._exact, self._greedy = state, None, None
            avail = available_concepts(state, self.allowed)
            universe = avail.any(0).nonzero(as_tuple=True)[0].tolist()
            m = state.n_concepts
            kk = min(int(k), len(universe))
            if kk <= 0:
                b = state.batch_size
                empty = torch.zeros(b, m, dtype=torch.bool, device=state.probs.device)
                result = R.SearchResult(empty, state.probs.new_full((b,), float("-inf")), "none")
            elif self._whole(kk, len(universe)):
                resp = R.whole_responsiveness(model, state, universe, self.prior, avail, self.chunk_mb)
                whole = torch.zeros(m, dtype=torch.bool, device=state.probs.device)
                whole[universe] = True
                result = R.SearchResult(whole[None] & (resp > float("-inf"))[:, None], resp, "whole")
            elif self._method(len(universe), kk) == "exact":
                if self._exact is None or self._exact[0] < kk:
                    table = R.subset_table(m, kk, universe, state.probs.device)
                    resp = R.subset_responsiveness(
                        model, state, table, self.prior, avail, fast_path=self.fast_path, chunk_mb=self.chunk_mb
                    )
                    self._exact = (kk, table, resp)
                _, table, resp = self._exact
                result = R.choose_exact(resp, table, kk)
            else:
                if self._greedy is None or self._greedy[0] < kk:
                    order, values = R.greedy_chain(
                        model, state, kk, self.prior, avail,
                        fast_path=self.fast_path, chunk_mb=self.chunk_mb, max_assignments=self.max_assignments,
                        generator=torch.Generator().manual_seed(self.seed),
                    )  # fmt: skip
                    self._greedy = (kk, order, values)
                _, order, values = self._greedy
                result = R.choose_prefix(order, values, kk, m)
        self.last = result
        return result

    def _whole(self, k: int, n_universe: int) -> bool:
        """Whether budget ``k`` (already capped at ``n_universe``) asks for the whole universe at once."""
        return self.at_max == "all" and 0 < k == n_universe

    def select(self, model, state: ConceptState, k: int) -> Tensor:
        return self.search(model, state, k).thresholded(self.threshold, self.inclusive)
