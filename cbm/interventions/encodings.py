"""What a model reads for an intervened concept (concept-benchmark 0.4's intervention encodings).

An intervener answers 0 or 1; the encoding turns that answer into the value the model's
``intervene`` receives, per concept (levels ``[2, m]``: the value for "absent", for "present"):

* ``binary`` — the answer itself (0 / 1). For a label-free CBM, whose detector never outputs a
  confident 0 or 1, this is a value the label predictor never saw in training.
* ``percentile`` — the detector's own low / high percentile (``percentiles``, default 5 / 95) of
  its outputs on the training images: the in-distribution "clearly absent / present", and needs
  no concept label (what a label-free CBM can do).
* ``binary_revealed`` — the median of the detector's outputs on the training images whose
  annotation is 0 / 1: the level a concept's annotations reveal (needs the training concept
  labels; a concept never annotated 0 (1) keeps the answer itself).

The intervener's answers (and their accuracy) are unchanged; only what the model reads moves.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor

from cbm.config.intervene import ENCODINGS, EncodingConfig
from cbm.interventions.interveners.base import THRESHOLD

__all__ = ["ENCODINGS", "EncodingConfig", "encode_values", "fit_levels"]

@torch.no_grad()
def fit_levels(model, batches: Iterable[dict[str, Tensor]], cfg: EncodingConfig) -> Tensor | None:
    """Levels ``[2, m]`` (absent, present) of ``cfg.kind`` measured on ``batches``; ``None`` for
    ``binary`` (the answers go through unchanged)."""
    if cfg.kind == "binary":
        return None
    from cbm.models.devices import model_device, to_device

    device = model_device(model)
    probs, labels = [], []
    for batch in batches:
        batch = to_device(batch, device)
        probs.append(model.encode(batch["x"]).probs.float())
        labels.append(batch["c"].float())
    if not probs:
        raise ValueError(f"encoding.split '{cfg.split}' is empty: no outputs to measure the {cfg.kind} levels on")
    p, c = torch.cat(probs), torch.cat(labels)
    if cfg.kind == "percentile":
        q = torch.tensor(cfg.percentiles, device=p.device, dtype=p.dtype) / 100
        return torch.quantile(p, q, dim=0)
    levels = torch.tensor([0.0, 1.0], device=p.device, dtype=p.dtype)[:, None].repeat(1, p.shape[1])
    for v in (0, 1):  # median per concept over the rows annotated v (NaN where there are none)
        masked = torch.where((c > THRESHOLD) == bool(v), p, torch.nan)
        med = masked.nanmedian(dim=0).values
        levels[v] = torch.where(med.isnan(), levels[v], med)
    return levels


def encode_values(values: Tensor, levels: Tensor | None) -> Tensor:
    """The value the model reads for each answer: ``levels[1]`` where the answer is present,
    ``levels[0]`` where absent (``levels=None``: the answers themselves)."""
    if levels is None:
        return values
    levels = levels.to(values)
    return torch.where(values > THRESHOLD, levels[1], levels[0])
