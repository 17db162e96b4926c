"""``ConceptModel``: the LightningModule contract every architecture implements.

* ``encode(x) -> ConceptState`` — concept logits/probabilities plus the architecture's own state;
* ``intervene(state, mask, values) -> ConceptState`` — "a human set these concepts";
* ``predict(state) -> task logits [B,C]`` — cheap and batchable, called many times by
  the intervention engine.

Subclasses override ``build`` (their layers), the three contract methods and, where
they train differently, ``task_logits_for_training`` / ``extra_losses``.
"""

from __future__ import annotations

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MeanMetric, MetricCollection
from torchmetrics.classification import BinaryAccuracy, BinaryAUROC, MulticlassAccuracy

from cbm.core.validation import ConfigError, to_dataclass
from cbm.models.backbones import build_backbone, mlp
from cbm.models.concept_types import ConceptTypes
from cbm.models.config import DataInfo, HeadConfig, ModelConfig, settings_of
from cbm.models.hooks import InterventionHooks
from cbm.models.metrics import MeanConceptF1
from cbm.models.state import MINIMISED, ConceptState

Batch = dict[str, Tensor]
#: Logit used for a concept set to exactly 0 or 1 (sigmoid(±LOGIT_CLAMP) rounds to 0/1 in float32).
LOGIT_CLAMP = 20.0


def masked_mean(values: Tensor, observed: Tensor | None) -> Tensor:
    """Mean of ``values`` over the entries where ``observed`` is 1 (``None``: the plain mean; no
    observed entry: 0, so a batch without annotations adds nothing)."""
    if observed is None:
        return values.mean()
    return (values * observed).sum() / observed.sum().clamp_min(1.0)


def prob_to_logit(p: Tensor) -> Tensor:
    """Inverse sigmoid, clamped so 0/1 map to finite logits.

    Computed without taking ``logit`` of exactly 0 or 1 and without ``where``/``masked_fill``
    (on CPU, infinities and masked selects are several times slower, and interventions set
    exact 0/1 values on every call); the results are identical to
    ``torch.logit(p.clamp(0, 1)).clamp(-LOGIT_CLAMP, LOGIT_CLAMP)``.
    """
    if p.dtype not in (torch.float32, torch.float64, torch.bfloat16):  # logit(tiny) > -20 in float16
        return torch.logit(p.clamp(0.0, 1.0), eps=None).clamp(-LOGIT_CLAMP, LOGIT_CLAMP)
    fi = torch.finfo(p.dtype)
    hi = 1.0 - fi.eps / 2  # the largest float below 1
    q = p.clamp(0.0, 1.0)
    inner = torch.logit(q.clamp(fi.tiny, hi))
    bump = (q - hi).clamp_(min=0.0).mul_(4 * LOGIT_CLAMP / fi.eps)  # 2 * LOGIT_CLAMP where q == 1, else 0
    return inner.add_(bump).clamp_(-LOGIT_CLAMP, LOGIT_CLAMP)


def build_head(cfg: HeadConfig, in_dim: int, n_out: int) -> nn.Module:
    """Linear or MLP label predictor."""
    if cfg.kind == "linear":
        return nn.Linear(in_dim, n_out)
    return mlp([in_dim, *([cfg.hidden] * (cfg.layers - 1)), n_out], cfg.dropout)


def concept_hint(backbone: nn.Module, n_concepts: int) -> nn.Module | None:
    """The backbone's own concept layer (Sudoku group validity), or ``None``. Architectures that
    build their own concept representation (CEM, ProbCBM, ECBM) read its logits as ``n_concepts``
    extra features (:func:`with_hint`), so they see what a CBM's concept layer sees."""
    return backbone.make_concept_layer(n_concepts)


def with_hint(features: Tensor, hint: nn.Module | None) -> Tensor:
    """``features`` with the hint layer's concept logits appended (unchanged without a hint)."""
    return features if hint is None else torch.cat([features, hint(features)], dim=1)


