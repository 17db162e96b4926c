"""``oracle``: the concept's true value under its concept set (no annotation noise)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cbm.interventions.interveners.base import Batch, WithoutSettings, true_concepts

if TYPE_CHECKING:
    from torch import Tensor

    from cbm.models.state import ConceptState


class OracleIntervener(WithoutSettings):
    """Ground truth: the concept's true value under its concept set."""

    def __call__(self, batch: Batch, state: ConceptState, mask: Tensor) -> Tensor:
        truth = true_concepts(batch)
        if truth.shape != state.probs.shape:
            raise ValueError(
                f"oracle: the batch's true concepts have shape {tuple(truth.shape)} but the model predicts "
                f"{tuple(state.probs.shape)} (a checkpoint of another concept set?)"
            )
        return truth.to(state.probs)
