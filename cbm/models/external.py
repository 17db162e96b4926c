"""A concept bottleneck model trained elsewhere, as a model of the contract: a concept detector
(any ``nn.Module``, ``x -> concept logits``) and a label predictor (an ``nn.Module`` over the
concept probabilities, or a fitted scikit-learn-style classifier) become a
:class:`~cbm.models.base.ConceptModel` without training here, so a published CBM is intervened on
(:func:`cbm.interventions.engine.run_grid`), automated (:func:`cbm.selective.run_automation`) and
audited with the same engine as the built-ins.

>>> model = ExternalCBM(detector, LogisticRegression().fit(c_train, y_train), concept_names, class_names)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from cbm.core.validation import ConfigError
from cbm.models.base import ConceptModel, prob_to_logit
from cbm.models.state import ConceptState

DETECTOR_OUTPUTS = ("logits", "probs")


class EstimatorHead(nn.Module):
    """A fitted scikit-learn-style classifier as a label predictor over concept probabilities.

    The class scores are the estimator's ``decision_function`` (a binary one's ``d`` becomes
    ``[0, d]``: its softmax is the estimator's own ``sigmoid(d)``), else ``log predict_proba``; so
    the argmax is the estimator's prediction. It runs on the CPU in float64 (a NumPy estimator),
    one call per batch, and passes no gradient."""

    def __init__(self, estimator: Any, n_classes: int):
        super().__init__()
        classes = getattr(estimator, "classes_", None)
        if classes is None:
            raise ValueError(f"predictor: {type(estimator).__name__} is not fitted (it has no classes_)")
        shown = [c.item() if hasattr(c, "item") else c for c in classes]
        if shown != list(range(n_classes)):
            raise ValueError(f"predictor: the estimator's classes_ {shown} must be the class ids 0..{n_classes - 1}")
        self.method = "decision_function" if callable(getattr(estimator, "decision_function", None)) else "predict_proba"
        self.estimator = estimator

    def forward(self, probs: Tensor) -> Tensor:
        x = probs.detach().to("cpu", torch.float64).numpy()
        if self.method == "decision_function":
            scores = torch.as_tensor(self.estimator.decision_function(x), dtype=torch.float64)
            if scores.ndim == 1:  # binary: the margin of class 1 over class 0
                scores = torch.stack([torch.zeros_like(scores), scores], dim=1)
        else:
            scores = torch.as_tensor(self.estimator.predict_proba(x), dtype=torch.float64).clamp_min(1e-300).log()
        return scores.to(device=probs.device, dtype=probs.dtype)


def as_label_predictor(predictor: Any, n_classes: int) -> nn.Module:
    """``predictor`` as a module ``concept probabilities [B, m] -> class scores [B, C]``: an
    ``nn.Module`` as it is, a fitted estimator with ``decision_function`` / ``predict_proba`` wrapped
    (:class:`EstimatorHead`); anything else is one ``ValueError`` line."""
    if isinstance(predictor, nn.Module):
        return predictor
    if callable(getattr(predictor, "decision_function", None)) or callable(getattr(predictor, "predict_proba", None)):
        return EstimatorHead(predictor, n_classes)
    raise ValueError(f"predictor: expected an nn.Module or a fitted classifier with decision_function / predict_proba, got {type(predictor).__name__}")


class ExternalCBM(ConceptModel):
    """``detector`` (``x -> concept logits``, or probabilities with ``detector_output='probs'``)
    and ``predictor`` (concept probabilities -> class scores) as a model of the contract.

    Interventions replace concept probabilities (the CBM meaning); ``predict`` runs the predictor
    on them. Nothing is trained or copied: the wrapper holds the given objects. It is built in
    Python, not from a config file (its parts are objects, not settings)."""

    def __init__(self, detector: nn.Module | None = None, predictor: Any = None, concept_names: Sequence[str] = (),
                 class_names: Sequence[str] = (), *, in_shape: Sequence[int] = (), modality: str = "tabular",
                 dataset: str = "external", name: str = "external", detector_output: str = "logits",
                 model: dict | None = None, data: dict | None = None, data_cfg: dict | None = None):  # fmt: skip
        if model is not None or data is not None:
            raise ConfigError("model._target_: cbm.models.external.ExternalCBM wraps a model trained elsewhere; build it in Python "
                              "(ExternalCBM(detector, predictor, concept_names, class_names)), not from a config")  # fmt: skip
        if not isinstance(detector, nn.Module):
            raise ValueError(f"detector: expected an nn.Module (x -> concept logits), got {type(detector).__name__}")
        if detector_output not in DETECTOR_OUTPUTS:
            raise ValueError(f"detector_output must be one of {DETECTOR_OUTPUTS}, got '{detector_output}'")
        if not concept_names or len(class_names) < 2:
            raise ValueError("ExternalCBM needs the concept names and at least two class names")
        # the parts go in before nn.Module.__init__ (which the base calls), as plain attributes
        object.__setattr__(self, "_parts", (detector, as_label_predictor(predictor, len(class_names))))
        object.__setattr__(self, "detector_output", detector_output)
        info = {"dataset": dataset, "modality": modality, "in_shape": list(in_shape),
                "concept_names": list(concept_names), "class_names": list(class_names)}  # fmt: skip
        super().__init__(model={"_target_": f"{__name__}.ExternalCBM", "name": name, "training": "independent"}, data=info)

    def make_backbone(self) -> nn.Module:
        return self._parts[0]

    def build(self) -> None:
        self.head = self._parts[1]
        del self.__dict__["_parts"]

    def encode(self, x: Tensor) -> ConceptState:
        out = self.backbone(x)
        if out.ndim != 2 or out.shape[1] != self.n_concepts:
            raise ValueError(f"detector: expected [batch, {self.n_concepts}] concept {self.detector_output}, got {tuple(out.shape)}")
        if self.detector_output == "probs":
            probs = out.clamp(0.0, 1.0)
            return ConceptState(logits=prob_to_logit(probs), probs=probs)
        return ConceptState(logits=out, probs=torch.sigmoid(out))

    def predict(self, state: ConceptState) -> Tensor:
        return self.head(state.probs * self.concept_keep.to(state.probs))
