"""What every policy shares: the protocol, the concepts still requestable, and a base that turns
per-concept scores into a mask under the budget (a policy that ranks concepts only defines ``scores``).
Torch is imported lazily (the registry validates configs before torch loads)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from cbm.models.state import ConceptState


@runtime_checkable
class Policy(Protocol):
    """Which concepts to request."""

    def select(self, model, state: ConceptState, k: int) -> Tensor:
        """Bool mask ``[B,m]`` with at most ``k`` requested, not-yet-intervened concepts per row."""
        ...


def concept_mask(allowed: Tensor | Sequence[int] | None, m: int, device: torch.device | str | None = None) -> Tensor | None:
    """``[m]`` bool mask of the concepts a policy may request (``None``: all of them).

    ``allowed`` is a bool mask or a sequence of concept indices.
    """
    import torch

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


def topk_mask(scores: Tensor, k: int) -> Tensor:
    """Bool mask of the ``k`` largest scores per row (all columns when ``k >= m``)."""
    import torch

    m = scores.shape[1]
    out = torch.zeros_like(scores, dtype=torch.bool)
    if k <= 0 or m == 0:
        return out
    return out.scatter_(1, scores.topk(min(k, m), dim=1).indices, True)


class ScorePolicy:
    """A policy that ranks the available concepts: ``select`` asks for the ``k`` best ``scores``."""

    #: Concepts the policy may request (bool mask or indices; ``None``: all).
    allowed: Tensor | Sequence[int] | None = None

    def scores(self, model, state: ConceptState) -> Tensor:
        """``[B,m]`` scores, larger = ask first."""
        raise NotImplementedError

    def select(self, model, state: ConceptState, k: int) -> Tensor:
        avail = available_concepts(state, self.allowed)
        scores = self.scores(model, state).float().masked_fill(~avail, float("-inf"))
        return topk_mask(scores, k) & avail
