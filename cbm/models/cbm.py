"""Concept bottleneck model (Koh et al. 2020): ``x -> concepts -> y``.

Training schemes (``model.training``):

* ``independent`` — the encoder learns concepts, the head learns ``y`` from the
  *annotated* concepts; at test time the head reads the predicted probabilities.
* ``sequential`` — first ``sequential_concept_fraction`` of the epochs train the
  encoder on concepts only; then the encoder is frozen and the head learns ``y``
  from its predicted probabilities.
* ``joint`` — one weighted sum of concept and task losses, end to end.
"""

from __future__ import annotations

import logging

import torch
from torch import Tensor, nn

from cbm.core.validation import ConfigError
from cbm.models.base import Batch, ConceptModel, build_head
from cbm.models.head_fit import fit_head, fit_signed_head, project_signs
from cbm.models.hooks import PairBlock, additive_pair_bytes, additive_pair_logits, first_linear
from cbm.models.state import ConceptState

log = logging.getLogger("cbm")

#: Largest concept count whose hard-readout head is tabulated for the responsiveness search
#: (``2^m`` rows: 65,536 at 16); above it pairs go through the head's first layer.
HARD_TABLE_MAX_CONCEPTS = 16


def make_concept_layer(backbone: nn.Module, n_concepts: int) -> nn.Module:
    """The backbone's own concept layer if it has one, else a linear map of its features."""
    own = backbone.make_concept_layer(n_concepts)
    return own if own is not None else nn.Linear(backbone.out_dim, n_concepts)


