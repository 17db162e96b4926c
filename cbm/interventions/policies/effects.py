"""What a policy asks of the model beyond its state: the task prediction with one concept set to
each of its values, for every concept at once (through the model's ``pair_logits`` hook, so each
architecture answers with its fastest exact path), chunked to a memory budget."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from cbm.interventions.responsiveness.common import batch_step, state_row_bytes, trim_state
from cbm.models.hooks import PairBlock

if TYPE_CHECKING:
    from torch import Tensor

    from cbm.models.state import ConceptState


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
