"""The fast exact path for additive heads: all (subset, assignment) pairs level by level in
colexicographic order, where a level is a concatenation of prefixes of the previous one.

``U[q, v, a] = U_parent[a] + T[leaf, v]`` (the pair's logit move) and likewise the weights
(products of the concepts' value probabilities). Intermediate levels are gathered through their
parent index; the last, largest level is built from prefixes of the previous one, one block per
largest concept (a Python loop over concepts, never over subsets or assignments).
"""

from __future__ import annotations

import torch
from torch import Tensor

from cbm.interventions.responsiveness.common import Additive, batch_step
from cbm.interventions.responsiveness.priors import IndependentPrior, Prior
from cbm.interventions.responsiveness.tables import SubsetTable
from cbm.models.state import ConceptState

#: The fast path works on blocks of at most this many examples (its per-concept blocks then stay
#: small enough for the cache; a larger ``chunk_mb`` does not make it faster).
FAST_BLOCK_EXAMPLES = 128


def _by_concept(t: Tensor) -> Tensor:
    """``[B, m, 2, ...] -> [m, 2, B, ...]`` contiguous (gathers along concepts copy whole rows)."""
    return t.movedim(0, 2).contiguous()


def exact_additive(lin: Additive, state: ConceptState, table: SubsetTable, prior: Prior, chunk_mb: float) -> Tensor:
    """All pairs of a linear head, level by level in colex order.

    ``U[q, v, a] = U_parent[a] + T[leaf, v]`` (logit move of the pair) and likewise the weights
    (products of the concepts' value probabilities). Intermediate levels are gathered through
    their parent index; the last, largest level is built from prefixes of the previous one, one
    block per largest concept (a Python loop over concepts, never over subsets or assignments).
    """
    b, m = state.probs.shape
    dev = state.probs.device
    resp = torch.empty(b, table.n_subsets, device=dev)
    if table.n_subsets == 0:
        return resp
    independent = isinstance(prior, IndependentPrior)
    qv_all = prior.value_probs(state) if independent else None  # [B, m, 2]
    if lin.binary:
        # Signed margin: U = s * delta with s = +1 for class 1, -1 for class 0, so the prediction
        # flips iff U < tau (tau = -|margin|, nudged up for class 1 where a zero margin flips).
        sign = torch.where(lin.yhat == 1, 1.0, -1.0)
        terms = lin.terms[..., 0] * sign[:, None, None]  # [B, m, 2]
        tau = -lin.base[:, 0].abs()
        tau = torch.where(lin.yhat == 1, torch.nextafter(tau, torch.full_like(tau, float("inf"))), tau)
    else:
        terms = lin.terms  # [B, m, 2, C]
    plan = table.colex()
    emp = None
    if not independent:
        emp = [
            prior.level_weights(table, lv).view(lv.n_subsets, lv.n_assignments).index_select(0, cl.local).view(lv.n_subsets, 2, -1)
            for lv, cl in zip(table.levels, plan)
        ]
    p_max = max(lv.n_pairs for lv in table.levels)
    step = max(1, min(batch_step(p_max, 4 * (2 * terms[0, 0, 0].numel() + 3), chunk_mb), FAST_BLOCK_EXAMPLES))
    for b0 in range(0, b, step):
        blk = slice(b0, b0 + step)
        tb = _by_concept(terms[blk])  # [m, 2, Bc(, C)]
        bc = tb.shape[2]
        qb = _by_concept(qv_all[blk]) if independent else None  # [m, 2, Bc]
        if lin.binary:
            thr = tau[blk] - tb  # [m, 2, Bc]: a pair flips iff its parent's U < thr[leaf, v]
            base = yh = None
        else:
            thr, base, yh = None, lin.base[blk], lin.yhat[blk]
        out = torch.empty(table.n_subsets, bc, device=dev)  # rows in colex order, per level
        u = tb.new_zeros((1, 1, *tb.shape[2:]))
        w = tb.new_ones((1, 1, bc))
        for n_lv, (lv, cl) in enumerate(zip(table.levels, plan)):
            q, half = lv.n_subsets, 1 << (lv.size - 1)
            if n_lv + 1 < len(plan):
                ug = u.index_select(0, cl.parent)  # [Q, A', Bc(, C)]
                tl = tb.index_select(0, cl.leaf)  # [Q, 2, Bc(, C)]
                th = thr.index_select(0, cl.leaf) if thr is not None else tl
                wg = w.index_select(0, cl.parent) if independent else None
                ql = qb.index_select(0, cl.leaf) if independent else None
                r = _pair_sums(ug, th, wg, ql, None if emp is None else emp[n_lv], base, yh)
                u = (ug[:, None] + tl[:, :, None]).reshape(q, 2 * half, *tb.shape[2:])
                if independent:
                    w = (ql[:, :, None] * wg[:, None]).reshape(q, 2 * half, bc)
                out[lv.offset : lv.offset + q] = r
            else:
                start = lv.offset
                n_max = max(n for _, n in cl.blocks)
                buf = u.new_empty((n_max, 2, *u.shape[1:])) if lin.binary else None
                for j, n in cl.blocks:
                    th = thr[j][None] if thr is not None else tb[j][None]
                    we = None if emp is None else emp[n_lv][start - lv.offset : start - lv.offset + n]
                    wq = (w[:n], qb[j][None]) if independent else (None, None)
                    out[start : start + n] = _pair_sums(u[:n], th, wq[0], wq[1], we, base, yh, buf)
                    start += n
        resp[blk] = out.index_select(0, table.colex_inverse()).T
    return resp


def _pair_sums(
    ug: Tensor, th: Tensor, wg: Tensor | None, ql: Tensor | None, we: Tensor | None, base, yhat, buf: Tensor | None = None
) -> Tensor:
    """``[Q, Bc]`` responsiveness of subsets whose pairs are parent pairs ``ug [Q, A', Bc(, C)]``
    crossed with the new concept's two values (``th [Q|1, 2, Bc]`` thresholds in the binary case,
    else logit terms ``[Q|1, 2, Bc, C]``); weights from ``wg x ql`` or the empirical ``we [Q, 2, A']``."""
    if base is None:
        # A float 0/1 result (comparison written into a float buffer) is several times faster on
        # CPU than a bool mask followed by where / mul.
        shape = (ug.shape[0], 2, *ug.shape[1:])
        flips = buf[: shape[0]] if buf is not None else ug.new_empty(shape)
        torch.lt(ug[:, None], th[:, :, None], out=flips)  # [Q, 2, A', Bc]
    else:
        flips = ((base + ug[:, None] + th[:, :, None]).argmax(-1) != yhat).to(ug.dtype)
    if we is not None:
        return flips.mul_(we[..., None]).sum((1, 2))
    return (flips.mul_(wg[:, None]).sum(2) * ql).sum(1)