class ConceptModel(L.LightningModule, InterventionHooks):
    """Shared training loop, losses, metrics and optimiser for every architecture, and the
    intervention engine's optional hooks (:class:`~cbm.models.hooks.InterventionHooks`)."""

    config_cls: type[ModelConfig] = ModelConfig
    #: False for the black box, which has no concept layer to supervise or intervene on.
    has_concepts: bool = True

    def __init__(self, model: dict, data: dict, data_cfg: dict | None = None):
        """``model``: the model config; ``data``: :class:`DataInfo` fields; ``data_cfg``: the
        generator config, stored in checkpoints so a run's data can be rebuilt exactly."""
        super().__init__()
        self.save_hyperparameters()
        self.cfg = to_dataclass(self.config_cls, settings_of(model), "model")
        self.info = DataInfo(**data)
        self.backbone = self.make_backbone()
        keep = torch.ones(self.info.n_concepts)
        for name in self.cfg.zero_concepts:
            if name not in self.info.concept_names:
                raise ConfigError(f"model.zero_concepts: unknown concept '{name}' (have {self.info.concept_names})")
            keep[self.info.concept_names.index(name)] = 0.0
        #: Alignment constraint mask: 0 removes a concept's contribution to the head.
        self.register_buffer("concept_keep", keep)
        #: Binary, categorical and continuous concept columns (:mod:`cbm.models.concept_types`).
        self.types = ConceptTypes.of(self.info)
        if self.types.typed and self.has_concepts and not self.supports_typed_concepts:
            raise ConfigError(
                f"model {self.cfg.name}: the data has typed concepts (categorical {sorted(self.info.concept_groups)}, "
                f"continuous {self.info.continuous_concepts}); only cbm, cem and probcbm read them (use a binary concept set)"
            )
        if self.cfg.monotonicity and not self.supports_monotonicity:
            raise ConfigError(f"model.monotonicity: sign constraints apply to the CBM's linear label predictor, not to {self.cfg.name}")
        self.build()
        if self.cfg.concept_input != "features" and hasattr(self, "hint") and self.hint is None:
            raise ConfigError(
                f"model.concept_input={self.cfg.concept_input}: model '{self.cfg.name}' with backbone '{self.cfg.backbone.name}' "
                "has no concept layer to read (use concept_input=features)"
            )
        self._metrics = nn.ModuleDict({stage: self._make_metrics(stage) for stage in ("val", "test")})

    # ------------------------------------------------------------------ contract
    @property
    def n_concepts(self) -> int:
        return self.info.n_concepts if self.has_concepts else 0

    @property
    def n_classes(self) -> int:
        return self.info.n_classes

    def make_backbone(self) -> nn.Module:
        """The encoder ``x -> features`` (``model.backbone``); a wrapper of a model trained
        elsewhere returns its own (:class:`~cbm.models.external.ExternalCBM`)."""
        return build_backbone(self.cfg.backbone, self.info)

    def build(self) -> None:
        """Create the architecture's layers (called from ``__init__``)."""
        raise NotImplementedError

    def encode(self, x: Tensor) -> ConceptState:
        raise NotImplementedError

    def intervene(self, state: ConceptState, mask: Tensor, values: Tensor) -> ConceptState:
        """Set ``state``'s concepts at ``mask`` (bool ``[B,m]``) to ``values`` (``[B,m]`` in [0,1]).

        Default (CBM, CEM): the given probabilities replace the predicted ones."""
        self.check_intervention(state, mask, values)
        return replace_concepts(state, mask, values)

    def predict(self, state: ConceptState) -> Tensor:
        raise NotImplementedError

    def forward(self, x: Tensor) -> tuple[ConceptState, Tensor]:
        state = self.encode(x)
        return state, self.predict(state)

    def check_intervention(self, state: ConceptState, mask: Tensor, values: Tensor) -> None:
        """Shape guard shared by every ``intervene`` (no silent broadcasting)."""
        if mask.shape != state.probs.shape or values.shape != state.probs.shape:
            raise ValueError(
                f"intervene: mask {tuple(mask.shape)} and values {tuple(values.shape)} must both be "
                f"{tuple(state.probs.shape)}"
            )

    # ------------------------------------------------------------------ concept inputs
    def concept_input_dim(self) -> int:
        """Width of :meth:`concept_input` (CEM, ProbCBM and ECBM build their concept layers on it)."""
        if getattr(self, "hint", None) is None:
            return self.backbone.out_dim
        return self.n_concepts + (self.backbone.out_dim if self.cfg.concept_input == "features" else 0)

    def concept_input(self, features: Tensor) -> Tensor:
        """What an architecture's own concept layer reads: the backbone features with the hint's
        logits appended, or (``model.concept_input: hint``) the hint's logits alone, or
        (``hint_detached``) those logits without a gradient back into the backbone."""
        hint = getattr(self, "hint", None)
        if hint is None or self.cfg.concept_input == "features":
            return with_hint(features, hint)
        logits = hint(features)
        return logits.detach() if self.cfg.concept_input == "hint_detached" else logits

    # ------------------------------------------------------------------ training
    def task_logits_for_training(self, batch: Batch, state: ConceptState) -> Tensor:
        """Task logits the task loss is computed on (independent CBM feeds true concepts)."""
        return self.predict(state)

    def extra_losses(self, batch: Batch, state: ConceptState, y_logits: Tensor) -> dict[str, Tensor]:
        """Architecture-specific weighted loss terms added to the total."""
        return {}

    #: Whether ``model.monotonicity`` (sign constraints on a linear label predictor) applies.
    supports_monotonicity = False
    #: Whether the architecture reads categorical and continuous concepts (:attr:`types`): its
    #: probabilities come from ``self.types.activate`` and its loss from ``concept_loss``.
    supports_typed_concepts = False

    def check_data(self, data) -> None:
        """Refuse (``ConfigError``) a dataset this model cannot train on, before training starts."""

    def concept_loss(self, state: ConceptState, c: Tensor, observed: Tensor | None = None) -> Tensor:
        """Mean BCE over the annotated entries (``observed``: 1 where annotated; ``None``: all); typed
        concepts: each column's own loss, a group counted once (:meth:`ConceptTypes.loss`)."""
        if self.types.typed:
            return self.types.loss(state.logits, c, observed)
        return masked_mean(F.binary_cross_entropy_with_logits(state.logits, c, reduction="none"), observed)

    def compute_losses(self, batch: Batch) -> tuple[dict[str, Tensor], ConceptState, Tensor]:
        """All loss terms of a batch; ``losses['loss']`` is the weighted total.

        Missing annotations (``batch['c_observed']`` 0): the concept losses skip them, and what reads
        the annotated concepts (an independent head, training interventions, ECBM's global energy)
        sees the model's own detached probability there."""
        state = self.encode(batch["x"])
        observed = batch.get("c_observed")
        if observed is not None and self.has_concepts:
            observed = observed.to(state.probs)
            batch = {**batch, "c": torch.where(observed > 0, batch["c"].to(state.probs), state.probs.detach())}
        y_logits = self.task_logits_for_training(batch, state)
        losses: dict[str, Tensor] = {"task_loss": F.cross_entropy(y_logits, batch["y"])}
        total = self.cfg.task_loss_weight * losses["task_loss"]
        if self.has_concepts and self.cfg.concept_loss_weight > 0:
            losses["concept_loss"] = self.concept_loss(state, batch["c"], observed)
            total = total + self.cfg.concept_loss_weight * losses["concept_loss"]
        aux = self.backbone.aux_loss(state.extras.get("features"), batch) if self.cfg.backbone.aux_weight > 0 else None
        if aux is not None:
            losses["aux_loss"] = aux
            total = total + self.cfg.backbone.aux_weight * aux
        hint = getattr(self, "hint", None)
        if hint is not None and self.has_concepts and self.cfg.concept_loss_weight > 0:
            # the hint layer is supervised like a CBM's concept layer: without it nothing anchors its
            # parameters, and the downstream losses dragged them off (Sudoku CEM: hint accuracy 80%,
            # below the 86% of the majority value, concepts at chance)
            hint_logits = hint(state.extras["features"])
            if self.types.typed:
                losses["hint_loss"] = self.types.loss(hint_logits, batch["c"], observed)
            else:
                hint_bce = F.binary_cross_entropy_with_logits(hint_logits, batch["c"].to(hint_logits), reduction="none")
                losses["hint_loss"] = masked_mean(hint_bce, observed)
            total = total + self.cfg.concept_loss_weight * losses["hint_loss"]
        for name, value in self.extra_losses(batch, state, y_logits).items():
            losses[name] = value
            total = total + value
        losses["loss"] = total
        return losses, state, y_logits

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        losses, _, _ = self.compute_losses(batch)
        bs = len(batch["y"])
        for name, value in losses.items():
            self.log(
                f"train/{name}", value, on_step=False, on_epoch=True, batch_size=bs, prog_bar=name == "loss", sync_dist=True
            )
        return losses["loss"]

    def _make_metrics(self, stage: str) -> MetricCollection:
        """Evaluation metrics as torchmetrics objects: under DDP each rank updates them with its
        shard and they are synchronised once, at the end of the epoch (no per-step collectives)."""
        metrics: dict[str, nn.Module] = {
            "task_acc": MulticlassAccuracy(num_classes=max(self.n_classes, 2), average="micro"),
            "task_loss": MeanMetric(),
        }
        if self.has_concepts:  # over the 0/1 columns; continuous ones by their squared error
            metrics["concept_acc"] = BinaryAccuracy()
            metrics["concept_auroc"] = BinaryAUROC()
            metrics["concept_f1"] = MeanConceptF1(len(self.types.binary))
            if self.types.groups:  # the categorical concepts' value (argmax, "none" included) read right
                metrics["concept_group_acc"] = MeanMetric()
            if self.types.continuous:
                metrics["concept_mse"] = MeanMetric()
        return MetricCollection(metrics, prefix=f"{stage}/", compute_groups=False)

    def _eval_step(self, batch: Batch, stage: str) -> None:
        state, y_logits = self(batch["x"])
        self._update_metrics(stage, batch, state, y_logits)

    def _update_metrics(self, stage: str, batch: Batch, state: ConceptState, y_logits: Tensor) -> None:
        """Update and log ``stage``'s metrics with a batch's predictions (a model that validates on
        something else than ``x``, such as the OCR models' true digits, calls it directly)."""
        metrics = self._metrics[stage]
        y = batch["y"]
        metrics["task_acc"].update(y_logits, y)
        metrics["task_loss"].update(F.cross_entropy(y_logits.float(), y), weight=len(y))
        if self.has_concepts:
            binary = self.types.binary if self.types.continuous else slice(None)
            c = batch["c"][:, binary].flatten().long()
            p = state.probs[:, binary].flatten().float()
            metrics["concept_acc"].update(p, c)
            metrics["concept_auroc"].update(p, c)
            observed = batch.get("c_observed")
            metrics["concept_f1"].update(state.probs[:, binary], batch["c"][:, binary], None if observed is None else observed[:, binary])
            if self.types.groups:
                metrics["concept_group_acc"].update(self.types.group_accuracy(state.probs, batch["c"]).float().mean(1), weight=len(y))
            if self.types.continuous:
                cont = list(self.types.continuous)
                sq = (state.probs[:, cont].float() - batch["c"][:, cont].float()).pow(2).mean(1)
                metrics["concept_mse"].update(sq, weight=len(y))
        self.log_dict(metrics, on_step=False, on_epoch=True, prog_bar=stage == "val", batch_size=len(y))

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._eval_step(batch, "val")

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._eval_step(batch, "test")

    def configure_optimizers(self):
        o = self.cfg.optim
        head = getattr(self, "head", None)
        head_ids = {id(p) for p in head.parameters()} if isinstance(head, nn.Module) else set()
        body = [p for p in self.parameters() if p.requires_grad and id(p) not in head_ids]
        params = [{"params": body}]
        head_params = [p for p in head.parameters() if p.requires_grad] if head_ids else []
        if head_params:  # a head solved before training (independent CBM, head.solver=lbfgs) is frozen
            params.append({"params": head_params, "lr": o.head_lr or o.lr})
        if o.name == "sgd":
            opt = torch.optim.SGD(params, lr=o.lr, weight_decay=o.weight_decay, momentum=0.9)
        else:
            cls = torch.optim.Adam if o.name == "adam" else torch.optim.AdamW
            opt = cls(params, lr=o.lr, weight_decay=o.weight_decay)
        trainer = self._trainer
        if o.scheduler == "cosine" and trainer is not None and trainer.max_epochs:
            sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(trainer.max_epochs, 1))
            return {"optimizer": opt, "lr_scheduler": sched}
        return opt


def replace_concepts(state: ConceptState, mask: Tensor, values: Tensor) -> ConceptState:
    """CBM meaning of an intervention: the given probabilities replace the predicted ones."""
    values = values.to(state.probs.dtype)
    return ConceptState(
        logits=torch.where(mask, prob_to_logit(values), state.logits),
        probs=torch.where(mask, values, state.probs),
        intervened=state.intervened | mask,
        uncertainty=None if state.uncertainty is None else torch.where(mask, torch.zeros_like(values), state.uncertainty),
        extras={k: v for k, v in state.extras.items() if k != MINIMISED},  # edited: no longer a minimum
    )

