"""Greedy search: grow ``S`` one concept at a time by responsiveness, vectorised over examples x
candidate concepts x assignments (enumerated up to ``max_assignments``, sampled from the prior
beyond, with common random numbers across candidates and steps)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from cbm.interventions.responsiveness.common import additive, batch_step, state_row_bytes, trim_state
from cbm.interventions.responsiveness.priors import EmpiricalPrior, IndependentPrior, Prior
from cbm.interventions.responsiveness.search import DEFAULT_CHUNK_MB, DEFAULT_MAX_ASSIGNMENTS, first_within
from cbm.interventions.responsiveness.tables import assignment_bits
from cbm.models.hooks import PairBlock
from cbm.models.state import ConceptState


def greedy_search(extend: Callable[[Tensor, Tensor, Tensor], Tensor], available: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Generic greedy maximisation of a set function, batched over rows.

    ``extend(base, chosen, cand) -> [B, m]`` scores ``S_b + {j}`` for every concept ``j``, given
    the concepts chosen so far (``base [B, t-1]`` in the order chosen, ``m`` for "none";
    ``chosen [B, m]`` bool) and the candidates ``cand [B, m]``. Step ``t`` adds the best
    candidate (ties: lowest index). Returns ``order [B,k]`` (``-1`` when no candidate was left)
    and ``values [B,k]`` (objective of the first ``t+1`` chosen, ``-inf`` when none).
    """
    b, m = available.shape
    dev = available.device
    order = torch.full((b, k), m, dtype=torch.long, device=dev)
    values = torch.full((b, k), float("-inf"), device=dev)
    chosen = torch.zeros(b, m, dtype=torch.bool, device=dev)
    for t in range(1, k + 1):
        cand = available & ~chosen
        has = cand.any(1)
        if not has.any():
            break
        vals = extend(order[:, : t - 1], chosen, cand).float().masked_fill(~cand, float("-inf"))
        j = first_within(vals)
        rows = has.nonzero(as_tuple=True)[0]
        order[rows, t - 1] = j[rows]
        values[rows, t - 1] = vals[rows, j[rows]]
        chosen[rows, j[rows]] = True
    return order.masked_fill(order == m, -1), values


