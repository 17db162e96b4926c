"""The two orthogonal pieces of a test-time intervention.

* An :class:`Intervener` supplies values for the concepts it is asked about.
* A :class:`Policy` chooses which concepts to ask about under a budget ``k``.

:func:`apply_intervention` composes them with the model's own ``intervene``.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

from cbm.models.base import ConceptModel
from cbm.models.state import ConceptState

Batch = dict[str, Tensor]


def true_concepts(batch: Batch) -> Tensor:
    """Noise-free concept values under the dataset's concept set (``c_clean`` when the
    generator added annotation noise, else the annotated ``c``)."""
    return batch["c_clean"] if "c_clean" in batch else batch["c"]


@runtime_checkable
class Intervener(Protocol):
    """Who supplies concept values."""

    def __call__(self, batch: Batch, state: ConceptState, mask: Tensor) -> Tensor:
        """Values ``[B,m]`` in [0,1] for the requested concepts ``mask`` (others are ignored)."""
        ...


@runtime_checkable
class Policy(Protocol):
    """Which concepts to request."""

    def select(self, model: ConceptModel, state: ConceptState, k: int) -> Tensor:
        """Bool mask ``[B,m]`` with at most ``k`` requested, not-yet-intervened concepts per row."""
        ...


class OracleIntervener:
    """Ground truth: the concept's true value under its concept set."""

    def __call__(self, batch: Batch, state: ConceptState, mask: Tensor) -> Tensor:
        return true_concepts(batch).to(state.probs)


class RandomPolicy:
    """``k`` concepts uniformly at random per example, from a seeded generator."""

    def __init__(self, seed: int = 0):
        self.generator = torch.Generator().manual_seed(seed)

    def select(self, model: ConceptModel, state: ConceptState, k: int) -> Tensor:
        scores = torch.rand(state.probs.shape, generator=self.generator).to(state.probs.device)
        scores = scores.masked_fill(state.intervened, -1.0)
        return topk_mask(scores, k) & ~state.intervened


def topk_mask(scores: Tensor, k: int) -> Tensor:
    """Bool mask of the ``k`` largest scores per row (all columns when ``k >= m``)."""
    m = scores.shape[1]
    if k <= 0 or m == 0:
        return torch.zeros_like(scores, dtype=torch.bool)
    idx = scores.topk(min(k, m), dim=1).indices
    return torch.zeros_like(scores, dtype=torch.bool).scatter_(1, idx, True)


def apply_intervention(
    model: ConceptModel, state: ConceptState, batch: Batch, policy: Policy, intervener: Intervener, k: int
) -> tuple[ConceptState, Tensor]:
    """Ask ``policy`` for up to ``k`` concepts, ``intervener`` for their values, and intervene.

    Returns the new state and the request mask ``[B,m]``.
    """
    mask = policy.select(model, state, k)
    if not mask.any():
        return state, mask
    values = intervener(batch, state, mask)
    return model.intervene(state, mask, values), mask
