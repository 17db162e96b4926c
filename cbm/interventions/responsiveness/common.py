"""Pieces the exact and greedy evaluations share: the additive form of a model's logits, the
state trimmed to what interventions read, and chunk sizes that bound memory."""

from __future__ import annotations

import torch
from torch import Tensor

from cbm.models.hooks import batch_step, state_row_bytes, trim_state  # noqa: F401 (the evaluations import them from here too)
from cbm.models.state import ConceptState


class Additive:
    """Per-example, per-(concept, value) logit terms of an additive head (the model's
    ``additive_logits`` hook), in margin form for two classes."""

    def __init__(self, base: Tensor, terms: Tensor, logits: Tensor):
        c = logits.shape[1]
        self.binary = c == 2
        base, terms = base.float(), terms.float()
        if self.binary:
            # Two classes: only the margin l1 - l0 matters; pred = 1 iff margin > 0 (argmax ties -> 0).
            self.base = (base[:, 1] - base[:, 0])[:, None]  # [B, 1]
            self.terms = (terms[..., 1] - terms[..., 0])[..., None]  # [B, m, 2, 1]
        else:
            self.base = base  # [B, C]
            self.terms = terms  # [B, m, 2, C]
        self.yhat = logits.argmax(1)

    def flips(self, base: Tensor, delta: Tensor, yhat: Tensor) -> Tensor:
        """Bool: the prediction of ``base + delta`` (last dim = classes or margin) differs from ``yhat``."""
        z = base + delta
        if self.binary:
            return (z[..., 0] > 0) != yhat.bool()
        return z.argmax(-1) != yhat


def additive(model, state: ConceptState, logits: Tensor, fast_path: str = "auto") -> Additive | None:
    """The model's additive form when it has one and the fast path is allowed, else ``None``."""
    if fast_path != "auto":
        return None
    form = model.additive_logits(state)
    return None if form is None else Additive(*form, logits)


def empty_resp(state: ConceptState, n: int) -> Tensor:
    return torch.empty(state.batch_size, n, device=state.probs.device)
