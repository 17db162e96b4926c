"""Concept Embedding Model (Espinosa Zarlenga et al., NeurIPS 2022).

Per concept ``i`` the encoder features ``h`` give a positive and a negative embedding
``c_i^+ = phi_i^+(h)``, ``c_i^- = phi_i^-(h)`` (LeakyReLU of a linear map, paper Sec. 3);
one scoring layer shared by all concepts gives ``p_i = sigmoid(s([c_i^+, c_i^-]))``; the
head reads the concatenation of the mixed embeddings

    c_hat_i = p_i * c_i^+ + (1 - p_i) * c_i^-        (paper Eq. 1)

An intervention sets ``p_i`` to the given value, so with ``p_i in {0, 1}`` the mixed
embedding *is* the positive / negative one (bit-exact: ``1*a + 0*b == a``).

RandInt (paper Sec. 3.1): during training each concept of each sample is intervened on
with its annotated label with probability ``randint_prob`` -- a mask drawn per sample,
unlike the reference code, which tiles one mask across the batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from cbm.models.base import Batch, ConceptModel, build_head, concept_hint
from cbm.models.config import CEMConfig
from cbm.models.hooks import PairBlock, additive_pair_bytes, additive_pair_logits, first_linear
from cbm.models.state import ConceptState


class CEM(ConceptModel):
    """Concept embeddings mixed by their probability; head over the concatenation."""

    config_cls = CEMConfig
    cfg: CEMConfig
    supports_typed_concepts = True

    def build(self) -> None:
        m, k = self.n_concepts, self.cfg.emb_size
        self.hint = concept_hint(self.backbone, m)
        # One linear map == m independent per-concept generators (their outputs are disjoint blocks).
        self.context = nn.Linear(self.concept_input_dim(), m * 2 * k)
        self.score = nn.Linear(2 * k, 1)  # shared across concepts (reference default)
        self.head = build_head(self.cfg.head, m * k, self.n_classes)

    def encode(self, x: Tensor) -> ConceptState:
        features = self.backbone(x)
        ctx = F.leaky_relu(self.context(self.concept_input(features)))
        ctx = ctx.view(len(features), self.n_concepts, 2 * self.cfg.emb_size)
        logits = self.score(ctx).squeeze(-1)
        c_pos, c_neg = ctx.chunk(2, dim=-1)
        return ConceptState(
            logits=logits,
            probs=self.types.activate(logits),
            extras={"features": features, "c_pos": c_pos, "c_neg": c_neg},
        )

    def mixed_embeddings(self, state: ConceptState) -> Tensor:
        """``[B,m,k]`` mixed embeddings (Eq. 1), alignment-masked by ``concept_keep``."""
        p = state.probs.unsqueeze(-1)
        mixed = p * state.extras["c_pos"] + (1 - p) * state.extras["c_neg"]
        return mixed * self.concept_keep.unsqueeze(-1)

    def predict(self, state: ConceptState) -> Tensor:
        return self.head(self.mixed_embeddings(state).flatten(1))

    # ------------------------------------------------- intervention-engine hooks (see cbm.models.hooks)
    def _plain_cem_contract(self) -> bool:
        return type(self).predict is CEM.predict and type(self).intervene is ConceptModel.intervene

    def intervention_extras(self) -> frozenset[str] | None:
        return frozenset({"c_pos", "c_neg"}) if self._plain_cem_contract() else None

    def additive_logits(self, state: ConceptState) -> tuple[Tensor, Tensor] | None:
        """A linear head over the mixed embeddings: ``c_hat_i = c_i^- + p_i (c_i^+ - c_i^-)`` is affine
        in ``p_i``, so setting concept ``i`` to ``v`` moves the logits by ``(v - p_i) W_i (c_i^+ - c_i^-)``."""
        if not self._plain_cem_contract() or not isinstance(self.head, nn.Linear):
            return None
        m, k = self.n_concepts, self.cfg.emb_size
        w = self.head.weight.view(-1, m, k)  # [C, m, k]
        diff = (state.extras["c_pos"] - state.extras["c_neg"]) * self.concept_keep[:, None]  # [B, m, k]
        move = torch.einsum("bmk,cmk->bmc", diff, w)  # [B, m, C]: logit move per unit of p_i
        p = state.probs
        dv = torch.stack([-p, 1.0 - p], dim=2)  # [B, m, 2]: v - p
        return self.predict(state), dv[..., None] * move[:, :, None, :]

    def pair_bytes(self, state: ConceptState) -> int | None:
        return additive_pair_bytes(self.head, self.n_classes) if self._plain_cem_contract() else None

    def pair_logits(self, state: ConceptState, pairs: PairBlock) -> Tensor:
        """The mixed embeddings are affine in each ``p_i``, so the head's first layer moves by
        ``(a_i - p_i) W_1[:, block i] (c_i^+ - c_i^-)`` per intervened concept (row gathers, no
        expanded state); the rest of the head runs on the moved outputs."""
        split = first_linear(self.head) if self._plain_cem_contract() else None
        if split is None:
            return super().pair_logits(state, pairs)
        first, rest = split
        m, k = self.n_concepts, self.cfg.emb_size
        diff = (state.extras["c_pos"] - state.extras["c_neg"]) * self.concept_keep[:, None]  # [B, m, k]
        move = torch.einsum("bmk,fmk->bmf", diff, first.weight.view(-1, m, k))  # [B, m, F]
        return additive_pair_logits(first(self.mixed_embeddings(state).flatten(1)), move, state.probs, pairs, rest)

    def task_logits_for_training(self, batch: Batch, state: ConceptState) -> Tensor:
        """RandInt: intervene with the annotated concepts on a per-sample Bernoulli mask."""
        if self.training and self.cfg.randint_prob > 0:
            mask = torch.rand_like(state.probs) < self.cfg.randint_prob
            state = self.intervene(state, mask, batch["c"].to(state.probs))
        return self.predict(state)
