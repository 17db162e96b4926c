"""Typed concepts: binary, categorical and continuous columns, as one object an architecture's
concept layer and concept loss read (``DataInfo.concept_groups`` / ``continuous_concepts``).

- **binary** columns: ``sigmoid``, binary cross-entropy (what every model did before);
- a **categorical** concept is a group of value columns (at most one 1 per example): one softmax
  over their logits and an implicit "none of these" logit fixed at 0, so a one-column group is the
  binary sigmoid; cross-entropy against the annotation (a soft or noisy row is normalised, "none"
  taking ``1 - sum``). An intervention reveals the whole group (:func:`expand`);
- **continuous** columns (values in [0, 1]): ``sigmoid``, squared error against the value.

The loss is a mean over concepts (a group counts once) and annotated rows, as the binary BCE's.

>>> import torch
>>> t = ConceptTypes.build(["a", "b", "c"], {"g": ["b", "c"]}, [])
>>> p = t.activate(torch.tensor([[0.0, 0.0, 0.0]]))
>>> [round(v, 4) for v in p[0].tolist()]   # b, c and "none" share the group's mass
[0.5, 0.3333, 0.3333]
>>> expand(torch.tensor([[False, True, False]]), t.unit_of).tolist()
[[False, True, True]]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from cbm.core.validation import ConfigError

#: Floor of a probability whose log a loss takes (``log`` of it is about -100, as
#: ``F.binary_cross_entropy`` clamps).
P_FLOOR = 3.7e-44


@dataclass(frozen=True)
class ConceptTypes:
    """The columns of each categorical group and the continuous columns of ``m`` concepts."""

    groups: tuple[tuple[int, ...], ...]
    continuous: tuple[int, ...]
    m: int

    @classmethod
    def build(cls, names: Sequence[str], groups: Mapping[str, Sequence[str]] | None, continuous: Sequence[str] | None) -> ConceptTypes:
        """From column names (``ConfigError`` naming the problem for an unknown column, a column in
        two groups, or a continuous column in a group)."""
        index = {n: j for j, n in enumerate(names)}
        seen: dict[int, str] = {}
        out = []
        for g, cols in (groups or {}).items():
            if not cols:
                raise ConfigError(f"concept group '{g}' has no columns")
            idx = []
            for n in cols:
                if n not in index:
                    raise ConfigError(f"concept group '{g}': unknown concept column '{n}' (have {list(names)})")
                if index[n] in seen:
                    raise ConfigError(f"concept column '{n}' is in two groups ('{seen[index[n]]}' and '{g}')")
                seen[index[n]] = g
                idx.append(index[n])
            out.append(tuple(idx))
        cont = []
        for n in continuous or []:
            if n not in index:
                raise ConfigError(f"continuous concept: unknown column '{n}' (have {list(names)})")
            if index[n] in seen:
                raise ConfigError(f"concept column '{n}' cannot be both continuous and a value of '{seen[index[n]]}'")
            cont.append(index[n])
        return cls(tuple(out), tuple(cont), len(names))

    @classmethod
    def of(cls, info) -> ConceptTypes:
        """A model's types, from its :class:`~cbm.models.config.DataInfo`."""
        return cls.build(info.concept_names, info.concept_groups, info.continuous_concepts)

    @property
    def typed(self) -> bool:
        """Whether any concept is not binary."""
        return bool(self.groups or self.continuous)

    @property
    def unit_of(self) -> Tensor:
        """``long [m]``: the unit each column belongs to (a group's columns share one; every other
        column is its own), numbered in column order."""
        unit = list(range(self.m))
        for cols in self.groups:
            for j in cols:
                unit[j] = cols[0]
        first = {u: i for i, u in enumerate(dict.fromkeys(unit))}
        return torch.tensor([first[u] for u in unit], dtype=torch.long)

    @property
    def binary(self) -> list[int]:
        """The 0/1 columns (binary concepts and the categorical concepts' values)."""
        cont = set(self.continuous)
        return [j for j in range(self.m) if j not in cont]

    @property
    def n_units(self) -> int:
        """The number of concepts counting each group once."""
        return self.m - sum(len(g) - 1 for g in self.groups)

    def activate(self, logits: Tensor) -> Tensor:
        """Probabilities ``[..., m]`` of logits ``[..., m]``: sigmoid, and per group a softmax with
        the "none" logit 0."""
        probs = torch.sigmoid(logits)
        for cols in self.groups:
            idx = list(cols)
            z = logits[..., idx]
            full = torch.cat([z, torch.zeros_like(z[..., :1])], dim=-1)
            probs = probs.index_copy(-1, torch.tensor(idx, device=logits.device), torch.softmax(full, dim=-1)[..., :-1])
        return probs

    def _weights(self, observed: Tensor | None, like: Tensor) -> Tensor:
        """``[B, m]`` weight of each entry in the loss's mean: a group counts once, at its first
        column, where every one of its columns is annotated."""
        w = torch.ones_like(like) if observed is None else observed.to(like)
        for cols in self.groups:
            w[:, cols[0]] = w[:, list(cols)].prod(1)
            w[:, list(cols[1:])] = 0
        return w

    @staticmethod
    def _target(c: Tensor) -> Tensor:
        """``[B, n+1]`` a group's target distribution over its values and "none"."""
        c = c.clamp(0, 1)
        total = c.sum(1, keepdim=True)
        return torch.cat([c, (1 - total).clamp_min(0)], dim=1) / total.clamp_min(1)

    def loss(self, logits: Tensor, c: Tensor, observed: Tensor | None = None) -> Tensor:
        """Mean concept loss from logits ``[B, m]`` and annotations ``c [B, m]`` (module doc)."""
        c = c.to(logits.dtype)
        entry = F.binary_cross_entropy_with_logits(logits, c, reduction="none")
        if self.continuous:
            cont = list(self.continuous)
            entry[:, cont] = (torch.sigmoid(logits[:, cont]) - c[:, cont]).pow(2)
        for cols in self.groups:
            z = logits[:, list(cols)]
            log_p = torch.log_softmax(torch.cat([z, torch.zeros_like(z[:, :1])], dim=1), dim=1)
            entry[:, cols[0]] = -(self._target(c[:, list(cols)]) * log_p).sum(1)
        return _weighted_mean(entry, self._weights(observed, entry))

    def loss_from_probs(self, probs: Tensor, c: Tensor, observed: Tensor | None = None) -> Tensor:
        """:meth:`loss` from probabilities (an architecture whose probabilities are a Monte-Carlo mean)."""
        c = c.to(probs.dtype)
        p = probs.clamp(P_FLOOR, 1 - 1e-7)
        entry = -(c * p.log() + (1 - c) * (1 - p).log())
        if self.continuous:
            cont = list(self.continuous)
            entry[:, cont] = (probs[:, cont] - c[:, cont]).pow(2)
        for cols in self.groups:
            pg = probs[:, list(cols)]
            full = torch.cat([pg, (1 - pg.sum(1, keepdim=True))], dim=1).clamp_min(P_FLOOR)
            entry[:, cols[0]] = -(self._target(c[:, list(cols)]) * full.log()).sum(1)
        return _weighted_mean(entry, self._weights(observed, entry))

    def group_accuracy(self, probs: Tensor, c: Tensor) -> Tensor | None:
        """``[B, groups]`` bool: each group's most probable value (or "none") is the annotated one
        (``None`` without groups)."""
        if not self.groups:
            return None
        hits = []
        for cols in self.groups:
            pg, cg = probs[:, list(cols)], c[:, list(cols)].to(probs)
            full_p = torch.cat([pg, 1 - pg.sum(1, keepdim=True)], dim=1)
            full_c = torch.cat([cg, (1 - cg.sum(1, keepdim=True)).clamp_min(0)], dim=1)
            hits.append(full_p.argmax(1) == full_c.argmax(1))
        return torch.stack(hits, 1)


def _weighted_mean(values: Tensor, weights: Tensor) -> Tensor:
    return (values * weights).sum() / weights.sum().clamp_min(1.0)


def expand(mask: Tensor, unit_of: Tensor) -> Tensor:
    """``[B, m]`` bool: ``mask`` with every column of a unit any of whose columns it holds (asking one
    value of a categorical concept asks the concept)."""
    unit = unit_of.to(mask.device).expand_as(mask)
    hits = torch.zeros(mask.shape[0], int(unit_of.max()) + 1, dtype=torch.long, device=mask.device)
    hits.scatter_add_(1, unit, mask.long())
    return hits.gather(1, unit) > 0