@torch.no_grad()
def greedy_chain(
    model,
    state: ConceptState,
    k: int,
    prior: Prior | None = None,
    available: Tensor | None = None,
    *,
    fast_path: str = "auto",
    chunk_mb: float = DEFAULT_CHUNK_MB,
    max_assignments: int = DEFAULT_MAX_ASSIGNMENTS,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """Greedy growth of ``S`` by responsiveness (:func:`greedy_search` with ``resp``).

    Steps with more than ``max_assignments`` assignments estimate ``resp`` from that many
    samples of the prior (drawn once: common random numbers across candidates and steps).
    """
    prior = prior or IndependentPrior()
    if available is None:
        available = ~state.intervened
    logits = model.predict(state)
    yhat = logits.argmax(1)
    lin = additive(model, state, logits, fast_path)
    st = trim_state(model, state)
    # Drawn once for the whole batch (common random numbers), only when a step needs them.
    samples = prior.sample(state, max_assignments, generator) if (1 << k) > max_assignments else None
    if lin is not None:  # the additive path chunks inside each step
        return greedy_search(_extender(model, st, lin, yhat, prior, samples, max_assignments, chunk_mb), available, k)
    # pair_logits path: run the whole chain on chunks of examples sized for its largest step, so
    # a model's per-state pair terms (ProbCBM's expansion) are built once per chunk, not per step
    m = state.n_concepts
    row_bytes = (model.pair_bytes(st) or state_row_bytes(st)) + 2 * m
    rows = batch_step(2 * m * min(1 << max(k - 1, 0), max_assignments), row_bytes, chunk_mb)
    parts = []
    for r0 in range(0, state.batch_size, rows):
        r = slice(r0, r0 + rows)
        sub = st if rows >= state.batch_size else st.index(r)
        draws = None if samples is None else samples[r]
        parts.append(greedy_search(_extender(model, sub, None, yhat[r], prior, draws, max_assignments, chunk_mb), available[r], k))
    return torch.cat([o for o, _ in parts]), torch.cat([v for _, v in parts])


def _extender(model, st, lin, yhat, prior, samples, max_assignments, chunk_mb):
    """``extend`` for :func:`greedy_search`: enumerate the assignments of ``S + {j}`` up to
    ``max_assignments``, else average over the prior's ``samples``."""

    def extend(base_idx: Tensor, chosen: Tensor, cand: Tensor) -> Tensor:
        if (1 << (base_idx.shape[1] + 1)) <= max_assignments:
            return _greedy_enum(model, st, lin, yhat, prior, base_idx, chosen, cand, chunk_mb)
        return _greedy_sampled(model, st, lin, yhat, samples, base_idx, chosen, cand, chunk_mb)

    return extend


def _greedy_enum(model, st, lin, yhat, prior, base_idx, chosen, cand, chunk_mb) -> Tensor:
    b, m = chosen.shape
    t1 = base_idx.shape[1]
    a = 1 << t1
    dev = chosen.device
    bits = assignment_bits(t1, dev)  # [A, t-1]
    # weights [B, A, m, 2]
    if isinstance(prior, EmpiricalPrior):
        weights = prior.joint_weights(base_idx)
    else:
        qv = prior.value_probs(st)  # [B, m, 2]
        qx = torch.cat([qv, torch.tensor([1.0, 0.0], device=dev).expand(b, 1, 2)], dim=1)  # none: value 0 surely
        flat = (2 * base_idx[:, None, :] + bits[None]).reshape(b, -1)  # [B, A*(t-1)]
        wbase = qx.reshape(b, -1).gather(1, flat).view(b, a, t1).prod(2)  # [B, A]
        weights = wbase[:, :, None, None] * qv[:, None]
    if lin is not None:
        cdim = lin.terms.shape[-1]
        tx = torch.cat([lin.terms, torch.zeros_like(lin.terms[:, :1])], dim=1)  # [B, m+1, 2, C']
        out = torch.empty(b, m, device=dev)
        step = batch_step(a * m * 2, 4 * (3 * cdim + 3), chunk_mb)
        for b0 in range(0, b, step):
            sl = slice(b0, b0 + step)
            bc = tx[sl].shape[0]
            flat = (2 * base_idx[sl, None, :] + bits[None]).reshape(bc, -1)
            vb = tx[sl].reshape(bc, -1, cdim).gather(1, flat[..., None].expand(-1, -1, cdim))
            vb = vb.view(bc, a, t1, cdim).sum(2)  # [Bc, A, C']
            delta = vb[:, :, None, None, :] + lin.terms[sl][:, None]  # [Bc, A, m, 2, C']
            flips = lin.flips(lin.base[sl][:, None, None, None, :], delta, yhat[sl][:, None, None, None])
            out[sl] = (weights[sl] * flips).sum((1, 3))
        return out
    # generic: pairs (j, assignment of the base, value of j) per example, through the model's pair_logits
    members = torch.cat([base_idx.masked_fill(base_idx == m, 0)[:, None, None, :].expand(b, m, a, t1),
                         torch.arange(m, device=dev)[None, :, None, None].expand(b, m, a, 1)], dim=3)  # fmt: skip
    bits_j = torch.cat([bits[None, None].expand(b, m, a, t1), torch.zeros(b, m, a, 1, dtype=torch.long, device=dev)], 3)
    members = members[:, :, :, None].expand(b, m, a, 2, t1 + 1).reshape(b, -1, t1 + 1)  # [B, m*A*2, t]
    vbits = bits_j[:, :, :, None].expand(b, m, a, 2, t1 + 1).clone()
    vbits[..., -1] = torch.arange(2, device=dev)
    flips = pair_flips(model, st, yhat, members, vbits.reshape(b, -1, t1 + 1), chunk_mb).view(b, m, a, 2)
    return (weights * flips.transpose(1, 2)).sum((1, 3))


def pair_flips(model, st: ConceptState, yhat: Tensor, members: Tensor, bits: Tensor, chunk_mb: float) -> Tensor:
    """``[B, P]`` bool: does setting concepts ``members [B, P, s]`` to ``bits [B, P, s]`` (on top of
    ``st``) change each example's prediction? Chunked over examples through ``model.pair_logits``."""
    b, p, _ = members.shape
    m = st.n_concepts
    row_bytes = (model.pair_bytes(st) or state_row_bytes(st)) + 2 * m
    bc = max(1, batch_step(p, row_bytes, chunk_mb))
    out = torch.empty(b, p, dtype=torch.bool, device=members.device)
    for e0 in range(0, b, bc):
        rows = slice(e0, e0 + bc)
        mem, bit = members[rows], bits[rows]
        n = mem.shape[0]
        mask = torch.zeros(n, p, m, dtype=torch.bool, device=mem.device).scatter_(2, mem, True)
        values = torch.zeros(n, p, m, device=mem.device).scatter_(2, mem, bit.float())
        sub = st if bc >= b else st.index(rows)  # the same state object: model-side caches hit
        logits = model.pair_logits(sub, PairBlock(mask, values, mem, bit))
        out[rows] = logits.argmax(-1) != yhat[rows, None]
    return out


def _greedy_sampled(model, st, lin, yhat, samples, base_idx, chosen, cand, chunk_mb) -> Tensor:
    b, m = chosen.shape
    n = samples.shape[1]
    dev = chosen.device
    t1 = base_idx.shape[1]
    sx = torch.cat([samples, torch.zeros_like(samples[:, :, :1])], dim=2).long()  # [B, n, m+1]
    if lin is not None:
        cdim = lin.terms.shape[-1]
        tx = torch.cat([lin.terms, torch.zeros_like(lin.terms[:, :1])], dim=1).reshape(b, -1, cdim)  # [B, 2(m+1), C']
        out = torch.empty(b, m, device=dev)
        step = batch_step(n * m, 4 * (3 * cdim + 3), chunk_mb)
        for b0 in range(0, b, step):
            sl = slice(b0, b0 + step)
            bc = tx[sl].shape[0]
            bits = sx[sl].gather(2, base_idx[sl, None, :].expand(bc, n, t1))  # [Bc, n, t-1]
            flat = (2 * base_idx[sl, None, :] + bits).reshape(bc, -1)
            vb = tx[sl].gather(1, flat[..., None].expand(-1, -1, cdim)).view(bc, n, t1, cdim).sum(2)  # [Bc, n, C']
            jflat = (2 * torch.arange(m, device=dev)[None, None] + sx[sl][:, :, :m]).reshape(bc, -1)
            vj = tx[sl].gather(1, jflat[..., None].expand(-1, -1, cdim)).view(bc, n, m, cdim)
            delta = vb[:, :, None, :] + vj
            flips = lin.flips(lin.base[sl][:, None, None, :], delta, yhat[sl][:, None, None])
            out[sl] = flips.float().mean(1)
        return out
    # generic: pairs (j, sample) per example, through the model's pair_logits
    members = torch.cat([base_idx.masked_fill(base_idx == m, 0)[:, None, None, :].expand(b, m, n, t1),
                         torch.arange(m, device=dev)[None, :, None, None].expand(b, m, n, 1)], dim=3)  # fmt: skip
    bits = sx[:, None].expand(b, m, n, m + 1).gather(3, members)  # the sample's values of S + {j}
    flips = pair_flips(model, st, yhat, members.reshape(b, -1, t1 + 1), bits.reshape(b, -1, t1 + 1), chunk_mb)
    return flips.view(b, m, n).float().mean(2)
