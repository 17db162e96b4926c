"""The optional hooks the intervention engine calls on every model, declared once with their
generic defaults: an architecture overrides a hook only when it can answer faster, exactly.

* :meth:`InterventionHooks.intervention_extras` — the ``state.extras`` that ``intervene`` /
  ``predict`` read (the engine drops the rest before expanding a state);
* :meth:`InterventionHooks.additive_logits` — ``(base, terms)`` when the task logits after an
  intervention are ``base + sum_{i in S} terms[:, i, a_i]`` (a head linear in the concepts):
  the engine's fastest path;
* :meth:`InterventionHooks.pair_logits` — the task logits of every example under every
  intervention of a :class:`PairBlock`; the default runs ``intervene`` + ``predict`` on the
  expanded rows, architectures override it with an equivalent that skips work.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import Tensor, nn

from cbm.models.state import ConceptState


@dataclass(frozen=True)
class PairBlock:
    """``P`` interventions of the same size ``s``, shared by every example (leading dim 1) or one
    set per example (leading dim ``B``): pair ``p`` sets concepts ``members[., p]`` to ``bits[., p]``.

    ``mask [B|1, P, m]`` bool and ``values [B|1, P, m]`` are the dense form (``intervene``'s
    arguments); ``members [B|1, P, s]`` and ``bits [B|1, P, s]`` (long) the sparse one.
    """

    mask: Tensor
    values: Tensor
    members: Tensor
    bits: Tensor

    @property
    def n_pairs(self) -> int:
        return self.mask.shape[1]

    @property
    def size(self) -> int:
        return self.members.shape[2]

    def slice(self, start: int, stop: int) -> PairBlock:
        """Pairs ``start:stop``."""
        s = slice(start, stop)
        return PairBlock(self.mask[:, s], self.values[:, s], self.members[:, s], self.bits[:, s])

    def rows(self, idx: slice) -> PairBlock:
        """The per-example pairs of rows ``idx`` (a no-op for shared pairs)."""
        if self.mask.shape[0] == 1:
            return self
        return PairBlock(self.mask[idx], self.values[idx], self.members[idx], self.bits[idx])


def take_codes(table: Tensor, codes: Tensor) -> Tensor:
    """``table [B, K, ...]`` at ``codes [1|B, P]`` -> ``[B, P, ...]`` (shared codes: one row gather)."""
    if codes.shape[0] == 1:
        return table.index_select(1, codes[0])
    return take_rows(table.expand(codes.shape[0], *table.shape[1:]), codes)


def take_rows(table: Tensor, codes: Tensor) -> Tensor:
    """``table [B, K, ...]`` at per-example ``codes [B, P]`` -> ``[B, P, ...]``: one ``index_select``
    of whole rows of the flattened ``[B*K, ...]`` table (a ``gather`` with an index expanded over
    the trailing dims reads one index per element: several times slower)."""
    b, k = table.shape[:2]
    flat = table.reshape(b * k, *table.shape[2:])
    offset = torch.arange(b, device=codes.device).mul_(k).unsqueeze(1)
    return flat.index_select(0, (codes + offset).reshape(-1)).view(*codes.shape, *table.shape[2:])


def additive_pair_logits(
    pre: Tensor, move: Tensor, probs: Tensor, pairs: PairBlock, rest: Callable[[Tensor], Tensor]
) -> Tensor:
    """Logits ``[B, P, C]`` of a head whose first layer is affine in every concept's probability.

    ``pre [B, F]``: the first layer's output for the state; ``move [B|1, m, F]``: its change per
    unit of concept ``i``'s probability; ``rest``: the layers after it. Pair ``(S, a)`` then has
    ``pre + sum_{i in S} (a_i - p_i) move_i``: ``|S|`` row gathers per pair instead of the whole
    first layer on an expanded copy of the state.
    """
    dv = torch.stack([-probs, 1.0 - probs], dim=2)  # [B, m, 2]: a - p
    table = (dv.unsqueeze(-1) * move.unsqueeze(2)).flatten(1, 2)  # [B, 2m, F] at code 2i + a
    codes = 2 * pairs.members + pairs.bits
    if codes.shape[0] == 1:  # shared pairs: gather whole [B, F] slabs (pair-major), transpose at the end
        slabs = table.transpose(0, 1).contiguous()  # [2m, B, F]
        acc = slabs.index_select(0, codes[0, :, 0])
        for u in range(1, pairs.size):
            acc += slabs.index_select(0, codes[0, :, u])
        return rest(acc.add_(pre.unsqueeze(0)).transpose(0, 1))  # rest sees [B, P, F]
    acc = take_codes(table, codes[..., 0])
    for u in range(1, pairs.size):
        acc += take_codes(table, codes[..., u])
    return rest(acc.add_(pre.unsqueeze(1)))


def additive_pair_bytes(head: nn.Module, n_classes: int) -> int | None:
    """Bytes per (example, pair) of :func:`additive_pair_logits` on ``head`` (its first layer's
    outputs, the rest's activations and the logits, with room for temporaries)."""
    split = first_linear(head)
    if split is None:
        return None
    widths = [m.out_features for m in head.modules() if isinstance(m, nn.Linear)]
    return 4 * 3 * (sum(widths) + n_classes)


def first_linear(head: nn.Module) -> tuple[nn.Linear, Callable[[Tensor], Tensor]] | None:
    """``(first Linear layer, the rest)`` of a head that is a Linear or a Sequential starting with one."""
    if isinstance(head, nn.Linear):
        return head, lambda z: z
    if isinstance(head, nn.Sequential) and len(head) and isinstance(head[0], nn.Linear):
        return head[0], head[1:]
    return None


def expand_rows(state: ConceptState, n: int) -> ConceptState:
    """Each row of ``state`` repeated ``n`` times consecutively: ``[B, ...] -> [B*n, ...]``."""
    return state.map(lambda t: t[:, None].expand(t.shape[0], n, *t.shape[1:]).reshape(t.shape[0] * n, *t.shape[1:]))


class InterventionHooks:
    """Mixin with the engine's optional hooks and their generic defaults (see the module docstring)."""

    def intervention_extras(self) -> frozenset[str] | None:
        """Names of the ``state.extras`` that ``intervene`` / ``predict`` read; ``None``: all of them."""
        return None

    def additive_logits(self, state: ConceptState) -> tuple[Tensor, Tensor] | None:
        """``(base [B,C], terms [B,m,2,C])`` with ``predict(intervene(state, S, a)) ==
        base + sum_{i in S} terms[:, i, a_i]`` for every subset ``S`` of the not-yet-intervened
        concepts, or ``None`` when the head is not additive in the concepts."""
        return None

    def pair_bytes(self, state: ConceptState) -> int | None:
        """Working memory (bytes) of one (example, pair) in ``pair_logits``, which the engine sizes its
        chunks by; ``None``: the cost of an expanded state row (the generic ``pair_logits``)."""
        return None

    def pair_logits(self, state: ConceptState, pairs: PairBlock) -> Tensor:
        """``[B, P, C]`` task logits of every example under every pair of ``pairs``.

        Generic: every (example, pair) row goes through ``intervene`` and ``predict``.
        """
        b, p = state.batch_size, pairs.n_pairs
        m = state.n_concepts
        rows = expand_rows(state, p)
        mask = pairs.mask.expand(b, p, m).reshape(b * p, m)
        values = pairs.values.expand(b, p, m).reshape(b * p, m).to(state.probs.dtype)
        return self.predict(self.intervene(rows, mask, values)).view(b, p, -1)  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------- chunked evaluation
def trim_state(model, state: ConceptState) -> ConceptState:
    """``state`` without the extras that ``intervene`` / ``predict`` never read (the model's
    ``intervention_extras`` hook); saves memory when rows are expanded."""
    keep = model.intervention_extras()
    if keep is None:
        return state
    return replace(state, extras={k: v for k, v in state.extras.items() if k in keep})


def state_row_bytes(state: ConceptState) -> int:
    """Rough bytes one expanded row of ``state`` costs through intervene + predict."""
    per = 0
    for t in (state.logits, state.probs, state.intervened, state.uncertainty, *state.extras.values()):
        if t is not None:
            per += t[0].numel() * t.element_size() if t.shape[0] else 0
    m = state.probs.shape[1]
    return 3 * per + 16 * m + 64


def batch_step(n_rows_per_example: int, bytes_per_row: int, chunk_mb: float) -> int:
    """Examples per chunk so that ``n_rows_per_example`` rows of ``bytes_per_row`` fit ``chunk_mb``."""
    return max(1, int(chunk_mb * 2**20) // max(1, n_rows_per_example * bytes_per_row))


def single_concept_logits(model, state: ConceptState, chunk_mb: float = 256.0) -> Tensor:
    """``[B, m, 2, C]``: the task logits of every example with concept ``i`` set to ``v`` (0, 1) on
    top of ``state`` (the other concepts as they are)."""
    b, m = state.batch_size, state.n_concepts
    dev = state.probs.device
    members = torch.arange(m, device=dev).repeat_interleave(2)[None, :, None]  # [1, 2m, 1]: concept
    bits = torch.arange(2, device=dev).repeat(m)[None, :, None]  # [1, 2m, 1]: value
    mask = torch.zeros(1, 2 * m, m, dtype=torch.bool, device=dev).scatter_(2, members, True)
    values = torch.zeros(1, 2 * m, m, dtype=state.probs.dtype, device=dev).scatter_(2, members, bits.to(state.probs.dtype))
    pairs = PairBlock(mask, values, members, bits)
    st = trim_state(model, state)
    step = batch_step(2 * m, model.pair_bytes(st) or state_row_bytes(st), chunk_mb)
    with torch.no_grad():
        if step >= b:
            out = model.pair_logits(st, pairs)
        else:
            out = torch.cat([model.pair_logits(st.index(slice(e, e + step)), pairs) for e in range(0, b, step)])
    return out.view(b, m, 2, -1)
