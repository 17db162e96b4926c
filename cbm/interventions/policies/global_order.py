"""``global_order``: one concept order for every example, learned on validation data
(:meth:`GlobalOrderPolicy.prepare`): greedily, the concept whose true value, added to those
already chosen, makes the most validation examples right (ties: the higher mean probability of the
true class, then the lower index). ``select`` asks each example for the first ``k`` concepts of
that order it has not been asked yet. The reference's "global concept ordering" example of
``prepare()``; ``m`` batched passes over the validation split, each over every candidate."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cbm.interventions.policies.base import ScorePolicy, concept_mask

if TYPE_CHECKING:
    from torch import Tensor

    from cbm.interventions.context import BuildContext
    from cbm.models.state import ConceptState


class GlobalOrderPolicy(ScorePolicy):
    """The first ``k`` not-yet-asked concepts of an order learned on validation data."""

    @dataclass
    class Config:
        #: validation rows scored per pass (memory): candidates x rows go through intervene + predict
        batch_size: int = 256

        def __post_init__(self) -> None:
            if self.batch_size < 1:
                raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")

    def __init__(self, batch_size: int = 256, allowed: Tensor | Sequence[int] | None = None):
        self.batch_size = batch_size
        self.allowed = allowed
        #: concept indices, most useful first (set by :meth:`prepare`)
        self.order: list[int] | None = None

    @classmethod
    def from_config(cls, cfg: Config, ctx: BuildContext) -> GlobalOrderPolicy:
        return cls(cfg.batch_size, allowed=ctx.allowed)

    def prepare(self, model, batch: dict[str, Any]) -> None:
        """Learn the order on ``batch`` (``x``, ``y`` and the true concepts ``c`` / ``c_clean``)."""
        self.order = greedy_order(model, batch, self.allowed, self.batch_size)

    def scores(self, model, state: ConceptState) -> Tensor:
        import torch

        if self.order is None:
            raise ValueError("global_order policy: call prepare(model, validation_batch) first (the commands do)")
        m = state.n_concepts
        rank = torch.full((m,), -float(m), device=state.probs.device)  # concepts outside the order: last
        rank[torch.as_tensor(self.order, device=rank.device)] = -torch.arange(len(self.order), device=rank.device, dtype=rank.dtype)
        return rank[None].expand(state.batch_size, m)


def greedy_order(model, batch: dict[str, Any], allowed: Tensor | Sequence[int] | None = None, batch_size: int = 256) -> list[int]:
    """Concept indices in greedy order of validation accuracy after an oracle intervention on
    them together with those before (module docstring)."""
    import torch

    from cbm.interventions.interveners.base import true_concepts

    dev = next((p.device for p in model.parameters()), torch.device("cpu"))
    x, y = batch["x"].to(dev), batch["y"].to(dev)
    truth = true_concepts(batch).to(dev)
    if len(y) == 0:
        raise ValueError("global_order policy: the validation split is empty")
    with torch.no_grad():
        state = model.encode(x)
    m = state.n_concepts
    allowed_mask = concept_mask(allowed, m, dev)
    candidates = [i for i in range(m) if allowed_mask is None or bool(allowed_mask[i])]
    chosen = torch.zeros(m, dtype=torch.bool, device=dev)
    order: list[int] = []
    while candidates:
        correct = torch.zeros(len(candidates), device=dev, dtype=torch.float64)
        true_prob = torch.zeros(len(candidates), device=dev, dtype=torch.float64)
        step = max(1, batch_size // len(candidates))
        for r0 in range(0, len(y), step):
            rows = slice(r0, r0 + step)
            n = len(y[rows])
            sub = state.index(rows).repeat_interleave(len(candidates))  # [n * K] rows: example-major
            mask = chosen[None].repeat(len(candidates), 1)
            mask[torch.arange(len(candidates)), torch.as_tensor(candidates, device=dev)] = True
            mask = mask.repeat(n, 1)
            values = truth[rows].to(state.probs.dtype).repeat_interleave(len(candidates), dim=0)
            with torch.no_grad():
                probs = torch.softmax(model.predict(model.intervene(sub, mask, values)).double(), dim=1)
            yy = y[rows].repeat_interleave(len(candidates))
            correct += (probs.argmax(1) == yy).double().view(n, -1).sum(0)
            true_prob += probs.gather(1, yy[:, None])[:, 0].view(n, -1).sum(0)
        best = max(range(len(candidates)), key=lambda j: (float(correct[j]), float(true_prob[j]), -candidates[j]))
        order.append(candidates.pop(best))
        chosen[order[-1]] = True
    return order
