"""``uncertainty``: the ``k`` most uncertain available concepts per example."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cbm.config.names import UNCERTAINTY_SOURCES
from cbm.interventions.policies.base import ScorePolicy

if TYPE_CHECKING:
    from torch import Tensor

    from cbm.interventions.context import BuildContext
    from cbm.models.state import ConceptState


class UncertaintyPolicy(ScorePolicy):
    """The ``k`` most uncertain concepts: the architecture's own uncertainty (``state.uncertainty``,
    e.g. ProbCBM's variance) when it has one, else the probabilities closest to 0.5."""

    @dataclass
    class Config:
        #: auto (the architecture's own uncertainty when it has one) | probs (closest to 0.5) | state
        source: str = "auto"

        def __post_init__(self) -> None:
            if self.source not in UNCERTAINTY_SOURCES:
                raise ValueError(f"source must be one of {UNCERTAINTY_SOURCES}, got '{self.source}'")

    def __init__(self, source: str = Config.source, allowed: Tensor | Sequence[int] | None = None):
        self.Config(source)  # validates
        self.source = source
        self.allowed = allowed

    @classmethod
    def from_config(cls, cfg: Config, ctx: BuildContext) -> UncertaintyPolicy:
        return cls(cfg.source, allowed=ctx.allowed)

    def scores(self, model, state: ConceptState) -> Tensor:
        """``[B,m]`` uncertainty, larger = more uncertain."""
        if self.source == "state" or (self.source == "auto" and state.uncertainty is not None):
            if state.uncertainty is None:
                raise ValueError("uncertainty policy: source 'state' but this architecture's state has no uncertainty")
            return state.uncertainty.float()
        return -(state.probs.float() - 0.5).abs()

    def values(self, model, state: ConceptState) -> Tensor:
        """``[B,m]`` >= 0, what an answer is worth, in the order of :meth:`scores`: the architecture's
        uncertainty, or ``0.5 - |p - 0.5|``; under costs the concepts are asked by value per cost."""
        own = self.source == "state" or (self.source == "auto" and state.uncertainty is not None)
        s = self.scores(model, state)
        return s.clamp_min(0) if own else s + 0.5
