"""``self``: the model's own thresholded concept predictions as the intervened values.

A diagnostic baseline, not a human: "intervening" with what the model already believes measures how
much of an intervention's effect comes from hardening the concepts (``1[p > 0.5]`` replacing ``p``)
rather than from new information. On a hard CBM (the head reads ``1[p > 0.5]``) it changes no
prediction at any budget; the gap between ``self`` and ``oracle`` is what the true values add.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cbm.interventions.interveners.base import THRESHOLD, Batch, WithoutSettings

if TYPE_CHECKING:
    from torch import Tensor

    from cbm.models.state import ConceptState


class SelfIntervener(WithoutSettings):
    """The model's own answers: ``1[probs > 0.5]`` for every requested concept.

    >>> import torch
    >>> from cbm.models.state import ConceptState
    >>> state = ConceptState(logits=torch.zeros(1, 3), probs=torch.tensor([[0.2, 0.5, 0.9]]))
    >>> SelfIntervener()({}, state, torch.ones(1, 3, dtype=torch.bool)).tolist()
    [[0.0, 0.0, 1.0]]
    """

    def __call__(self, batch: Batch, state: ConceptState, mask: Tensor) -> Tensor:
        return (state.probs > THRESHOLD).to(state.probs.dtype)
