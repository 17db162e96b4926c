"""Responsiveness of one subset: every requestable concept at once (concept-benchmark 0.4.1's KFlip
at ``k = max``, which evaluates only that subset: ``use_exact_k`` with ``k = m``).

``resp(U) = sum_{a in {0,1}^|U|} p(a | U) [y_hat != y_hat^a]`` over the universe ``U``: its ``2^|U|``
assignments go through the model's ``pair_logits`` hook as one shared :class:`PairBlock`, in chunks
of examples that bound memory (a hard-readout CBM answers each from its tabulated head).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from cbm.interventions.responsiveness.common import batch_step, state_row_bytes, trim_state
from cbm.interventions.responsiveness.exact import predicted
from cbm.interventions.responsiveness.priors import EmpiricalPrior, Prior
from cbm.interventions.responsiveness.tables import assignment_bits
from cbm.models.hooks import PairBlock
from cbm.models.state import ConceptState

#: Largest universe evaluated in full (``2^20`` assignments per example); KFlip's default enumerates up to 2^12.
MAX_WHOLE_CONCEPTS = 20


def whole_block(m: int, universe: Sequence[int], device: torch.device) -> PairBlock:
    """Every assignment of ``universe`` as one shared block: pair ``a`` sets concept ``universe[u]`` to bit ``u`` of ``a``."""
    uni = torch.tensor(list(universe), dtype=torch.long, device=device)
    bits = assignment_bits(len(uni), device)  # [A, s]
    a = bits.shape[0]
    members = uni[None].expand(a, -1)
    mask = torch.zeros(a, m, dtype=torch.bool, device=device)
    mask[:, uni] = True
    values = torch.zeros(a, m, device=device)
    values[:, uni] = bits.float()
    return PairBlock(mask[None], values[None], members[None].contiguous(), bits[None])


def assignment_weights(prior: Prior, state: ConceptState, universe: Sequence[int], bits: Tensor) -> Tensor:
    """``[B|1, A]`` prior probability of every assignment ``bits [A, s]`` of ``universe``."""
    uni = list(universe)
    if isinstance(prior, EmpiricalPrior):
        labels = prior.labels.to(bits.device)[:, uni]  # [N, s]
        codes = (labels << torch.arange(len(uni), device=bits.device)).sum(1)
        return (torch.bincount(codes, minlength=bits.shape[0]).float() / len(labels))[None]
    p = prior.value_probs(state)[:, uni, :]  # [B, s, 2]
    w = torch.ones(state.batch_size, bits.shape[0], device=bits.device)
    for u in range(len(uni)):
        w *= p[:, u, :].index_select(1, bits[:, u])
    return w


@torch.no_grad()
def whole_responsiveness(model, state: ConceptState, universe: Sequence[int], prior: Prior, available: Tensor, chunk_mb: float) -> Tensor:
    """``[B]`` responsiveness of the whole ``universe``; ``-inf`` in rows where one of its concepts
    is not ``available`` (``[B, m]`` bool)."""
    if not 0 < len(universe) <= MAX_WHOLE_CONCEPTS:
        raise ValueError(f"the whole-set responsiveness needs 1 to {MAX_WHOLE_CONCEPTS} requestable concepts, got {len(universe)}")
    dev = state.probs.device
    block = whole_block(state.n_concepts, universe, dev)
    yhat = predicted(model.predict(state))
    weights = assignment_weights(prior, state, universe, block.bits[0])
    st = trim_state(model, state)
    a = block.n_pairs
    step = batch_step(a, model.pair_bytes(st) or state_row_bytes(st), chunk_mb)
    resp = torch.empty(state.batch_size, device=dev)
    for r0 in range(0, state.batch_size, step):
        rows = slice(r0, r0 + step)
        flips = predicted(model.pair_logits(st.index(rows), block)) != yhat[rows, None]  # [n, A]
        w = weights if weights.shape[0] == 1 else weights[rows]
        resp[rows] = (flips.float() * w).sum(1)
    uni = torch.tensor(list(universe), dtype=torch.long, device=dev)
    return resp.masked_fill(~available.index_select(1, uni).all(1), float("-inf"))
