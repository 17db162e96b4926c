"""``expert``: a simulated human who gives the true value with a given accuracy (overall or per
concept). Answers are a deterministic function of ``(seed, example id, concept)``, so the same
expert gives the same answer to the same question whichever policy, budget or batch asked it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cbm.interventions.interveners.base import Batch
from cbm.interventions.interveners.oracle import OracleIntervener

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from cbm.interventions.context import BuildContext
    from cbm.models.state import ConceptState

_M32 = 0xFFFFFFFF


def _mul32(x: Tensor, c: int) -> Tensor:
    """``(x * c) mod 2^32`` for ``0 <= x < 2^32`` without int64 overflow."""
    lo, hi = c & 0xFFFF, c >> 16
    return (x * lo + (((x * hi) & 0xFFFF) << 16)) & _M32


def _hash32(x: Tensor) -> Tensor:
    """A 32-bit integer mixer (Wellons' ``lowbias32``) on int64 tensors holding 32-bit values."""
    x = x & _M32
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def uniform_hash(seed: int, keys: Tensor) -> Tensor:
    """Uniform ``[0, 1)`` floats that are a pure function of ``(seed, key)`` (int64 ``keys``, any device)."""
    import torch

    keys = keys.long()
    lo, hi = seed & _M32, ((seed >> 32) & _M32) ^ 0x5BD1E995
    s = int(_hash32(torch.tensor(lo)) ^ _hash32(torch.tensor(hi)))
    x = _hash32((keys & _M32) ^ s)
    x = _hash32(x ^ ((keys >> 32) & _M32) ^ 0x27D4EB2F)
    return x.double().div(2.0**32).float()


class ExpertIntervener:
    """A simulated expert who gives the true value with probability ``accuracy`` and the
    opposite value otherwise (a continuous concept ``v``: ``1 - v``). A categorical concept
    (``groups``, its columns) is one answer: right with its first column's accuracy, otherwise one
    of its other values ("none" included) drawn uniformly.

    Parameters
    ----------
    accuracy : one probability for every concept, or one per concept (``[m]``).
    seed : answers are a function of ``(seed, batch['idx'], concept)``; without an ``idx`` in
        the batch they come from a generator seeded with ``seed`` (then they depend on the order
        of the calls).

    Examples
    --------
    >>> import torch
    >>> from cbm.models.state import ConceptState
    >>> batch = {"c": torch.ones(4, 2), "idx": torch.arange(4)}
    >>> state = ConceptState(logits=torch.zeros(4, 2), probs=torch.full((4, 2), 0.5))
    >>> ExpertIntervener(accuracy=1.0)(batch, state, torch.ones(4, 2, dtype=torch.bool)).tolist()
    [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0]]
    """

    @dataclass
    class Config:
        #: Probability that the simulated expert gives the true value.
        accuracy: float = 0.8
        #: Per-concept overrides, by concept name.
        per_concept: dict[str, float] = field(default_factory=dict)

        def __post_init__(self) -> None:
            for name, a in {"accuracy": self.accuracy, **self.per_concept}.items():
                if not 0.0 <= a <= 1.0:
                    raise ValueError(f"expert accuracy for {name} must be in [0, 1], got {a}")

    @classmethod
    def from_config(cls, cfg: Config, ctx: BuildContext) -> ExpertIntervener:
        expert = cls.from_names(list(ctx.concept_names), cfg.accuracy, cfg.per_concept, ctx.seed)
        types = getattr(ctx.model, "types", None)
        expert.groups = tuple(types.groups) if types is not None else ()
        return expert

    #: Column indices of each categorical concept (answered as one; see the class doc).
    groups: tuple[tuple[int, ...], ...] = ()

    def __init__(self, accuracy: float | Sequence[float] | Tensor = 0.8, seed: int = 0):
        import torch

        acc = torch.as_tensor(accuracy, dtype=torch.float32)
        if acc.ndim > 1 or bool(((acc < 0) | (acc > 1)).any()):
            raise ValueError(f"expert accuracy must be in [0, 1] (one value or one per concept), got {accuracy!r}")
        self.accuracy = acc
        self.seed = seed
        self._generator = torch.Generator().manual_seed(seed)

    @classmethod
    def from_names(
        cls, concept_names: Sequence[str], accuracy: float = 0.8, per_concept: Mapping[str, float] | None = None, seed: int = 0
    ) -> ExpertIntervener:
        """Expert with a default ``accuracy`` and overrides ``per_concept`` by concept name."""
        import torch

        acc = torch.full((len(concept_names),), float(accuracy))
        for name, value in (per_concept or {}).items():
            if name not in concept_names:
                raise ValueError(f"expert.per_concept: unknown concept '{name}' (have {list(concept_names)})")
            acc[list(concept_names).index(name)] = float(value)
        return cls(acc, seed)

    def _uniform(self, batch: Batch, shape: tuple[int, int], device: torch.device, salt: int = 0) -> Tensor:
        """``[B,m]`` uniform draws, a function of ``(seed + salt, example id, concept)`` (module doc)."""
        import torch

        b, m = shape
        if "idx" in batch:
            keys = batch["idx"].to(device).long()[:, None] * m + torch.arange(m, device=device)[None]
            return uniform_hash(self.seed + salt, keys)
        return torch.rand((b, m), generator=self._generator).to(device)

    def correct(self, batch: Batch, shape: tuple[int, int], device: torch.device) -> Tensor:
        """``[B,m]`` bool: whether the expert answers each (example, concept) correctly."""
        acc = self.accuracy.to(device)
        if acc.ndim == 1 and acc.shape[0] != shape[1]:
            raise ValueError(f"expert has {acc.shape[0]} per-concept accuracies but the model has {shape[1]} concepts")
        return self._uniform(batch, shape, device) < acc

    def __call__(self, batch: Batch, state: ConceptState, mask: Tensor) -> Tensor:
        import torch

        truth = OracleIntervener()(batch, state, mask)
        ok = self.correct(batch, tuple(truth.shape), truth.device)
        out = torch.where(ok, truth, 1.0 - truth)
        if self.groups:
            other = self._uniform(batch, tuple(truth.shape), truth.device, salt=1)
            for cols in self.groups:
                idx = list(cols)
                n = len(idx)
                value = torch.cat([truth[:, idx], (1 - truth[:, idx].sum(1, keepdim=True)).clamp_min(0)], 1).argmax(1)
                wrong = (value + 1 + (other[:, idx[0]] * n).long().clamp_max(n - 1)) % (n + 1)  # another of the n + 1
                answer = torch.where(ok[:, idx[0]], value, wrong)
                out[:, idx] = torch.nn.functional.one_hot(answer, n + 1)[:, :n].to(out.dtype)
        return out
