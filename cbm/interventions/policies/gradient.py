"""``gradient``: the concepts the prediction is most sensitive to, ``|∂ p(ŷ) / ∂ c_i|``: the
gradient of the predicted class's probability with respect to each concept probability, taken
through the model's own ``intervene`` + ``predict`` with every concept set to its predicted value
(for a CBM or CEM the state is then unchanged; ProbCBM and ECBM answer with what their own
intervention makes of those values). On a linear head over the
probabilities it is ``p(ŷ) * |W[ŷ, i] - sum_c p(c) W[c, i]|`` (tests/interventions/test_new_policies.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cbm.interventions.policies.base import ScorePolicy

if TYPE_CHECKING:
    from torch import Tensor

    from cbm.interventions.context import BuildContext
    from cbm.models.state import ConceptState

#: What is differentiated: the predicted class's probability or its logit.
TARGETS = ("prob", "logit")


class GradientPolicy(ScorePolicy):
    """The ``k`` concepts with the largest ``|∂ ŷ / ∂ c_i|`` (module docstring)."""

    @dataclass
    class Config:
        #: prob (the predicted class's probability) | logit (its logit)
        target: str = "prob"

        def __post_init__(self) -> None:
            if self.target not in TARGETS:
                raise ValueError(f"target must be one of {TARGETS}, got '{self.target}'")

    def __init__(self, target: str = "prob", allowed: Tensor | Sequence[int] | None = None):
        self.Config(target)  # validates
        self.target = target
        self.allowed = allowed

    @classmethod
    def from_config(cls, cfg: Config, ctx: BuildContext) -> GradientPolicy:
        return cls(cfg.target, allowed=ctx.allowed)

    def scores(self, model, state: ConceptState) -> Tensor:
        return concept_gradient(model, state, self.target).abs()


def concept_gradient(model, state: ConceptState, target: str = "prob") -> Tensor:
    """``[B, m]``: ``∂ ŷ / ∂ c_i`` per example, ``ŷ`` the predicted class's probability (or logit)."""
    import torch

    with torch.enable_grad():
        values = state.probs.detach().clone().requires_grad_(True)
        everything = torch.ones_like(values, dtype=torch.bool)
        logits = model.predict(model.intervene(state.detach(), everything, values)).float()
        out = torch.softmax(logits, dim=1) if target == "prob" else logits
        picked = out.gather(1, logits.argmax(1, keepdim=True)).sum()
        (grad,) = torch.autograd.grad(picked, values, allow_unused=True)
    if grad is None:
        raise ValueError(f"gradient policy: {type(model).__name__}'s prediction passes no gradient to its concept values")
    return grad.detach()
