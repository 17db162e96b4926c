"""Black-box baseline: the same encoder, a head straight from features to ``y``."""

from __future__ import annotations

from torch import Tensor

from cbm.models.base import ConceptModel, build_head
from cbm.models.state import ConceptState


class BlackBox(ConceptModel):
    has_concepts = False

    def build(self) -> None:
        self.head = build_head(self.cfg.head, self.backbone.out_dim, self.n_classes)

    def encode(self, x: Tensor) -> ConceptState:
        features = self.backbone(x)
        empty = features.new_zeros(features.shape[0], 0)
        return ConceptState(logits=empty, probs=empty, extras={"features": features})

    def intervene(self, state: ConceptState, mask: Tensor, values: Tensor) -> ConceptState:
        raise ValueError("the black-box model has no concepts to intervene on")

    def predict(self, state: ConceptState) -> Tensor:
        return self.head(state.extras["features"])
