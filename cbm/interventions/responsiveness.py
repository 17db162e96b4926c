"""Responsiveness of concept subsets and the search for the most responsive one.

Following Cheon et al., *Feature Responsiveness Scores* (ICLR 2025), the
responsiveness of a subset ``S`` of concepts for one example is the probability
that a human's answer about ``S`` changes the prediction::

    resp(S) = sum_{a in {0,1}^|S|} p(a | S) * [ y_hat != y_hat^a ]

where ``y_hat^a`` is the prediction after setting ``S`` to ``a`` through the
architecture's own ``intervene`` and ``p(a | S)`` is a *prior* over the answers:
:class:`IndependentPrior` (concepts independent, from the model's probabilities)
or :class:`EmpiricalPrior` (the empirical joint of the training concept labels).

Search. :func:`most_responsive` returns ``argmax_{1<=|S|<=k} resp(S)`` per example,
*exactly* (every subset) when the number of (subset, assignment) pairs fits a
budget, and *greedily* (grow ``S`` one concept at a time, keep the best prefix)
otherwise. Ties (within :data:`TIE_TOL`) go to the smaller subset, then to the
lexicographically first one.

Evaluation is vectorised: no Python loop runs per subset or per assignment.

* *Fast path* for heads that are linear in the concept probabilities (the model's
  ``linear_head()`` hook returns ``(W, b)``): setting ``S`` to ``a`` moves the task
  logits by ``W[:, S] (a - p_S)``, so the logits of all pairs are built level by
  level (a size-``s`` pair is its size-``s-1`` parent plus one concept's term); in
  colexicographic order the largest level is a concatenation of prefixes of the
  previous one, so it needs no gather at all (:class:`ColexLevel`).
* *Generic path* for any architecture: all (example, subset, assignment) rows are
  built as masks/values and sent through ``model.intervene`` + ``model.predict``
  in chunks that bound memory (``chunk_mb``).

Greedy steps are vectorised the same way over examples x candidate concepts x
assignments (enumerated up to ``max_assignments``, sampled from the prior beyond).

:func:`responsiveness_loop` is the plain per-subset Python loop, kept as a
reference (tests, benchmark baseline).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import product

import torch
from torch import Tensor

from cbm.config.names import SEARCH_METHODS
from cbm.models.state import ConceptState

#: Two responsiveness values closer than this are a tie (the smaller subset wins).
TIE_TOL = 1e-6
#: Default memory budget of one evaluation chunk, in MiB.
DEFAULT_CHUNK_MB = 256.0
#: Default budget of (subset, assignment) pairs per example for the exact search.
DEFAULT_EXACT_MAX_CANDIDATES = 100_000
#: Greedy steps enumerate all 2^|S| assignments up to this many, then sample this many.
DEFAULT_MAX_ASSIGNMENTS = 256


def n_candidate_pairs(n: int, k: int) -> int:
    """Number of (subset, assignment) pairs with ``1 <= |S| <= k`` over ``n`` concepts."""
    return sum(math.comb(n, s) * 2**s for s in range(1, min(k, n) + 1))


def n_candidate_subsets(n: int, k: int) -> int:
    """Number of subsets with ``1 <= |S| <= k`` over ``n`` concepts."""
    return sum(math.comb(n, s) for s in range(1, min(k, n) + 1))


# ----------------------------------------------------------------------------- subset tables
@dataclass(frozen=True)
class Level:
    """All subsets of one size ``s`` and their ``2^s`` assignments.

    Pairs are ordered ``(subset q, code)`` -> ``q * 2^s + code``; element ``u`` of a subset
    (ascending concept order) takes the value ``(code >> u) & 1``. So ``code = v * 2^(s-1) + a``
    where ``v`` is the value of the subset's last concept and ``a`` the code of its parent (the
    subset minus its last concept) in the previous level: a level's pairs are the parent's pairs
    crossed with the two values of the new concept.
    """

    size: int
    #: Position of the level's first subset in the table's subset order.
    offset: int
    #: ``[Q, s]`` concept indices, ascending within a subset, subsets in lexicographic order.
    subsets: Tensor
    #: ``[Q]`` index of each subset's parent in the previous level (zeros at size 1: the empty set).
    parent: Tensor
    #: ``[Q]`` the subset's last concept.
    leaf: Tensor

    @property
    def n_subsets(self) -> int:
        return self.subsets.shape[0]

    @property
    def n_assignments(self) -> int:
        return 1 << self.size

    @property
    def n_pairs(self) -> int:
        return self.n_subsets << self.size


def assignment_bits(s: int, device: torch.device | str = "cpu") -> Tensor:
    """``[2^s, s]`` long: row ``code`` holds the bits ``(code >> u) & 1``."""
    codes = torch.arange(1 << s, device=device)
    return (codes[:, None] >> torch.arange(s, device=device)[None]) & 1


class SubsetTable:
    """Index tensors of every subset of size ``1..k`` of ``universe`` (a subset of ``range(m)``).

    Build through :func:`subset_table`, which caches one table per ``(m, k, universe, device)``.
    """

    def __init__(self, m: int, k: int, universe: Sequence[int] | None = None, device: torch.device | str = "cpu"):
        uni = list(range(m)) if universe is None else sorted({int(j) for j in universe})
        if any(j < 0 or j >= m for j in uni):
            raise ValueError(f"subset universe {uni} is outside range({m})")
        self.m = m
        self.universe = tuple(uni)
        self.k = min(k, len(uni))
        self.device = torch.device(device)
        n = len(uni)
        u = torch.tensor(uni, dtype=torch.long)
        levels: list[Level] = []
        offset = 0
        prev_pos: Tensor | None = None
        for s in range(1, self.k + 1):
            if prev_pos is None:
                pos, parent_q = torch.arange(n)[:, None], torch.zeros(n, dtype=torch.long)
            else:
                ok = torch.arange(n)[None, :] > prev_pos[:, -1:]
                parent_q, jpos = ok.nonzero(as_tuple=True)  # row-major: lexicographic order
                pos = torch.cat([prev_pos[parent_q], jpos[:, None]], dim=1)
            subsets = u[pos]
            levels.append(Level(s, offset, subsets.to(self.device), parent_q.to(self.device), subsets[:, -1].to(self.device)))
            offset += len(subsets)
            prev_pos = pos
        self.levels = levels
        self.n_subsets = offset
        self.n_pairs = sum(lv.n_pairs for lv in levels)
        members = torch.zeros(offset, m, dtype=torch.bool, device=self.device)
        for lv in levels:
            members[lv.offset : lv.offset + lv.n_subsets].scatter_(1, lv.subsets, True)
        #: ``[Q, m]`` bool membership of every subset.
        self.members = members
        #: ``[Q]`` subset sizes.
        self.sizes = members.sum(1)
        self._pairs: dict[int, tuple[Tensor, Tensor]] = {}
        self._colex: list[ColexLevel] | None = None
        self._colex_inv: Tensor | None = None

    def n_upto(self, k: int) -> int:
        """Number of subsets of size ``<= k`` (they come first)."""
        k = min(k, self.k)
        return 0 if k <= 0 else self.levels[k - 1].offset + self.levels[k - 1].n_subsets

    def subsets(self) -> list[tuple[int, ...]]:
        """All subsets, in table order (for loops and reports)."""
        return [tuple(row) for lv in self.levels for row in lv.subsets.tolist()]

    def pair_masks(self, level: Level) -> tuple[Tensor, Tensor]:
        """``(mask [P,m] bool, values [P,m] float)`` of every pair of ``level`` (cached)."""
        if level.size not in self._pairs:
            q, a, s = level.n_subsets, level.n_assignments, level.size
            mask = self.members[level.offset : level.offset + q].repeat_interleave(a, dim=0)
            bits = assignment_bits(s, self.device).float()
            values = torch.zeros(q, a, self.m, device=self.device)
            values.scatter_(2, level.subsets[:, None, :].expand(q, a, s), bits[None].expand(q, a, s))
            self._pairs[level.size] = (mask, values.reshape(q * a, self.m))
        return self._pairs[level.size]

    def valid(self, available: Tensor) -> Tensor:
        """``[B, Q]`` bool: subsets whose concepts are all available in each row."""
        missing = (~available).to(torch.float32) @ self.members.T.to(torch.float32)
        return missing == 0

    def colex(self) -> list[ColexLevel]:
        """The levels in colexicographic order (cached), used by the fast path."""
        if self._colex is None:
            self._colex = _colex_levels(self)
        return self._colex

    def colex_inverse(self) -> Tensor:
        """``[Q]``: row of each table column when the levels are stacked in colex order."""
        if self._colex_inv is None:
            cols = torch.cat([cl.columns for cl in self.colex()])
            inv = torch.empty_like(cols)
            inv[cols] = torch.arange(len(cols), device=cols.device)
            self._colex_inv = inv
        return self._colex_inv


@dataclass(frozen=True)
class ColexLevel:
    """One level in colexicographic order (subsets sorted by largest concept, then the rest).

    In this order the size-``s`` subsets whose largest concept is the ``t``-th of the universe
    are exactly the first ``C(t, s-1)`` size-``s-1`` subsets plus that concept, so a level is a
    concatenation of *prefixes* of the previous one: no gather is needed to build it.
    """

    #: ``[Q]`` column of each (colex-ordered) subset in the table's (lexicographic) order.
    columns: Tensor
    #: ``[Q]`` colex index of the parent in the previous level, and the added (largest) concept.
    parent: Tensor
    leaf: Tensor
    #: ``(concept, prefix length)`` per block, in order: block ``t`` = first ``n`` parents + concept.
    blocks: tuple[tuple[int, int], ...]
    #: ``[Q]`` position of each colex subset within the level's lexicographic order.
    local: Tensor


def _colex_levels(table: SubsetTable) -> list[ColexLevel]:
    out: list[ColexLevel] = []
    uni = table.universe
    prev: list[tuple[int, ...]] = [()]
    for lv in table.levels:
        lex = {tuple(row): q for q, row in enumerate(lv.subsets.tolist())}
        prev_pos = {sub: i for i, sub in enumerate(prev)}
        cur: list[tuple[int, ...]] = []
        blocks = []
        for t, j in enumerate(uni):
            n = math.comb(t, lv.size - 1)
            if n:
                blocks.append((j, n))
                cur += [sub + (j,) for sub in prev[:n]]
        dev = table.device
        local = torch.tensor([lex[sub] for sub in cur], dtype=torch.long)
        out.append(
            ColexLevel(
                columns=(local + lv.offset).to(dev),
                parent=torch.tensor([prev_pos[sub[:-1]] for sub in cur], dtype=torch.long).to(dev),
                leaf=torch.tensor([sub[-1] for sub in cur], dtype=torch.long).to(dev),
                blocks=tuple(blocks),
                local=local.to(dev),
            )
        )
        prev = cur
    return out


@lru_cache(maxsize=32)
def _cached_table(m: int, k: int, universe: tuple[int, ...] | None, device: str) -> SubsetTable:
    return SubsetTable(m, k, universe, device)


def subset_table(m: int, k: int, universe: Sequence[int] | None = None, device: torch.device | str = "cpu") -> SubsetTable:
    """The cached :class:`SubsetTable` of subsets of size ``1..k`` of ``universe`` (default all ``m``)."""
    uni = None if universe is None else tuple(sorted({int(j) for j in universe}))
    if uni == tuple(range(m)):
        uni = None
    return _cached_table(m, k, uni, str(torch.device(device)))


# ----------------------------------------------------------------------------- priors p(a | S)
class IndependentPrior:
    """``p(a|S) = prod_i p_i^{a_i} (1-p_i)^{1-a_i}`` from the model's concept probabilities."""

    name = "independent"

    def value_probs(self, state: ConceptState) -> Tensor:
        """``[B, m, 2]``: probability of value 0 and of value 1 per concept."""
        p = state.probs.float().clamp(0.0, 1.0)
        return torch.stack([1.0 - p, p], dim=2)

    def sample(self, state: ConceptState, n: int, generator: torch.Generator | None) -> Tensor:
        """``[B, n, m]`` float 0/1 assignments drawn from the prior."""
        p = state.probs.float().clamp(0.0, 1.0)
        u = torch.rand((p.shape[0], n, p.shape[1]), generator=generator).to(p.device)
        return (u < p[:, None, :]).float()


