"""Confidence scores and the abstention rule.

One rule for every model: a prediction is **accepted** (automated) iff its confidence
score is strictly above the threshold ``tau``, and the model **abstains** iff
``score <= tau``. Scores lie in ``[0, 1]``, higher = more confident.

* ``score="probability"`` (default): the largest class probability. For a binary task
  with ``p = P(y=1)`` this is ``max(p, 1-p)``, so *abstain iff* ``1 - tau <= p <= tau``:
  the closed rejection band ``[1-tau, tau]`` of the issue. For ``C > 2`` classes the same
  rule reads *abstain iff* ``max_c p_c <= tau``. (Taking the band closed in both cases
  keeps a 2-class softmax and a single-logit binary model on the same decisions, and
  makes ``tau = 1`` abstain on everything even when float32 probabilities saturate to 1.)
* ``score="uncertainty"`` (ProbCBM and other architectures with uncertainty): the class
  uncertainty ``u >= 0`` (lower = more confident) mapped to ``1 / (1 + u)``, a strictly
  decreasing map into ``(0, 1]``; ``tau`` then corresponds to the uncertainty threshold
  ``u < 1/tau - 1`` (see :func:`uncertainty_threshold`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from cbm.config.names import SCORES
from cbm.models.state import ConceptState


def probability_score(logits: Tensor) -> Tensor:
    """Largest class probability ``[B]`` of task logits ``[B,C]``.

    A single-logit binary head (``[B]`` or ``[B,1]``) is read as ``p = sigmoid(logit)``
    and scored ``max(p, 1-p)``, the same value a 2-class softmax gives.
    """
    if logits.dim() == 1 or (logits.dim() == 2 and logits.shape[1] == 1):
        p = torch.sigmoid(logits.reshape(-1).float())
        return torch.maximum(p, 1.0 - p)
    if logits.dim() != 2:
        raise ValueError(f"task logits must be [B,C], got shape {tuple(logits.shape)}")
    # float64 logits (Platt-scaled ones) keep float64: confidences within 1e-8 of 1 stay apart
    return torch.softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=1).max(dim=1).values


def predictions(logits: Tensor) -> Tensor:
    """Predicted class ``[B]`` (single-logit heads: ``logit > 0``)."""
    if logits.dim() == 1 or (logits.dim() == 2 and logits.shape[1] == 1):
        return (logits.reshape(-1) > 0).long()
    return logits.argmax(dim=1)


def uncertainty_to_score(u: Tensor) -> Tensor:
    """``1 / (1 + u)``: class uncertainty ``u >= 0`` -> confidence in ``(0, 1]``."""
    if (u < 0).any() or not torch.isfinite(u).all():
        raise ValueError("class uncertainties must be finite and >= 0")
    return 1.0 / (1.0 + u.float())


def uncertainty_threshold(tau: float) -> float:
    """The uncertainty threshold equivalent to score threshold ``tau`` (accept iff ``u < 1/tau - 1``)."""
    return float("inf") if tau <= 0 else 1.0 / tau - 1.0


def class_uncertainty(model, state: ConceptState) -> Tensor:
    """Per-example class uncertainty ``[B]`` of an architecture that has one.

    The model's ``state_class_uncertainty`` hook when it has one (ProbCBM: stored in eval mode,
    recomputed lazily after an intervention), else ``state.extras['class_uncertainty']`` when
    present, else the mean of the per-concept uncertainties ``state.uncertainty`` (an intervened
    concept has uncertainty 0).
    """
    hook = getattr(model, "state_class_uncertainty", None)
    if hook is not None:
        u = hook(state)
    elif "class_uncertainty" in state.extras:
        u = state.extras["class_uncertainty"]
    elif state.uncertainty is not None and state.uncertainty.shape[1] > 0:
        u = state.uncertainty.float().mean(dim=1)
    else:
        name = getattr(getattr(model, "cfg", None), "name", type(model).__name__)
        raise ValueError(
            f"score=uncertainty needs class uncertainties, but model '{name}' exposes neither "
            "extras['class_uncertainty'] nor per-concept uncertainty (use score=probability, or a ProbCBM)"
        )
    return u.reshape(u.shape[0], -1).mean(dim=1) if u.dim() > 1 else u


def confidence(model, state: ConceptState, logits: Tensor, score: str = "probability") -> Tensor:
    """Confidence score ``[B]`` in ``[0, 1]`` of a batch (higher = more confident)."""
    if score == "probability":
        return probability_score(logits)
    if score == "uncertainty":
        return uncertainty_to_score(class_uncertainty(model, state))
    raise ValueError(f"score must be one of {SCORES}, got '{score}'")


def accept(scores: Tensor, tau: float) -> Tensor:
    """Bool ``[B]``: the model decides (``score > tau``)."""
    return scores > tau


def abstain(scores: Tensor, tau: float) -> Tensor:
    """Bool ``[B]``: the model abstains (``score <= tau``)."""
    return ~accept(scores, tau)
