"""``coop``: Cooperative Prediction (Chauhan et al. 2023, "Interactive Concept Bottleneck Models"):
rank each concept by how uncertain the model is about it, how much intervening on it is expected
to move the predicted class's probability, and what it costs to ask.

For example ``x`` with predicted class ``ŷ`` (probability ``p(ŷ)``) and concept ``i`` predicted
``ĉ_i = P(c_i = 1)``::

    score_i = w_entropy * H(ĉ_i) / ln 2
            + w_importance * | sum_v P(c_i = v) * p(ŷ | do(c_i = v)) - p(ŷ) |
            - w_cost * cost_i

Both terms lie in [0, 1]. The expectation weighs each value by its predicted probability for every
number of classes; the reference implementation (``mateoespinosa/cem``, ``cem/interventions/coop.py``)
drops the ``P(c_i = v)`` weight for a one-logit binary task, summing both values' probabilities.
Costs are ``policy.coop.costs`` (``{concept: cost}``, 1 for the rest; only differences matter), else
the study's ``costs.concepts`` (:mod:`cbm.interventions.costs`), which also make the budget cost units.
Scores are computed on the current state for every budget (the engine asks for ``k`` at once),
not re-ranked after each answer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cbm.config.budgets import check_costs
from cbm.interventions.costs import cost_list
from cbm.interventions.policies.base import ScorePolicy

if TYPE_CHECKING:
    from torch import Tensor

    from cbm.interventions.context import BuildContext
    from cbm.models.state import ConceptState


class CooPPolicy(ScorePolicy):
    """Entropy + expected change of the predicted class's probability - cost (module docstring)."""

    @dataclass
    class Config:
        entropy_weight: float = 1.0
        importance_weight: float = 1.0
        cost_weight: float = 1.0
        #: ``{concept or glob: cost}`` (each > 0), as ``costs.concepts``; concepts not listed cost
        #: ``rest`` (default 1; ``null``: all equal).
        costs: dict[str, float] | None = None
        #: memory budget of one chunk of the single-concept predictions (MiB)
        chunk_mb: float = 256.0

        def __post_init__(self) -> None:
            if min(self.entropy_weight, self.importance_weight, self.cost_weight) < 0:
                raise ValueError("entropy_weight, importance_weight and cost_weight must be >= 0")
            check_costs(self.costs, "costs")
            if self.chunk_mb <= 0:
                raise ValueError(f"chunk_mb must be > 0, got {self.chunk_mb}")

    def __init__(self, entropy_weight: float = 1.0, importance_weight: float = 1.0, cost_weight: float = 1.0,
                 costs: Sequence[float] | Tensor | None = None, chunk_mb: float = 256.0,
                 allowed: Tensor | Sequence[int] | None = None):  # fmt: skip
        self.entropy_weight, self.importance_weight, self.cost_weight = entropy_weight, importance_weight, cost_weight
        self.costs = costs  # [m] per concept, or None (all equal)
        self.chunk_mb = chunk_mb
        self.allowed = allowed

    @classmethod
    def from_config(cls, cfg: Config, ctx: BuildContext) -> CooPPolicy:
        costs = cost_list(ctx.concept_names, cfg.costs, "policy.coop.costs") if cfg.costs else ctx.costs
        return cls(cfg.entropy_weight, cfg.importance_weight, cfg.cost_weight, costs, cfg.chunk_mb, allowed=ctx.allowed)

    def scores(self, model, state: ConceptState) -> Tensor:
        import torch

        p = state.probs.float().clamp(1e-7, 1 - 1e-7)
        score = torch.zeros_like(p)
        if self.entropy_weight:
            entropy = -(p * p.log() + (1 - p) * (1 - p).log()) / math.log(2)
            score = score + self.entropy_weight * entropy
        if self.importance_weight:
            score = score + self.importance_weight * expected_change(model, state, self.chunk_mb)
        if self.cost_weight and self.costs is not None:
            score = score - self.cost_weight * torch.as_tensor(self.costs, dtype=score.dtype, device=score.device)[None]
        return score


def expected_change(model, state: ConceptState, chunk_mb: float = 256.0) -> Tensor:
    """``[B, m]``: ``| sum_v P(c_i = v) p(ŷ | do(c_i = v)) - p(ŷ) |`` (the predicted class ``ŷ``)."""
    import torch

    from cbm.models.hooks import single_concept_logits

    with torch.no_grad():
        now = torch.softmax(model.predict(state).float(), dim=1)  # [B, C]
        pred_prob, pred = now.max(dim=1)
        moved = torch.softmax(single_concept_logits(model, state, chunk_mb).float(), dim=-1)  # [B, m, 2, C]
        moved = moved.gather(3, pred[:, None, None, None].expand(*moved.shape[:3], 1))[..., 0]  # [B, m, 2]
        p1 = state.probs.float()
        expect = (1 - p1) * moved[..., 0] + p1 * moved[..., 1]
    return (expect - pred_prob[:, None]).abs()


