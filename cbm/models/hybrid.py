"""Hybrid (residual) concept bottleneck model: ``x -> (concepts, side) -> y``.

The head reads the concept probabilities and ``side_dim`` unsupervised units computed from the same
features (the "hybrid" CBM of Koh et al. 2020's discussion, the residual of post-hoc CBMs, Yuksekgonul
et al. 2023). The side channel lets the head use what the concepts miss, and with it *leak*: label
information that bypasses the concepts is information an intervention cannot correct. That leakage
is measured by the existing interventions: an oracle setting every concept to its true value moves a
leaky head less (compare ``side_dim=0``, a joint CBM, on the same grid).

An intervention replaces concept probabilities (the CBM meaning); the side units stay as encoded.
With a linear head the logits are additive in the concepts, so the intervention engine's fastest
path applies (``additive_logits``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from cbm.models.base import ConceptModel, build_head
from cbm.models.cbm import make_concept_layer
from cbm.models.config import HybridCBMConfig
from cbm.models.state import ConceptState

SIDE = "side"


class HybridCBM(ConceptModel):
    """Concepts plus an unsupervised side channel, one head over both."""

    config_cls = HybridCBMConfig
    cfg: HybridCBMConfig

    def build(self) -> None:
        self.concept_layer = make_concept_layer(self.backbone, self.n_concepts)
        self.side = nn.Sequential(nn.Linear(self.backbone.out_dim, self.cfg.side_dim), nn.Tanh(), nn.Dropout(self.cfg.side_dropout))
        self.head = build_head(self.cfg.head, self.n_concepts + self.cfg.side_dim, self.n_classes)

    def encode(self, x: Tensor) -> ConceptState:
        features = self.backbone(x)
        logits = self.concept_layer(features)
        return ConceptState(logits=logits, probs=torch.sigmoid(logits), extras={"features": features, SIDE: self.side(features)})

    def predict(self, state: ConceptState) -> Tensor:
        return self.head(torch.cat([state.probs * self.concept_keep, state.extras[SIDE]], dim=1))

    # ------------------------------------------------- intervention-engine hooks (see cbm.models.hooks)
    def intervention_extras(self) -> frozenset[str]:
        return frozenset({SIDE})

    def additive_logits(self, state: ConceptState) -> tuple[Tensor, Tensor] | None:
        """A linear head: setting concept ``i`` to ``v`` moves the logits by ``(v - p_i) W[:, i]``."""
        if not isinstance(self.head, nn.Linear):
            return None
        w = self.head.weight[:, : self.n_concepts] * self.concept_keep  # [C, m]
        p = state.probs
        dv = torch.stack([-p, 1.0 - p], dim=2)  # [B, m, 2]
        return self.predict(state), dv[..., None] * w.T[None, :, None, :]
