"""Concept structure at test time: implications between concepts as tensors, answers propagated
along them, and the predictions that violate them.

An implication ``A = a => B = v`` (derived from the data's concept definitions, e.g.
:func:`synthetic.robot.hierarchy.derive`) means: a person who answers ``A = a`` has answered
``B = v`` too. With ``propagate``, the engine sets those implied concepts alongside the asked
ones (one answer may set several concepts; its cost is counted once, for the concept asked). A
model's prediction violates the structure where ``1[p_A > 0.5] = a`` and ``1[p_B > 0.5] != v``.

>>> import torch
>>> h = Implications.build(["foot_pointy", "foot_block"], [("foot_block", 1, "foot_pointy", 0)])
>>> mask, values = h.propagate(torch.tensor([[False, True]]), torch.tensor([[0.0, 1.0]]))
>>> mask.tolist(), values.tolist()
([[True, True]], [[0.0, 1.0]])
>>> h.violations(torch.tensor([[0.9, 0.8], [0.1, 0.8]])).tolist()
[1, 0]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from cbm.interventions.interveners.base import THRESHOLD


@dataclass
class Implications:
    """``implied[a, A, B]``: the value ``A = a`` implies for ``B`` (``-1``: none), ``int8 [2, m, m]``."""

    implied: Tensor
    names: tuple[str, ...]

    @classmethod
    def build(cls, names: Sequence[str], pairs: Sequence[tuple[str, int, str, int]]) -> Implications:
        """From ``(A, a, B, v)`` tuples over the concepts ``names`` (pairs naming other concepts, e.g. of
        the full concept set when a model reads a subset, are left out)."""
        index = {n: j for j, n in enumerate(names)}
        implied = torch.full((2, len(names), len(names)), -1, dtype=torch.int8)
        for a, a_val, b, v in pairs:
            if a in index and b in index:
                implied[int(a_val), index[a], index[b]] = int(v)
        return cls(implied, tuple(names))

    def __len__(self) -> int:
        return int((self.implied >= 0).sum())

    def _rule(self, hard: Tensor) -> Tensor:
        """``[B, A, B']`` the value each concept's value (bool ``hard [B,m]``) implies for every other
        (``-1``: none)."""
        imp = self.implied.to(hard.device)
        return torch.where(hard[:, :, None], imp[1][None], imp[0][None])

    def _implied_by(self, hard: Tensor, source: Tensor) -> tuple[Tensor, Tensor]:
        """For rows whose ``source`` concepts take the values ``hard`` (bool ``[B,m]``): ``(implied [B,m]
        bool, value [B,m] float)`` of every target some source implies."""
        rule = self._rule(hard)
        rule = torch.where(source[:, :, None], rule, torch.full_like(rule, -1))
        implied = (rule >= 0).any(1)
        value = (rule == 1).any(1).float()  # consistent answers never imply both values
        return implied, value

    def propagate(self, mask: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """The asked concepts ``mask`` answered ``values`` plus every concept those answers imply
        (one step: implications derived from definitions are transitively closed already)."""
        implied, value = self._implied_by(values > THRESHOLD, mask)
        extra = implied & ~mask
        return mask | extra, torch.where(extra, value.to(values.dtype), values)

    def violations(self, probs: Tensor) -> Tensor:
        """``[B]`` how many implications each row's predicted concepts (``probs > 0.5``) break."""
        hard = probs > THRESHOLD
        rule = self._rule(hard)
        broken = (rule >= 0) & ((rule == 1) != hard[:, None, :])
        return broken.sum((1, 2))
