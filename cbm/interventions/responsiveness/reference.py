"""The plain reference: a Python loop over subsets (tests, the benchmark's baseline)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import product

import torch
from torch import Tensor

from cbm.interventions.responsiveness.priors import EmpiricalPrior, IndependentPrior, Prior
from cbm.models.state import ConceptState


@torch.no_grad()
def responsiveness_loop(model, state: ConceptState, subsets: Iterable[Sequence[int]], prior: Prior | None = None) -> Tensor:
    """Reference ``[B, len(subsets)]`` responsiveness: a plain Python loop over subsets, each
    subset's ``2^|S|`` assignments sent through ``intervene`` + ``predict`` as one batch."""
    prior = prior or IndependentPrior()
    b, m = state.probs.shape
    dev = state.probs.device
    yhat = model.predict(state).argmax(1)
    cols = []
    for subset in subsets:
        s = list(subset)
        bits = torch.tensor(list(product([0, 1], repeat=len(s))), dtype=torch.float32, device=dev)  # [A, s]
        a = len(bits)
        rep = state.repeat_interleave(a)
        mask = torch.zeros(b * a, m, dtype=torch.bool, device=dev)
        mask[:, s] = True
        values = torch.zeros(b * a, m, device=dev)
        values[:, s] = bits.repeat(b, 1)
        pred = model.predict(model.intervene(rep, mask, values.to(state.probs.dtype))).argmax(1).view(b, a)
        flip = (pred != yhat[:, None]).float()
        if isinstance(prior, EmpiricalPrior):
            lab = prior.labels.to(dev)[:, s].float()  # [N, s]
            w = (lab[None, :, :] == bits[:, None, :]).all(2).float().mean(1)[None]  # [1, A]
        else:
            p = state.probs[:, s].float()[:, None, :]  # [B, 1, s]
            w = torch.where(bits[None] > 0.5, p, 1.0 - p).prod(2)  # [B, A]
        cols.append((w * flip).sum(1))
    return torch.stack(cols, dim=1) if cols else torch.zeros(b, 0, device=dev)
