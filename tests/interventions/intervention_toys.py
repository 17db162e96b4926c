"""Tiny hand-made models and a brute-force responsiveness reference for the intervention tests."""

from __future__ import annotations

from itertools import combinations, product

import torch
from torch import Tensor, nn

from cbm.models.base import replace_concepts
from cbm.models.hooks import InterventionHooks
from cbm.models.state import ConceptState


class ToyModel(nn.Module, InterventionHooks):
    """``x`` are concept logits; ``intervene`` replaces probabilities; ``predict = head(probs)``.

    ``fast=True`` exposes the ``additive_logits`` hook when the head is ``nn.Linear``.
    """

    has_concepts = True

    def __init__(self, head: nn.Module, n_concepts: int, n_classes: int, fast: bool = True):
        super().__init__()
        self.head = head
        self.n_concepts = n_concepts
        self.n_classes = n_classes
        self.fast = fast

    def encode(self, x: Tensor) -> ConceptState:
        return ConceptState(logits=x, probs=torch.sigmoid(x), extras={"features": x * 2.0})

    def intervene(self, state: ConceptState, mask: Tensor, values: Tensor) -> ConceptState:
        assert mask.shape == state.probs.shape == values.shape
        return replace_concepts(state, mask, values)

    def predict(self, state: ConceptState) -> Tensor:
        return self.head(state.probs)

    def forward(self, x: Tensor):
        state = self.encode(x)
        return state, self.predict(state)

    def additive_logits(self, state: ConceptState):
        if self.fast and isinstance(self.head, nn.Linear):
            p = state.probs
            dv = torch.stack([-p, 1.0 - p], dim=2)
            return self.predict(state), dv[..., None] * self.head.weight.T[None, :, None, :]
        return None

    def intervention_extras(self):
        return frozenset() if self.fast else None


class FnHead(nn.Module):
    """A head given as a function of the probabilities (for hand-computed cases)."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, p: Tensor) -> Tensor:
        return self.fn(p)


class ToyCEM(nn.Module, InterventionHooks):
    """CEM-like semantics: per-concept embeddings mixed by the probability; the head reads the
    mixed embeddings (from ``state.extras``), so the generic path must carry the extras."""

    has_concepts = True

    def __init__(self, n_concepts: int, n_classes: int, dim: int = 3, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.n_concepts, self.n_classes = n_concepts, n_classes
        self.pos = nn.Parameter(torch.randn(n_concepts, dim, generator=g))
        self.neg = nn.Parameter(torch.randn(n_concepts, dim, generator=g))
        self.head = nn.Sequential(nn.Linear(n_concepts * dim, 8), nn.Tanh(), nn.Linear(8, n_classes))
        with torch.no_grad():
            for p in self.head.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 2)

    def encode(self, x: Tensor) -> ConceptState:
        p = torch.sigmoid(x)
        scale = 1.0 + 0.1 * torch.arange(x.shape[0], dtype=x.dtype)[:, None, None]  # per-example extras
        return ConceptState(logits=x, probs=p, extras={"scale": scale.expand(-1, self.n_concepts, 1).clone()})

    def intervene(self, state: ConceptState, mask: Tensor, values: Tensor) -> ConceptState:
        return replace_concepts(state, mask, values)

    def predict(self, state: ConceptState) -> Tensor:
        p = state.probs[..., None]
        emb = (p * self.pos + (1 - p) * self.neg) * state.extras["scale"]
        return self.head(emb.flatten(1))

    def forward(self, x: Tensor):
        state = self.encode(x)
        return state, self.predict(state)


def random_linear(m: int, c: int, seed: int, fast: bool = True, scale: float = 2.0) -> ToyModel:
    g = torch.Generator().manual_seed(seed)
    head = nn.Linear(m, c)
    with torch.no_grad():
        head.weight.copy_(torch.randn(c, m, generator=g) * scale)
        head.bias.copy_(torch.randn(c, generator=g))
    return ToyModel(head, m, c, fast=fast).eval()


def random_mlp(m: int, c: int, seed: int) -> ToyModel:
    g = torch.Generator().manual_seed(seed)
    head = nn.Sequential(nn.Linear(m, 6), nn.ReLU(), nn.Linear(6, c))
    with torch.no_grad():
        for p in head.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 1.5)
    return ToyModel(head, m, c, fast=False).eval()


def brute_resp(model, st: ConceptState, subset: tuple, labels: Tensor | None = None) -> float:
    """``resp(subset)`` of a one-example state, one assignment at a time."""
    m = st.probs.shape[1]
    yhat = int(model.predict(st).argmax(1))
    total = 0.0
    for a in product([0, 1], repeat=len(subset)):
        mask = torch.zeros(1, m, dtype=torch.bool)
        values = torch.zeros(1, m)
        for j, v in zip(subset, a):
            mask[0, j] = True
            values[0, j] = float(v)
        pred = int(model.predict(model.intervene(st, mask, values)).argmax(1))
        if labels is None:
            w = 1.0
            for j, v in zip(subset, a):
                pj = float(st.probs[0, j])
                w *= pj if v else 1.0 - pj
        else:
            rows = torch.ones(len(labels), dtype=torch.bool)
            for j, v in zip(subset, a):
                rows &= labels[:, j] == v
            w = float(rows.float().mean())
        total += w * (pred != yhat)
    return total


def brute_force(model, state: ConceptState, k: int, available: Tensor, labels: Tensor | None = None) -> list[dict]:
    """Per example: ``{subset (tuple): resp}`` for every subset of the available concepts with
    ``1 <= |S| <= k``, one example and one assignment at a time (independent prior unless
    ``labels`` are given, then the empirical joint)."""
    out = []
    m = state.probs.shape[1]
    for b in range(state.probs.shape[0]):
        st = state.index(slice(b, b + 1))
        avail = [j for j in range(m) if bool(available[b, j])]
        out.append({S: brute_resp(model, st, S, labels) for s in range(1, k + 1) for S in combinations(avail, s)})
    return out


def chain_matches_brute_force(model, state: ConceptState, order: Tensor, values: Tensor, labels=None, atol=1e-5) -> bool:
    """Every prefix of a greedy chain has the responsiveness the chain reports."""
    for i in range(order.shape[0]):
        st = state.index(slice(i, i + 1))
        for t in range(order.shape[1]):
            subset = tuple(sorted(order[i, : t + 1].tolist()))
            if abs(brute_resp(model, st, subset, labels) - float(values[i, t])) > atol:
                return False
    return True


def brute_best(res: dict, k: int, tol: float = 1e-6) -> tuple[tuple, float]:
    """``argmax_{|S|<=k}`` with the engine's tie rule (smaller, then lexicographically first)."""
    items = [(S, r) for S, r in res.items() if len(S) <= k]
    if not items:
        return (), float("-inf")
    best = max(r for _, r in items)
    cands = sorted((S for S, r in items if r >= best - tol), key=lambda S: (len(S), S))
    return cands[0], best
