"""ProbCBM's ``pair_logits``: the task logits of every example under every intervention of a pair
block, exactly, without expanding states or re-running the class map.

An intervention sets concept ``i``'s samples to its value's prototype. The class embedding of a
sample, ``h = b + sum_i W_i z_i``, is linear in each concept's sample, so under an intervention on
``S`` with values ``a`` it is ``h = h0 + sum_{i in S} D_{i,a_i}`` with
``D_{i,v} = W_i (proto_{i,v} - z_i)`` (per example and MC sample). The readout needs ``h`` only
through its squared distance to each class prototype ``p_c``::

    ||h - p_c||^2 = ||h0||^2 + sum_i (2 h0.D_i + ||D_i||^2) + sum_{i<j} 2 D_i.D_j
                    - 2 (h0.p_c + sum_i D_i.p_c) + ||p_c||^2

so per example the terms ``h0.D``, ``D.D`` (all pairs of (concept, value)) and ``D.p`` are
computed once, and each (subset, assignment) costs ``O(|S|^2)`` sums per MC sample instead of a
``(m d) x H`` class map. The distances then go through the model's own readout
(:meth:`ProbCBM.log_probs_from_sq`). Equal to ``predict(intervene(...))`` up to float rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from cbm.models.hooks import PairBlock, take_codes
from cbm.models.state import ConceptState


@dataclass
class PairTerms:
    """Per-example terms of the squared distances to every class prototype, divided by ``H`` (the
    readout's mean over the class-space dimensions), for ``K = 2m`` (concept, value) codes ``2i + v``:
    ``sq_c / H = base_c + sum_{k in pair} code_{k,c} + sum_{k<l in pair} cross_{k,l}``."""

    code: Tensor  # [B, K, C, S]     2 h0.D_k + ||D_k||^2 - 2 D_k.p_c
    cross: Tensor  # [B, K*K, S]     2 D_k . D_l at k * K + l (the same for every class)
    single: Tensor  # [B, K, C, S]   base + code_k: a one-code pair, where base = ||h0 - p_c||^2
    duo: Tensor  # [B, K*K, C, S]    base + code_k + code_l + cross_{k,l}: the first two codes of a pair


def pair_terms(model, state: ConceptState) -> PairTerms:
    """The expansion's terms of ``state`` (no intervention on it is assumed beyond its own)."""
    mean, std = state.extras["mean"], state.extras["std"]
    b, m, d = mean.shape
    samples = model.sample(mean, std, model.eps_infer.unsqueeze(0))  # [B,S,m,d]
    h0 = model.class_embedding(samples)  # [B,S,H]
    protos = model.concept_prototypes()  # [2,m,d]: value 0 = negative, 1 = positive
    keep = model.concept_keep.view(m, 1)
    w = model.class_map.weight.view(-1, m, d)  # [H,m,d]
    diff = (protos.unsqueeze(1).unsqueeze(1) - samples.unsqueeze(0)) * keep  # [2,B,S,m,d]
    delta = torch.einsum("vbsmd,hmd->bmvsh", diff, w).reshape(b, 2 * m, -1, w.shape[0])  # [B,K,S,H]
    pc = model.class_prototypes  # [C,H]
    inv_h = 1.0 / model.cfg.class_emb_size
    lin = 2 * torch.einsum("bsh,bksh->bks", h0, delta) + delta.pow(2).sum(-1)  # [B,K,S]
    code = (lin.unsqueeze(2) - 2 * torch.einsum("bksh,ch->bkcs", delta, pc)) * inv_h  # [B,K,C,S]
    cross = (2 * inv_h) * torch.einsum("bksh,blsh->bkls", delta, delta)  # [B,K,K,S]
    sq0 = h0.pow(2).sum(-1).unsqueeze(1) - 2 * torch.einsum("bsh,ch->bcs", h0, pc) + pc.pow(2).sum(-1)[:, None]
    single = code + (sq0 * inv_h).unsqueeze(1)  # [B,K,C,S]
    duo = torch.add(single[:, :, None], code[:, None, :]).add_(cross.unsqueeze(3))  # [B,K,K,C,S]
    # contiguous: the pair blocks gather whole rows of these tables (einsum leaves permuted layouts)
    return PairTerms(code.contiguous(), cross.flatten(1, 2).contiguous(), single.contiguous(), duo.flatten(1, 2).contiguous())


#: Pairs per block: the working set (a few ``[block, S]`` float arrays) then stays in the L2 cache.
PAIR_BLOCK = 2048


def pair_logits(model, terms: PairTerms, pairs: PairBlock) -> Tensor:
    """``[B, P, C]`` logits of every example (rows of ``terms``) under every pair of ``pairs``."""
    p = pairs.n_pairs
    if p > PAIR_BLOCK:
        return torch.cat([pair_logits(model, terms, pairs.slice(p0, p0 + PAIR_BLOCK)) for p0 in range(0, p, PAIR_BLOCK)], 1)
    codes = 2 * pairs.members + pairs.bits  # [1|B, P, s]
    k = terms.code.shape[1]
    if pairs.size == 1:
        sq = take_codes(terms.single, codes[..., 0])  # [B, P, C, S]
    else:  # the first two codes at once, then each further code with its cross terms
        sq = take_codes(terms.duo, codes[..., 0] * k + codes[..., 1])
        for u in range(2, pairs.size):
            sq += take_codes(terms.code, codes[..., u])
            cross = take_codes(terms.cross, codes[..., 0] * k + codes[..., u])  # [B, P, S]
            for v in range(1, u):
                cross += take_codes(terms.cross, codes[..., v] * k + codes[..., u])
            sq += cross.unsqueeze(2)
    dist = sq.clamp_min_(0).add_(1e-10).sqrt_()  # the readout's root-mean-square distances [B, P, C, S]
    if dist.shape[2] != 2:
        return model.log_probs_from_dist(dist.transpose(-1, -2))
    # two classes: the MC mean of P(class 1) = sigmoid(scale * (d_0 - d_1)), fused in place
    p1 = torch.sub(dist[:, :, 0], dist[:, :, 1]).mul_(model.class_scale).sigmoid_().mean(-1)  # [B, P]
    return torch.stack([torch.log1p(-p1), torch.log(p1)], dim=-1)
