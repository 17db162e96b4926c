"""The concept state every architecture's ``encode`` returns.

Every tensor held here has the batch as its first dimension, so the intervention
engine can gather, repeat and slice states without knowing the architecture.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace

import torch
from torch import Tensor

#: ``extras`` key of a model whose ``predict`` would otherwise minimise (ECBM): ``[B]`` bool, the row
#: is already the result of that minimisation. Editing the concepts (:func:`replace_concepts`) drops it.
MINIMISED = "minimised"


@dataclass
class ConceptState:
    """Concept predictions of a batch plus the architecture's own state.

    Attributes
    ----------
    logits : ``[B,m]`` concept logits.
    probs : ``[B,m]`` concept probabilities, what the head sees (after interventions).
    intervened : ``[B,m]`` bool, concepts whose value a human supplied.
    uncertainty : ``[B,m]`` optional per-concept uncertainty (ProbCBM variance); ``None`` when the
        architecture has none (policies then fall back to ``p(1-p)``).
    extras : architecture-specific tensors, batch-first (CEM embeddings, ProbCBM samples,
        ECBM features ...).
    """

    logits: Tensor
    probs: Tensor
    intervened: Tensor | None = None
    uncertainty: Tensor | None = None
    extras: dict[str, Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.intervened is None:
            self.intervened = torch.zeros_like(self.probs, dtype=torch.bool)

    @property
    def batch_size(self) -> int:
        return self.probs.shape[0]

    @property
    def n_concepts(self) -> int:
        return self.probs.shape[1]

    def map(self, fn: Callable[[Tensor], Tensor]) -> ConceptState:
        """Apply ``fn`` to every tensor (all are batch-first)."""
        kw = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "extras":
                kw["extras"] = {k: fn(t) for k, t in v.items()}
            elif v is not None:
                kw[f.name] = fn(v)
        return replace(self, **kw)

    def index(self, idx: Tensor | slice) -> ConceptState:
        """Rows ``idx`` of the batch."""
        return self.map(lambda t: t[idx])

    def repeat_interleave(self, n: int) -> ConceptState:
        """Each row repeated ``n`` times consecutively: ``[B,...] -> [B*n,...]``."""
        return self.map(lambda t: t.repeat_interleave(n, dim=0))

    def to(self, device: torch.device | str) -> ConceptState:
        return self.map(lambda t: t.to(device))

    def detach(self) -> ConceptState:
        return self.map(lambda t: t.detach())

    @staticmethod
    def cat(states: list[ConceptState]) -> ConceptState:
        """Concatenate states along the batch (extras: the keys every state has; a value a model
        computes on demand, such as ProbCBM's class uncertainty, is then recomputed when asked for)."""
        first = states[0]
        kw = {}
        for f in fields(first):
            vals = [getattr(s, f.name) for s in states]
            if f.name == "extras":
                kw["extras"] = {k: torch.cat([v[k] for v in vals]) for k in first.extras if all(k in v for v in vals)}
            elif vals[0] is not None:
                kw[f.name] = torch.cat(vals)
        return replace(first, **kw)
