"""Subset tables: every subset of size ``1..k`` of the requestable concepts, level by level, with
index tensors for the vectorised evaluations (lexicographic order for the generic path, colexicographic
order for the additive fast path) and the dense / sparse forms of each level's (subset, assignment)
pairs."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import torch
from torch import Tensor

from cbm.models.hooks import PairBlock


def n_candidate_pairs(n: int, k: int) -> int:
    """Number of (subset, assignment) pairs with ``1 <= |S| <= k`` over ``n`` concepts."""
    return sum(math.comb(n, s) * 2**s for s in range(1, min(k, n) + 1))


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
        self._blocks: dict[int, PairBlock] = {}
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

    def pair_block(self, level: Level) -> PairBlock:
        """Every pair of ``level`` as a :class:`PairBlock` shared by all examples (cached)."""
        if level.size not in self._blocks:
            mask, values = self.pair_masks(level)
            a = level.n_assignments
            members = level.subsets.repeat_interleave(a, dim=0)  # [P, s]
            bits = assignment_bits(level.size, self.device).repeat(level.n_subsets, 1)  # [P, s]
            self._blocks[level.size] = PairBlock(mask[None], values[None], members[None], bits[None])
        return self._blocks[level.size]

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
