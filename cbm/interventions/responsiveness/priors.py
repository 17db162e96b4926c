"""Priors ``p(a | S)`` over a human's answers: :class:`IndependentPrior` (concepts independent, from
the model's probabilities) and :class:`EmpiricalPrior` (the empirical joint of the training labels)."""

from __future__ import annotations

import torch
from torch import Tensor

from cbm.interventions.responsiveness.tables import Level, SubsetTable
from cbm.models.state import ConceptState


class IndependentPrior:
    """``p(a|S) = prod_i p_i^{a_i} (1-p_i)^{1-a_i}`` from the model's concept probabilities."""

    name = "independent"

    def value_probs(self, state: ConceptState) -> Tensor:
        """``[B, m, 2]``: probability of value 0 and of value 1 per concept."""
        p = state.probs.float().clamp(0.0, 1.0)
        return torch.stack([1.0 - p, p], dim=2)

    def sample(self, state: ConceptState, n: int, generator: torch.Generator | None) -> Tensor:
        """``[B, n, m]`` float 0/1 assignments drawn from the prior."""
        p = state.probs.float().clamp(0.0, 1.0)
        u = torch.rand((p.shape[0], n, p.shape[1]), generator=generator).to(p.device)
        return (u < p[:, None, :]).float()


class EmpiricalPrior:
    """``p(a|S)`` = frequency of ``a`` among the training concept labels restricted to ``S``.

    ``labels``: ``[N, m]`` 0/1 concept labels (e.g. the training split's ``c``). The prior
    does not depend on the example.
    """

    name = "empirical"

    def __init__(self, labels: Tensor):
        labels = torch.as_tensor(labels)
        if labels.ndim != 2 or labels.shape[0] == 0:
            raise ValueError(f"empirical prior: labels must be a non-empty [N, m] matrix, got shape {tuple(labels.shape)}")
        self.labels = (labels > 0.5).to(torch.long)
        self._level_cache: dict[tuple, Tensor] = {}

    @property
    def n_concepts(self) -> int:
        return self.labels.shape[1]

    def _labels_on(self, device: torch.device) -> Tensor:
        if self.labels.device != device:
            self.labels = self.labels.to(device)
        return self.labels

    def level_weights(self, table: SubsetTable, level: Level, max_elems: int = 1 << 24) -> Tensor:
        """``[P]`` frequencies of every pair of ``level`` (cached per table and level)."""
        key = (table.m, table.universe, level.size, str(table.device))
        if key not in self._level_cache:
            c = self._labels_on(table.device)
            n, q, a = c.shape[0], level.n_subsets, level.n_assignments
            counts = torch.zeros(level.n_pairs, device=table.device)
            step = max(1, max_elems // max(n, 1))
            for q0 in range(0, q, step):
                sub = level.subsets[q0 : q0 + step]
                codes = torch.zeros(n, len(sub), dtype=torch.long, device=table.device)
                for u in range(level.size):
                    codes |= c[:, sub[:, u]] << u
                flat = (torch.arange(q0, q0 + len(sub), device=table.device) * a)[None] + codes
                counts += torch.bincount(flat.reshape(-1), minlength=level.n_pairs).float()
            self._level_cache[key] = counts / n
        return self._level_cache[key]

    def joint_weights(self, chosen: Tensor, max_elems: int = 1 << 24) -> Tensor:
        """``[B, 2^t, m, 2]``: frequency of (``chosen`` = bits of code, concept ``j`` = v).

        ``chosen``: ``[B, t]`` concept indices, ``m`` for "none" (that bit is then always 0).
        """
        c = self._labels_on(chosen.device)
        n, m = c.shape
        b, t = chosen.shape
        a = 1 << t
        cext = torch.cat([c, torch.zeros(n, 1, dtype=c.dtype, device=c.device)], dim=1)
        onehot = torch.stack([1 - c, c], dim=2).reshape(n, 2 * m).float()  # [N, 2m]
        out = torch.zeros(b, a, 2 * m, device=c.device)
        step = max(1, max_elems // max(n * 2 * m, 1))
        for b0 in range(0, b, step):
            ch = chosen[b0 : b0 + step]
            bc = len(ch)
            codes = torch.zeros(bc, n, dtype=torch.long, device=c.device)
            for u in range(t):
                codes |= cext[:, ch[:, u]].T << u
            flat = (torch.arange(bc, device=c.device)[:, None] * a + codes).reshape(-1)
            part = torch.zeros(bc * a, 2 * m, device=c.device)
            part.index_add_(0, flat, onehot.repeat(bc, 1))
            out[b0 : b0 + bc] = part.view(bc, a, 2 * m)
        return (out / n).view(b, a, m, 2)

    def sample(self, state: ConceptState, n: int, generator: torch.Generator | None) -> Tensor:
        """``[B, n, m]`` training label rows drawn uniformly (exact samples of the empirical joint)."""
        b = state.probs.shape[0]
        rows = torch.randint(self.labels.shape[0], (b, n), generator=generator)
        return self._labels_on(state.probs.device)[rows.to(state.probs.device)].float()


Prior = IndependentPrior | EmpiricalPrior


def make_prior(prior: str | Prior = "independent", labels: Tensor | None = None) -> Prior:
    """A prior from its name (``independent`` | ``empirical``, the latter needs ``labels``)."""
    if isinstance(prior, IndependentPrior | EmpiricalPrior):
        return prior
    if prior == "independent":
        return IndependentPrior()
    if prior == "empirical":
        if labels is None:
            raise ValueError("responsiveness prior 'empirical' needs the training concept labels")
        return EmpiricalPrior(labels)
    raise ValueError(f"responsiveness prior must be 'independent' or 'empirical', got {prior!r}")