class EmpiricalPrior:
    """``p(a|S)`` = frequency of ``a`` among the training concept labels restricted to ``S``.

    ``labels``: ``[N, m]`` 0/1 concept labels (e.g. the training split's ``c``). The prior
    does not depend on the example.
    """

    name = "empirical"

    def __init__(self, labels: Tensor):
        labels = torch.as_tensor(labels)
        if labels.ndim != 2 or labels.shape[0] == 0:
            raise ValueError(f"empirical prior: labels must be a non-empty [N, m] matrix, got shape {tuple(labels.shape)}")
        self.labels = (labels > 0.5).to(torch.long)
        self._level_cache: dict[tuple, Tensor] = {}

    @property
    def n_concepts(self) -> int:
        return self.labels.shape[1]

    def _labels_on(self, device: torch.device) -> Tensor:
        if self.labels.device != device:
            self.labels = self.labels.to(device)
        return self.labels

    def level_weights(self, table: SubsetTable, level: Level, max_elems: int = 1 << 24) -> Tensor:
        """``[P]`` frequencies of every pair of ``level`` (cached per table and level)."""
        key = (table.m, table.universe, level.size, str(table.device))
        if key not in self._level_cache:
            c = self._labels_on(table.device)
            n, q, a = c.shape[0], level.n_subsets, level.n_assignments
            counts = torch.zeros(level.n_pairs, device=table.device)
            step = max(1, max_elems // max(n, 1))
            for q0 in range(0, q, step):
                sub = level.subsets[q0 : q0 + step]
                codes = torch.zeros(n, len(sub), dtype=torch.long, device=table.device)
                for u in range(level.size):
                    codes |= c[:, sub[:, u]] << u
                flat = (torch.arange(q0, q0 + len(sub), device=table.device) * a)[None] + codes
                counts += torch.bincount(flat.reshape(-1), minlength=level.n_pairs).float()
            self._level_cache[key] = counts / n
        return self._level_cache[key]

    def joint_weights(self, chosen: Tensor, max_elems: int = 1 << 24) -> Tensor:
        """``[B, 2^t, m, 2]``: frequency of (``chosen`` = bits of code, concept ``j`` = v).

        ``chosen``: ``[B, t]`` concept indices, ``m`` for "none" (that bit is then always 0).
        """
        c = self._labels_on(chosen.device)
        n, m = c.shape
        b, t = chosen.shape
        a = 1 << t
        cext = torch.cat([c, torch.zeros(n, 1, dtype=c.dtype, device=c.device)], dim=1)
        onehot = torch.stack([1 - c, c], dim=2).reshape(n, 2 * m).float()  # [N, 2m]
        out = torch.zeros(b, a, 2 * m, device=c.device)
        step = max(1, max_elems // max(n * 2 * m, 1))
        for b0 in range(0, b, step):
            ch = chosen[b0 : b0 + step]
            bc = len(ch)
            codes = torch.zeros(bc, n, dtype=torch.long, device=c.device)
            for u in range(t):
                codes |= cext[:, ch[:, u]].T << u
            flat = (torch.arange(bc, device=c.device)[:, None] * a + codes).reshape(-1)
            part = torch.zeros(bc * a, 2 * m, device=c.device)
            part.index_add_(0, flat, onehot.repeat(bc, 1))
            out[b0 : b0 + bc] = part.view(bc, a, 2 * m)
        return (out / n).view(b, a, m, 2)

    def sample(self, state: ConceptState, n: int, generator: torch.Generator | None) -> Tensor:
        """``[B, n, m]`` training label rows drawn uniformly (exact samples of the empirical joint)."""
        b = state.probs.shape[0]
        rows = torch.randint(self.labels.shape[0], (b, n), generator=generator)
        return self._labels_on(state.probs.device)[rows.to(state.probs.device)].float()


Prior = IndependentPrior | EmpiricalPrior


def make_prior(prior: str | Prior = "independent", labels: Tensor | None = None) -> Prior:
    """A prior from its name (``independent`` | ``empirical``, the latter needs ``labels``)."""
    if isinstance(prior, IndependentPrior | EmpiricalPrior):
        return prior
    if prior == "independent":
        return IndependentPrior()
    if prior == "empirical":
        if labels is None:
            raise ValueError("responsiveness prior 'empirical' needs the training concept labels")
        return EmpiricalPrior(labels)
    raise ValueError(f"responsiveness prior must be 'independent' or 'empirical', got {prior!r}")


# ----------------------------------------------------------------------------- model hooks
def linear_head(model) -> tuple[Tensor, Tensor] | None:
    """``(W [C,m], b [C])`` when ``predict(state) == state.probs @ W.T + b`` and ``intervene``
    replaces probabilities (the model's optional ``linear_head()`` hook), else ``None``."""
    hook = getattr(model, "linear_head", None)
    return hook() if callable(hook) else None


def trim_state(model, state: ConceptState) -> ConceptState:
    """``state`` without the extras that ``intervene``/``predict`` never read (the model's optional
    ``intervention_extras()`` hook; all extras are kept without it). Saves memory when expanding."""
    hook = getattr(model, "intervention_extras", None)
    keep = hook() if callable(hook) else None
    if keep is None:
        return state
    return replace(state, extras={k: v for k, v in state.extras.items() if k in keep})


def _state_row_bytes(state: ConceptState) -> int:
    """Rough bytes one expanded row of ``state`` costs through intervene + predict."""
    per = 0
    for t in (state.logits, state.probs, state.intervened, state.uncertainty, *state.extras.values()):
        if t is not None:
            per += t[0].numel() * t.element_size() if t.shape[0] else 0
    m = state.probs.shape[1]
    return 3 * per + 16 * m + 64


class _Linear:
    """Per-example, per-(concept, value) logit terms of a linear head."""

    def __init__(self, wb: tuple[Tensor, Tensor], state: ConceptState, logits: Tensor):
        w, b = wb
        p = state.probs.float()
        w = w.float().to(p.device)
        c = logits.shape[1]
        self.binary = c == 2
        vals = torch.stack([-p, 1.0 - p], dim=2)  # [B, m, 2]: a - p
        if self.binary:
            # Two classes: only the margin l1 - l0 matters; pred = 1 iff margin > 0 (argmax ties -> 0).
            self.base = (logits[:, 1] - logits[:, 0]).float()[:, None]  # [B, 1]
            self.terms = (vals * (w[1] - w[0])[None, :, None])[..., None]  # [B, m, 2, 1]
        else:
            self.base = logits.float()  # [B, C]
            self.terms = vals[..., None] * w.T[None, :, None, :]  # [B, m, 2, C]
        self.yhat = logits.argmax(1)

    def flips(self, base: Tensor, delta: Tensor, yhat: Tensor) -> Tensor:
        """Bool: the prediction of ``base + delta`` (last dim = classes or margin) differs from ``yhat``."""
        z = base + delta
        if self.binary:
            return (z[..., 0] > 0) != yhat.bool()
        return z.argmax(-1) != yhat


# ----------------------------------------------------------------------------- exact evaluation
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
    concept that is not ``available`` (``[B,m]`` bool, default: not yet intervened)."""
    prior = prior or IndependentPrior()
    if available is None:
        available = ~state.intervened
    logits = model.predict(state)
    wb = linear_head(model) if fast_path == "auto" else None
    if wb is not None:
        resp = _exact_fast(_Linear(wb, state, logits), state, table, prior, chunk_mb)
    else:
        resp = _exact_generic(model, state, logits.argmax(1), table, prior, chunk_mb)
    uni = torch.tensor(table.universe, dtype=torch.long, device=available.device)
    if bool(available.index_select(1, uni).all()):
        return resp  # every subset of the table is available in every row
    return resp.masked_fill(~table.valid(available), float("-inf"))


def _batch_step(n_rows_per_example: int, bytes_per_row: int, chunk_mb: float) -> int:
    return max(1, int(chunk_mb * 2**20) // max(1, n_rows_per_example * bytes_per_row))


#: The fast path works on blocks of at most this many examples (its per-concept blocks then stay
#: small enough for the cache; a larger ``chunk_mb`` does not make it faster).
FAST_BLOCK_EXAMPLES = 128


def _by_concept(t: Tensor) -> Tensor:
    """``[B, m, 2, ...] -> [m, 2, B, ...]`` contiguous (gathers along concepts copy whole rows)."""
    return t.movedim(0, 2).contiguous()


def _exact_fast(lin: _Linear, state: ConceptState, table: SubsetTable, prior: Prior, chunk_mb: float) -> Tensor:
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
    step = max(1, min(_batch_step(p_max, 4 * (2 * terms[0, 0, 0].numel() + 3), chunk_mb), FAST_BLOCK_EXAMPLES))
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


def _expand_rows(state: ConceptState, n: int) -> ConceptState:
    """Each row repeated ``n`` times consecutively (a contiguous copy, no gather)."""
    return state.map(lambda t: t[:, None].expand(t.shape[0], n, *t.shape[1:]).reshape(t.shape[0] * n, *t.shape[1:]))


def _exact_generic(model, state: ConceptState, yhat: Tensor, table: SubsetTable, prior: Prior, chunk_mb: float) -> Tensor:
    """Every (example, pair) row through ``intervene`` + ``predict``, in blocks of examples x
    contiguous pair ranges (rows are built by copies, never by per-row gathers)."""
    b, m = state.probs.shape
    dev = state.probs.device
    resp = torch.empty(b, table.n_subsets, device=dev)
    if table.n_subsets == 0:
        return resp
    st = trim_state(model, state)
    per_call = _batch_step(1, _state_row_bytes(st), chunk_mb)
    independent = isinstance(prior, IndependentPrior)
    qv_all = prior.value_probs(state) if independent else None
    p_max = max(lv.n_pairs for lv in table.levels)
    outer = _batch_step(p_max, 16, chunk_mb)
    for b0 in range(0, b, outer):
        blk = slice(b0, b0 + outer)
        sb, yb = st.index(blk), yhat[blk]
        bo = yb.shape[0]
        qb = _by_concept(qv_all[blk]) if independent else None
        w_prev = torch.ones(1, 1, bo, device=dev)
        for lv in table.levels:
            masks, values = table.pair_masks(lv)
            values = values.to(st.probs.dtype)
            q, a = lv.n_subsets, lv.n_assignments
            flips = torch.empty(bo, lv.n_pairs, dtype=torch.bool, device=dev)
            pc = min(lv.n_pairs, per_call)
            bc = max(1, per_call // pc)
            for e0 in range(0, bo, bc):
                rows = sb.index(slice(e0, e0 + bc))
                ne = rows.probs.shape[0]
                for p0 in range(0, lv.n_pairs, pc):
                    n = min(pc, lv.n_pairs - p0)
                    new = model.intervene(_expand_rows(rows, n), masks[p0 : p0 + n].repeat(ne, 1), values[p0 : p0 + n].repeat(ne, 1))
                    pred = model.predict(new).argmax(1).view(ne, n)
                    flips[e0 : e0 + ne, p0 : p0 + n] = pred != yb[e0 : e0 + ne, None]
            if independent:
                w = qb.index_select(0, lv.leaf)[:, :, None] * w_prev.index_select(0, lv.parent)[:, None]  # [Q, 2, A', Bo]
                resp[blk, lv.offset : lv.offset + q] = (flips.view(bo, q, a) * w.reshape(q, a, bo).permute(2, 0, 1)).sum(2)
                w_prev = w.reshape(q, a, bo)
            else:
                w = prior.level_weights(table, lv).view(1, q, a)
                resp[blk, lv.offset : lv.offset + q] = (flips.view(bo, q, a) * w).sum(2)
    return resp


# ----------------------------------------------------------------------------- greedy evaluation
def first_within(values: Tensor, tol: float = TIE_TOL) -> Tensor:
    """Index of the first entry per row within ``tol`` of the row's maximum."""
    best = values.max(dim=-1, keepdim=True).values
    return (values >= best - tol).to(torch.float32).argmax(dim=-1)


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
    wb = linear_head(model) if fast_path == "auto" else None
    lin = _Linear(wb, state, logits) if wb is not None else None
    st = trim_state(model, state)
    samples: list[Tensor] = []

    def extend(base_idx: Tensor, chosen: Tensor, cand: Tensor) -> Tensor:
        if (1 << (base_idx.shape[1] + 1)) <= max_assignments:
            return _greedy_enum(model, st, lin, yhat, prior, base_idx, chosen, cand, chunk_mb)
        if not samples:
            samples.append(prior.sample(state, max_assignments, generator))
        return _greedy_sampled(model, st, lin, yhat, samples[0], base_idx, chosen, cand, chunk_mb)

    return greedy_search(extend, available, k)


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
        step = _batch_step(a * m * 2, 4 * (3 * cdim + 3), chunk_mb)
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
    # generic: rows (b, j) candidates x A assignments of the base x 2 values of j
    vbase = torch.zeros(b, a, m + 1, device=dev)
    vbase.scatter_(2, base_idx[:, None, :].expand(b, a, t1), bits[None].expand(b, a, t1).float())
    vbase = vbase[:, :, :m]
    bi, ji = cand.nonzero(as_tuple=True)
    n_rows = len(bi) * a * 2
    flips = torch.zeros(b, a, m, 2, dtype=torch.bool, device=dev)
    per_call = _batch_step(1, _state_row_bytes(st), chunk_mb)
    for r0 in range(0, n_rows, per_call):
        r = torch.arange(r0, min(n_rows, r0 + per_call), device=dev)
        c, rem = r // (2 * a), r % (2 * a)
        aa, vv = rem // 2, rem % 2
        bb, jj = bi[c], ji[c]
        vals = vbase[bb, aa]
        vals[torch.arange(len(r), device=dev), jj] = vv.float()
        mask = chosen[bb]
        mask[torch.arange(len(r), device=dev), jj] = True
        new = model.intervene(st.index(bb), mask, vals.to(st.probs.dtype))
        flips[bb, aa, jj, vv] = model.predict(new).argmax(1) != yhat[bb]
    return (weights * flips).sum((1, 3))


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
        step = _batch_step(n * m, 4 * (3 * cdim + 3), chunk_mb)
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
    bi, ji = cand.nonzero(as_tuple=True)
    n_rows = len(bi) * n
    flips = torch.zeros(b, n, m, dtype=torch.bool, device=dev)
    per_call = _batch_step(1, _state_row_bytes(st), chunk_mb)
    for r0 in range(0, n_rows, per_call):
        r = torch.arange(r0, min(n_rows, r0 + per_call), device=dev)
        c, nn_ = r // n, r % n
        bb, jj = bi[c], ji[c]
        mask = chosen[bb]
        mask[torch.arange(len(r), device=dev), jj] = True
        new = model.intervene(st.index(bb), mask, samples[bb, nn_].to(st.probs.dtype))
        flips[bb, nn_, jj] = model.predict(new).argmax(1) != yhat[bb]
    return flips.float().mean(1)


# ----------------------------------------------------------------------------- choosing S
@dataclass
class SearchResult:
    """The most responsive subset per example (before any threshold)."""

    #: ``[B, m]`` bool, the chosen subset (empty when no concept could be requested).
    mask: Tensor
    #: ``[B]`` its responsiveness (``-inf`` when no concept could be requested).
    resp: Tensor
    #: ``"exact"`` or ``"greedy"``.
    method: str

    def thresholded(self, threshold: float) -> Tensor:
        """The mask with rows whose ``resp <= threshold`` emptied."""
        return self.mask & (self.resp > threshold)[:, None]


def choose_exact(resp: Tensor, table: SubsetTable, k: int) -> SearchResult:
    """``argmax_{|S|<=k}`` over an exact ``[B, Q]`` responsiveness matrix (ties: smaller, then first)."""
    q = table.n_upto(k)
    b = resp.shape[0]
    if q == 0:
        return SearchResult(torch.zeros(b, table.m, dtype=torch.bool, device=resp.device), resp.new_full((b,), float("-inf")), "exact")
    r = resp[:, :q]
    idx = first_within(r)
    best = r.gather(1, idx[:, None])[:, 0]
    mask = table.members[idx] & (best > float("-inf"))[:, None]
    return SearchResult(mask, best, "exact")


def choose_prefix(order: Tensor, values: Tensor, k: int, m: int) -> SearchResult:
    """Best prefix of at most ``k`` concepts of a greedy chain (ties: the shorter prefix)."""
    b = order.shape[0]
    k = min(k, order.shape[1])
    if k == 0:
        return SearchResult(torch.zeros(b, m, dtype=torch.bool, device=order.device), values.new_full((b,), float("-inf")), "greedy")
    vals = values[:, :k]
    t = first_within(vals)
    best = vals.gather(1, t[:, None])[:, 0]
    steps = torch.arange(k, device=order.device)[None]
    keep = (steps <= t[:, None]) & (order[:, :k] >= 0) & (best > float("-inf"))[:, None]
    idx = torch.where(keep, order[:, :k], torch.full_like(order[:, :k], m))
    mask = torch.zeros(b, m + 1, dtype=torch.bool, device=order.device).scatter_(1, idx, True)[:, :m]
    return SearchResult(mask, best, "greedy")


def search_method(n_universe: int, k: int, method: str = "auto", exact_max_candidates: int = DEFAULT_EXACT_MAX_CANDIDATES) -> str:
    """``exact`` or ``greedy`` for a budget ``k`` over ``n_universe`` requestable concepts."""
    if method not in SEARCH_METHODS:
        raise ValueError(f"responsiveness search must be one of {SEARCH_METHODS}, got {method!r}")
    if method != "auto":
        return method
    return "exact" if n_candidate_pairs(n_universe, k) <= exact_max_candidates else "greedy"


@torch.no_grad()
def most_responsive(
    model,
    state: ConceptState,
    k: int,
    prior: Prior | None = None,
    available: Tensor | None = None,
    *,
    method: str = "auto",
    exact_max_candidates: int = DEFAULT_EXACT_MAX_CANDIDATES,
    max_assignments: int = DEFAULT_MAX_ASSIGNMENTS,
    chunk_mb: float = DEFAULT_CHUNK_MB,
    fast_path: str = "auto",
    generator: torch.Generator | None = None,
) -> SearchResult:
    """``argmax_{1<=|S|<=k} resp(S)`` per example over the ``available`` concepts (``[B,m]`` bool,
    default: those not yet intervened), exact when the pair count fits ``exact_max_candidates``."""
    if available is None:
        available = ~state.intervened
    m = state.probs.shape[1]
    universe = available.any(0).nonzero(as_tuple=True)[0].tolist()
    how = search_method(len(universe), k, method, exact_max_candidates)
    if how == "exact":
        table = subset_table(m, k, universe, state.probs.device)
        resp = subset_responsiveness(model, state, table, prior, available, fast_path=fast_path, chunk_mb=chunk_mb)
        return choose_exact(resp, table, k)
    order, values = greedy_chain(
        model, state, min(k, len(universe)), prior, available,
        fast_path=fast_path, chunk_mb=chunk_mb, max_assignments=max_assignments, generator=generator,
    )
    return choose_prefix(order, values, k, m)


# ----------------------------------------------------------------------------- reference loop
@torch.no_grad()
def responsiveness_loop(model, state: ConceptState, subsets: Iterable[Sequence[int]], prior: Prior | None = None) -> Tensor:
    """Reference ``[B, len(subsets)]`` responsiveness: a plain Python loop over subsets, each
    subset's ``2^|S|`` assignments sent through ``intervene`` + ``predict`` as one batch."""
    prior = prior or IndependentPrior()
    b, m = state.probs.shape
    dev = state.probs.device
    yhat = model.predict(state).argmax(1)
    cols = []
    for subset in subsets:
        s = list(subset)
        bits = torch.tensor(list(product([0, 1], repeat=len(s))), dtype=torch.float32, device=dev)  # [A, s]
        a = len(bits)
        rep = state.repeat_interleave(a)
        mask = torch.zeros(b * a, m, dtype=torch.bool, device=dev)
        mask[:, s] = True
        values = torch.zeros(b * a, m, device=dev)
        values[:, s] = bits.repeat(b, 1)
        pred = model.predict(model.intervene(rep, mask, values.to(state.probs.dtype))).argmax(1).view(b, a)
        flip = (pred != yhat[:, None]).float()
        if isinstance(prior, EmpiricalPrior):
            lab = prior.labels.to(dev)[:, s].float()  # [N, s]
            w = (lab[None, :, :] == bits[:, None, :]).all(2).float().mean(1)[None]  # [1, A]
        else:
            p = state.probs[:, s].float()[:, None, :]  # [B, 1, s]
            w = torch.where(bits[None] > 0.5, p, 1.0 - p).prod(2)  # [B, A]
        cols.append((w * flip).sum(1))
    return torch.stack(cols, dim=1) if cols else torch.zeros(b, 0, device=dev)