class CBM(ConceptModel):
    supports_monotonicity = True
    supports_typed_concepts = True

    def build(self) -> None:
        self.concept_layer = make_concept_layer(self.backbone, self.n_concepts)
        self.head = build_head(self.cfg.head, self.n_concepts, self.n_classes)
        signs = torch.zeros(self.n_concepts)
        for name, sign in (self.cfg.monotonicity or {}).items():
            if name not in self.info.concept_names:
                raise ConfigError(f"model.monotonicity: unknown concept '{name}' (have {self.info.concept_names})")
            signs[self.info.concept_names.index(name)] = float(sign)
        if self.cfg.monotonicity and (not isinstance(self.head, nn.Linear) or self.n_classes != 2):
            raise ConfigError("model.monotonicity: sign constraints need a linear head (model.head.kind=linear) and two classes")
        #: Sign each concept's margin weight toward class 1 must have (0: free); see model.monotonicity.
        #: Rebuilt from the config, so not stored: checkpoints from before the knob load unchanged.
        self.register_buffer("monotonic_signs", signs, persistent=False)

    def encode(self, x: Tensor) -> ConceptState:
        features = self.backbone(x)
        logits = self.concept_layer(features)
        return ConceptState(logits=logits, probs=self.types.activate(logits), extras={"features": features})

    def readout(self, probs: Tensor) -> Tensor:
        """What the head reads of the concept probabilities: themselves (``soft``) or ``1[p >= 0.5]``
        (``hard``, concept-benchmark 0.4.1's ``predict_proba >= 0.5``; straight-through gradient).
        Intervened concepts are 0/1 either way."""
        if self.cfg.concept_readout == "soft":
            return probs
        hard = (probs >= 0.5).to(probs.dtype)
        return probs + (hard - probs).detach() if probs.requires_grad else hard

    def predict(self, state: ConceptState) -> Tensor:
        return self.head(self.readout(state.probs) * self.concept_keep)

    # ------------------------------------------------- intervention-engine hooks (see cbm.models.hooks)
    def _plain_cbm_contract(self) -> bool:
        return type(self).predict is CBM.predict and type(self).intervene is ConceptModel.intervene

    def intervention_extras(self) -> frozenset[str] | None:
        """``intervene`` / ``predict`` read no extras (unless a subclass redefines them)."""
        return frozenset() if self._plain_cbm_contract() else None

    def additive_logits(self, state: ConceptState) -> tuple[Tensor, Tensor] | None:
        """A linear head: setting concept ``i`` to ``v`` moves the logits by ``(v - p_i) W[:, i]``."""
        if not self._plain_cbm_contract() or not isinstance(self.head, nn.Linear):
            return None
        w = self.head.weight * self.concept_keep  # [C, m]
        p = self.readout(state.probs)
        dv = torch.stack([-p, 1.0 - p], dim=2)  # [B, m, 2]: v - p
        return self.predict(state), dv[..., None] * w.T[None, :, None, :]

    def pair_bytes(self, state: ConceptState) -> int | None:
        return additive_pair_bytes(self.head, self.n_classes) if self._plain_cbm_contract() else None

    def pair_logits(self, state: ConceptState, pairs: PairBlock) -> Tensor:
        """The hard readout's head sees only ``2^m`` binary inputs: its logits are tabulated once and
        each pair is an integer code into the table (``m <= HARD_TABLE_MAX_CONCEPTS``). Otherwise
        the head's first layer is linear in the probabilities: each pair moves its output by
        ``sum_{i in S} (a_i - p_i) W_1[:, i]`` (row gathers, no expanded state, no concept logits);
        the rest of the head runs on the moved outputs."""
        if self.cfg.concept_readout == "hard" and self._plain_cbm_contract() and state.n_concepts <= HARD_TABLE_MAX_CONCEPTS:
            return self._hard_table_logits(state, pairs)
        split = first_linear(self.head) if self._plain_cbm_contract() else None
        if split is None:
            return super().pair_logits(state, pairs)
        first, rest = split
        p = self.readout(state.probs)
        move = (first.weight * self.concept_keep).T.unsqueeze(0)  # [1, m, F]
        return additive_pair_logits(first(p * self.concept_keep), move, p, pairs, rest)

    def _hard_table_logits(self, state: ConceptState, pairs: PairBlock) -> Tensor:
        """``[B, P, C]``: the head's logits for every binary input (code ``sum_i a_i 2^i``), read at
        each pair's code: the example's thresholded concepts with the pair's concepts set to its values.
        The table is built once per state (the search calls this per chunk and per step)."""
        m, dev = state.n_concepts, state.probs.device
        powers = torch.ones(m, dtype=torch.long, device=dev) << torch.arange(m, device=dev)  # [m]
        cached = getattr(self, "_hard_table", None)
        if cached is None or cached[0] is not state:
            every = (torch.arange(1 << m, device=dev)[:, None] & powers).ne(0).to(state.probs.dtype)  # [2^m, m]
            self._hard_table = (state, self.head(every * self.concept_keep.to(every)))  # [2^m, C]
        hard = self.readout(state.probs).bool()  # what the head reads
        # the dense form: a pair may list a concept twice (the engine masks such candidates out later)
        ones = torch.where(pairs.mask, pairs.values > 0.5, hard[:, None, :])  # [B, P, m]
        return self._hard_table[1][(ones.long() * powers).sum(-1)]

    # ------------------------------------------------------------ training schemes
    def _in_head_phase(self) -> bool:
        trainer = self._trainer
        if trainer is None or not trainer.max_epochs:
            return True
        switch = max(1, round(self.cfg.sequential_concept_fraction * trainer.max_epochs))
        return self.current_epoch >= switch

    def _solves_head(self) -> bool:
        return self.cfg.training == "independent" and self.cfg.head.solver == "lbfgs"

    def check_data(self, data) -> None:
        """The L-BFGS head is fit on the training rows annotated in full: there must be one."""
        observed = data.extra.get("c_observed")
        if self._solves_head() and observed is not None:
            from synthetic.base import SPLITS

            if not observed[data.split == SPLITS["train"]].all(1).any():
                raise ConfigError("head.solver=lbfgs: no training row has every concept annotated (data.concept_missing); use head.solver=gradient")

    def setup(self, stage: str) -> None:
        """Independent training with ``head.solver=lbfgs``: solve the head on the annotated training
        concepts now, then freeze it (it is out of the optimiser; every checkpoint carries it)."""
        if stage != "fit" or not self._solves_head():
            return
        split = getattr(getattr(self._trainer, "datamodule", None), "split", None)
        if split is None:
            log.warning("head.solver=lbfgs needs the training split of a SyntheticDataModule: training the head by gradient")
            return
        train = split("train").tensors
        h = self.cfg.head
        c, y = train["c"], train["y"]
        if "c_observed" in train:  # missing annotations: the rows annotated in full (complete cases)
            whole = train["c_observed"].bool().all(1)
            c, y = c[whole], y[whole]
        inputs = c * self.concept_keep.to(c.device)
        l2 = h.l2_for(len(y), self.n_classes)
        if self.cfg.monotonicity:
            fit = fit_signed_head(self.head, inputs, y, self.monotonic_signs, l2, h.max_iter, h.tol)
        else:
            fit = fit_head(self.head, inputs, y, l2, h.max_iter, h.tol)
        self.head.requires_grad_(False)
        self.head_fit = fit
        msg = (f"label predictor fit by L-BFGS: {fit.iterations} iterations on {fit.rows} rows ({fit.distinct} distinct), "
               f"objective {fit.loss:.6f}, max |gradient| {fit.grad_max:.1e}, training accuracy {100 * fit.train_acc:.2f}%")  # fmt: skip
        (log.info if fit.converged else log.warning)(msg + ("" if fit.converged else f" (not converged to head.tol={h.tol})"))

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        """Sign constraints on a head the optimiser trains: project it after every step."""
        if self.cfg.monotonicity and self.head.weight.requires_grad:
            project_signs(self.head, self.monotonic_signs)

    def on_train_epoch_start(self) -> None:
        if self.cfg.training == "sequential" and self._in_head_phase():
            for module in (self.backbone, self.concept_layer):
                module.eval()
                module.requires_grad_(False)

    def task_logits_for_training(self, batch: Batch, state: ConceptState) -> Tensor:
        if self.cfg.training == "independent":
            return self.head(batch["c"] * self.concept_keep)
        if self.cfg.training == "sequential":
            return self.head(self.readout(state.probs.detach()) * self.concept_keep)
        return self.predict(state)

    def compute_losses(self, batch: Batch):
        losses, state, y_logits = super().compute_losses(batch)
        if self.cfg.training == "sequential":
            # One phase at a time: concepts (and aux) first, then the head on frozen concepts.
            task_part = self.cfg.task_loss_weight * losses["task_loss"]
            losses["loss"] = task_part if self._in_head_phase() else losses["loss"] - task_part
        return losses, state, y_logits
