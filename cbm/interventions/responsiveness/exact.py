"""Exact responsiveness of every subset of a table: the additive fast path when the model's head
allows it, else every (example, subset, assignment) through the model's ``pair_logits`` hook (the
architecture's own equivalent of ``intervene`` + ``predict``, batched over pairs), in chunks that
bound memory. No Python loop runs per subset or per assignment."""

from __future__ import annotations

import torch
from torch import Tensor

from cbm.interventions.responsiveness.additive import exact_additive
from cbm.interventions.responsiveness.common import (
    additive,
    batch_step,
    empty_resp,
    state_row_bytes,
    trim_state,
)
from cbm.interventions.responsiveness.priors import IndependentPrior, Prior
from cbm.interventions.responsiveness.search import DEFAULT_CHUNK_MB
from cbm.interventions.responsiveness.tables import Level, SubsetTable
from cbm.models.state import ConceptState


@torch.no_grad()
def subset_responsiveness(
    model,
    state: ConceptState,
    table: SubsetTable,
    prior: Prior | None = None,
    available: Tensor | None = None,
    *,
    fast_path: str = "auto",
    chunk_mb: float = DEFAULT_CHUNK_MB,
) -> Tensor:
    """``[B, Q]`` responsiveness of every subset of ``table``; ``-inf`` where a subset holds a
    concept that is not ``available`` (``[B,m]`` bool, default: not yet intervened).

    ``fast_path="off"`` skips the additive path (the model's ``pair_logits`` is used)."""
    prior = prior or IndependentPrior()
    if available is None:
        available = ~state.intervened
    logits = model.predict(state)
    lin = additive(model, state, logits, fast_path)
    if lin is not None:
        resp = exact_additive(lin, state, table, prior, chunk_mb)
    else:
        resp = exact_pairs(model, state, logits.argmax(1), table, prior, chunk_mb)
    uni = torch.tensor(table.universe, dtype=torch.long, device=available.device)
    if bool(available.index_select(1, uni).all()):
        return resp  # every subset of the table is available in every row
    return resp.masked_fill(~table.valid(available), float("-inf"))


def pair_weights(prior: Prior, state: ConceptState, table: SubsetTable, level: Level) -> Tensor:
    """``[P, B|1]`` (pair-major) prior probability of every pair's assignment given its subset."""
    if not isinstance(prior, IndependentPrior):
        return prior.level_weights(table, level)[:, None]
    pairs = table.pair_block(level)
    slabs = prior.value_probs(state).flatten(1).T.contiguous()  # [2m, B]: (concept, value) rows
    codes = 2 * pairs.members[0] + pairs.bits[0]  # [P, s]
    w = slabs.index_select(0, codes[:, 0])
    for u in range(1, pairs.size):
        w *= slabs.index_select(0, codes[:, u])
    return w


def predicted(logits: Tensor) -> Tensor:
    """The predicted class of logits ``[..., C]`` (ties: the first class; two classes: one compare)."""
    if logits.shape[-1] == 2:
        return torch.gt(logits[..., 1], logits[..., 0]).long()
    return logits.argmax(-1)


def exact_pairs(model, state: ConceptState, yhat: Tensor, table: SubsetTable, prior: Prior, chunk_mb: float) -> Tensor:
    """Every (example, pair) through ``model.pair_logits``, in blocks of examples x pair ranges."""
    b = state.batch_size
    resp = empty_resp(state, table.n_subsets)
    if table.n_subsets == 0:
        return resp
    st = trim_state(model, state)
    row_bytes = model.pair_bytes(st) or state_row_bytes(st)
    per_call = batch_step(1, row_bytes, chunk_mb)  # (example, pair) rows per call
    p_max = max(lv.n_pairs for lv in table.levels)
    bc = max(1, per_call // p_max)
    for e0 in range(0, b, bc):  # examples outer: a model may cache per-state work across levels
        rows = slice(e0, e0 + bc)
        sub = st.index(rows)
        for lv in table.levels:
            pairs = table.pair_block(lv)
            n_pairs, q, a = lv.n_pairs, lv.n_subsets, lv.n_assignments
            pc = min(n_pairs, per_call)
            flips = torch.empty(n_pairs, sub.batch_size, device=yhat.device)  # pair-major, like the weights
            for p0 in range(0, n_pairs, pc):
                pred = predicted(model.pair_logits(sub, pairs.slice(p0, p0 + pc))).T  # [n, bc]
                torch.ne(pred, yhat[None, rows], out=flips[p0 : p0 + pc])
            w = pair_weights(prior, sub, table, lv)
            resp[rows, lv.offset : lv.offset + q] = flips.mul_(w).view(q, a, -1).sum(1).T
    return resp
