"""``random``: ``k`` concepts uniformly at random per example, from a generator seeded by the command."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cbm.interventions.policies.base import ScorePolicy

if TYPE_CHECKING:
    from torch import Tensor

    from cbm.interventions.context import BuildContext
    from cbm.models.state import ConceptState


class RandomPolicy(ScorePolicy):
    """``k`` concepts uniformly at random per example (``allowed`` restricts the candidates)."""

    @dataclass
    class Config:
        pass

    def __init__(self, seed: int = 0, allowed: Tensor | Sequence[int] | None = None):
        import torch

        self.seed = seed
        self.allowed = allowed
        self.generator = torch.Generator().manual_seed(seed)

    @classmethod
    def from_config(cls, cfg: Config, ctx: BuildContext) -> RandomPolicy:
        return cls(ctx.seed, allowed=ctx.allowed)

    def fork(self) -> RandomPolicy:
        """An independent copy in the current generator state (the engine uses one per budget ``k``,
        so results do not depend on the order of the budgets and masks are nested in ``k``)."""
        return copy.deepcopy(self)

    def scores(self, model, state: ConceptState) -> Tensor:
        import torch

        return torch.rand(state.probs.shape, generator=self.generator).to(state.probs.device)
