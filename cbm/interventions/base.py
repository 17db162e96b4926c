"""The two orthogonal pieces of a test-time intervention.

* An :class:`Intervener` supplies values for the concepts it is asked about.
* A :class:`Policy` chooses which concepts to ask about under a budget ``k``.

:func:`apply_intervention` composes them with the model's own ``intervene``.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
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
        truth = true_concepts(batch)
        if truth.shape != state.probs.shape:
            raise ValueError(
                f"oracle: the batch's true concepts have shape {tuple(truth.shape)} but the model predicts "
                f"{tuple(state.probs.shape)} (a checkpoint of another concept set?)"
            )
        return truth.to(state.probs)


def concept_mask(allowed: Tensor | Sequence[int] | None, m: int, device: torch.device | str | None = None) -> Tensor | None:
    """``[m]`` bool mask of the concepts a policy may request (``None``: all of them).

    ``allowed`` is a bool mask or a sequence of concept indices.
    """
    if allowed is None:
        return None
    t = torch.as_tensor(allowed)
    if t.dtype == torch.bool:
        if t.shape != (m,):
            raise ValueError(f"allowed-concept mask has shape {tuple(t.shape)}, expected ({m},)")
        out = t.clone()
    else:
        idx = t.long().flatten()
        if len(idx) and (idx.min() < 0 or idx.max() >= m):
            raise ValueError(f"allowed concept indices {idx.tolist()} are outside range({m})")
        out = torch.zeros(m, dtype=torch.bool).scatter_(0, idx, True)
    return out if device is None else out.to(device)


def available_concepts(state: ConceptState, allowed: Tensor | Sequence[int] | None = None) -> Tensor:
    """``[B,m]`` bool: concepts a policy may still request (not yet intervened, and ``allowed``)."""
    avail = ~state.intervened
    mask = concept_mask(allowed, state.n_concepts, state.probs.device)
    return avail if mask is None else avail & mask[None]


class RandomPolicy:
    """``k`` concepts uniformly at random per example, from a seeded generator.

    ``allowed`` (bool mask or indices) restricts the concepts that may be requested.
    """

    def __init__(self, seed: int = 0, allowed: Tensor | Sequence[int] | None = None):
        self.seed = seed
        self.allowed = allowed
        self.generator = torch.Generator().manual_seed(seed)

    def fork(self) -> RandomPolicy:
        """An independent copy in the current generator state (the engine uses one per budget ``k``,
        so results do not depend on the order of the budgets and masks are nested in ``k``)."""
        return copy.deepcopy(self)

    def select(self, model: ConceptModel, state: ConceptState, k: int) -> Tensor:
        avail = available_concepts(state, self.allowed)
        scores = torch.rand(state.probs.shape, generator=self.generator).to(state.probs.device)
        scores = scores.masked_fill(~avail, -1.0)
        return topk_mask(scores, k) & avail


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
