"""Epoch metrics of the concept layer that torchmetrics does not compute the way a reference does.

``MeanConceptF1`` is concept-benchmark 0.4.1's early-stopping score (``experiments/train.py``,
``DefaultConceptTrainer.fit``): for each concept, sklearn's ``f1_score`` of ``1[p > 0.5]`` against the
annotated value over the annotated rows of the split, skipping a concept whose annotations hold one
class only; then the mean over the concepts kept (NaN when none is). Sums of counts are its state,
so under DDP each rank adds its shard and they are reduced once at the end of the epoch.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torchmetrics import Metric


class MeanConceptF1(Metric):
    """Mean over concepts of the per-concept F1 at threshold 0.5 (see the module docstring)."""

    full_state_update = False
    higher_is_better = True

    def __init__(self, n_concepts: int, **kwargs):
        super().__init__(**kwargs)
        for name in ("tp", "fp", "fn", "pos", "neg"):
            self.add_state(name, default=torch.zeros(n_concepts, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, probs: Tensor, target: Tensor, observed: Tensor | None = None) -> None:
        """``probs``, ``target``: ``[B, m]``; ``observed``: ``[B, m]`` 1 where annotated (``None``: all)."""
        pred = probs.detach() > 0.5
        true = target.detach() > 0.5
        seen = torch.ones_like(pred) if observed is None else observed.detach() > 0
        as_count = {"dtype": torch.float64}
        self.tp += (pred & true & seen).sum(0, **as_count)
        self.fp += (pred & ~true & seen).sum(0, **as_count)
        self.fn += (~pred & true & seen).sum(0, **as_count)
        self.pos += (true & seen).sum(0, **as_count)
        self.neg += (~true & seen).sum(0, **as_count)

    def compute(self) -> Tensor:
        kept = (self.pos > 0) & (self.neg > 0)  # both classes annotated (then 2tp + fp + fn >= 1)
        if not bool(kept.any()):
            return torch.tensor(float("nan"))
        f1 = 2 * self.tp / (2 * self.tp + self.fp + self.fn).clamp_min(1.0)
        return f1[kept].mean().float()
