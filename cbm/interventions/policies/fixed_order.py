"""``fixed_order``: every example is asked for the same concepts in the same order, the first ``k``
not asked yet. concept-benchmark 0.4.1's conceptual safeguards on the Sudoku boards
(``experiments/intervention.py``, ``ConceptualSafeguardsStrategy``) reveal the checks in the
concepts' own order, rows then columns then blocks (``row1..row9, col1..col9, box1..box9``): with
no ``order`` given this is that order; ``order`` lists concept names to ask first, the rest follow
in their own order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cbm.interventions.policies.base import ScorePolicy

if TYPE_CHECKING:
    from torch import Tensor

    from cbm.interventions.registry import BuildContext
    from cbm.models.state import ConceptState


class FixedOrderPolicy(ScorePolicy):
    """The first ``k`` not-yet-asked concepts of one order shared by every example."""

    @dataclass
    class Config:
        #: concept names asked first, in this order (the others follow in the model's order); [] = the model's order
        order: list[str] = field(default_factory=list)

        def __post_init__(self) -> None:
            twice = next((n for i, n in enumerate(self.order) if n in self.order[:i]), None)
            if twice is not None:
                raise ValueError(f"order lists the concept {twice!r} twice")

    def __init__(self, order: Sequence[int] = (), allowed: Tensor | Sequence[int] | None = None):
        self.order = [int(i) for i in order]
        self.allowed = allowed

    @classmethod
    def from_config(cls, cfg: Config, ctx: BuildContext) -> FixedOrderPolicy:
        names = list(ctx.concept_names)
        unknown = [n for n in cfg.order if names and n not in names]
        if unknown:
            raise ValueError(f"policy fixed_order: unknown concept {unknown[0]!r} (have {', '.join(names)})")
        return cls([names.index(n) for n in cfg.order], allowed=ctx.allowed)

    def ranks(self, m: int) -> list[int]:
        """Concept indices, asked first to last."""
        first = [i for i in self.order if i < m]
        return first + [i for i in range(m) if i not in first]

    def scores(self, model, state: ConceptState) -> Tensor:
        import torch

        m = state.n_concepts
        rank = torch.empty(m, device=state.probs.device)
        rank[torch.as_tensor(self.ranks(m), device=rank.device)] = -torch.arange(m, device=rank.device, dtype=rank.dtype)
        return rank[None].expand(state.batch_size, m)
