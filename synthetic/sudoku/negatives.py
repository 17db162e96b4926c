"""Invalid boards whose number of failing checks follows a configured distribution.

Every negative starts from a distinct valid board and takes a short random walk
of *moves* from one operation family, vectorised over all boards:

``line_swap``
    swap two whole rows from different bands, or two whole columns from
    different stacks. Rows and columns stay valid, so only boxes fail, and
    then each band and each stack holds 0 or >= 2 failing boxes (a band with
    valid rows holds every digit 3 times: two valid boxes force the third).
    The failing boxes therefore count 4, 6, 7, 8 or 9, never 2, 3 or 5: this
    family's support is exactly {4, 6, 7, 8, 9}.
``group_permute``
    cycle the digits of 2..9 cells inside one row, column or box; the group
    itself stays valid. Reaches 2..27 failing checks.
``corrupt``
    targeted corruptions: overwrite a cell with another digit (breaks its row,
    column and box), swap two cells of a group that share a box-row/-column
    (breaks exactly the two crossing groups), or swap any two cells; the move
    type is chosen from the remaining deficit so a requested count is hit
    quickly. Reaches 2..27 failing checks.

The walk accepts a move only if the number of failing checks (computed by the
exact checker) does not exceed the target, and stops when it equals it. So the
failing-check count of every negative is exactly its drawn target, and which
checks fail varies with the random moves. Exactly one failing check is
unreachable on any board (see :mod:`synthetic.sudoku.checker`), so targets
start at 2. A walk that misses its target within ``max_steps`` moves restarts
from its valid base; after ``retries`` restarts it switches to ``corrupt``
(about 0.5% of negatives with the default mixture), and the family actually
used is returned (``meta`` column ``neg_op``).
"""

from __future__ import annotations

import re

import numpy as np

from synthetic.sudoku.checker import GROUPS, n_failing

FAMILIES: tuple[str, ...] = ("line_swap", "group_permute", "corrupt")
#: Failing-check counts each family's walk reaches (see the module docstring).
SUPPORT: dict[str, frozenset[int]] = {
    "line_swap": frozenset({4, 6, 7, 8, 9}),
    "group_permute": frozenset(range(2, 28)),
    "corrupt": frozenset(range(2, 28)),
}
MIN_FAIL, MAX_FAIL = 2, 27

_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


def fail_count_items(spec: str | dict) -> list[tuple[str, float]]:
    """``"2:0.2, 5-6:0.1"`` (or a mapping ``{"2": 0.2}``) -> ``[("2", 0.2), ("5-6", 0.1)]``."""
    if isinstance(spec, str):
        items = []
        for part in re.split(r"[,\s]+", spec.strip()):
            if not part:
                continue
            key, sep, w = part.partition(":")
            if not sep:
                raise ValueError(f"fail_counts entry '{part}' must look like 'k:weight' or 'a-b:weight'")
            try:
                items.append((key, float(w)))
            except ValueError:
                raise ValueError(f"fail_counts entry '{part}': weight '{w}' is not a number") from None
        return items
    return [(str(k), float(v)) for k, v in dict(spec).items()]


def parse_fail_counts(spec: str | dict) -> np.ndarray:
    """Failing-check distribution -> probabilities ``[28]`` over the count k.

    ``spec`` is ``"k:w, a-b:w, ..."`` (commas or spaces between entries) or a
    mapping ``{"k": w, "a-b": w}``; a range spreads its weight evenly over its
    counts; weights are normalised. Raises ``ValueError`` with one line for
    malformed entries, counts outside 2..27 or zero total weight.
    """
    p = np.zeros(MAX_FAIL + 1)
    items = fail_count_items(spec)
    if not items:
        raise ValueError("fail_counts must not be empty")
    for key, w in items:
        m = _RANGE.match(str(key))
        if not m:
            raise ValueError(f"fail_counts key '{key}' is not a count or a range 'a-b'")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        if lo > hi:
            raise ValueError(f"fail_counts key '{key}': empty range")
        if lo < MIN_FAIL or hi > MAX_FAIL:
            raise ValueError(
                f"fail_counts key '{key}': failing-check counts must lie in {MIN_FAIL}..{MAX_FAIL} "
                "(exactly one failing check is impossible on a 9x9 board)"
            )
        if not np.isfinite(w) or w < 0:
            raise ValueError(f"fail_counts weight {w} of '{key}' must be a non-negative number")
        p[lo : hi + 1] += w / (hi - lo + 1)
    if p.sum() <= 0:
        raise ValueError("fail_counts weights sum to zero")
    return p / p.sum()


def family_probs(ops: dict, fail_p: np.ndarray) -> np.ndarray:
    """``[28, len(FAMILIES)]``: P(family | k), the op weights restricted to families reaching k."""
    w = np.array([float(ops.get(f, 0.0)) for f in FAMILIES])
    table = np.zeros((MAX_FAIL + 1, len(FAMILIES)))
    for j, f in enumerate(FAMILIES):
        table[sorted(SUPPORT[f]), j] = w[j]
    tot = table.sum(axis=1, keepdims=True)
    bad = np.flatnonzero((fail_p > 0) & (tot[:, 0] <= 0))
    if len(bad):
        raise ValueError(
            f"negative_ops: no family with positive weight reaches {int(bad[0])} failing checks "
            "(line_swap reaches 4,6-9; group_permute and corrupt reach 2-27)"
        )
    return np.divide(table, tot, out=np.zeros_like(table), where=tot > 0)


def allocate(p: np.ndarray, n: int) -> np.ndarray:
    """Integer counts summing to ``n`` closest to ``n * p`` (largest remainder)."""
    raw = p * n
    counts = np.floor(raw).astype(np.int64)
    short = n - counts.sum()
    if short > 0:
        order = np.argsort(-(raw - counts), kind="stable")
        counts[order[:short]] += 1
    return counts


def sample_targets(fail_p: np.ndarray, fam_p: np.ndarray, n: int, rng: np.random.Generator):
    """Stratified failing-count targets (exact proportions up to rounding), shuffled; family per target."""
    counts = allocate(fail_p, n)
    targets = np.repeat(np.arange(len(fail_p)), counts)
    rng.shuffle(targets)
    u = rng.random(n)
    cdf = np.cumsum(fam_p[targets], axis=1)
    family = np.minimum((u[:, None] >= cdf).sum(axis=1), len(FAMILIES) - 1)
    return targets.astype(np.int64), family.astype(np.int64)


# ------------------------------------------------------------------ moves
def _swap_cells(flat: np.ndarray, ia: np.ndarray, ib: np.ndarray) -> None:
    """Swap cells ``ia`` and ``ib`` (``[m,k]`` flat indices) row-wise, in place."""
    a = np.take_along_axis(flat, ia, axis=1)
    b = np.take_along_axis(flat, ib, axis=1)
    np.put_along_axis(flat, ia, b, axis=1)
    np.put_along_axis(flat, ib, a, axis=1)


def _local_pair(rng: np.random.Generator, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Two positions 0..8 of a group that share a triple (same box / same box-row)."""
    p1 = rng.integers(9, size=m)
    p2 = 3 * (p1 // 3) + (p1 % 3 + rng.integers(1, 3, size=m)) % 3
    return p1, p2


def _any_pair(rng: np.random.Generator, m: int) -> tuple[np.ndarray, np.ndarray]:
    p1 = rng.integers(9, size=m)
    p2 = (p1 + rng.integers(1, 9, size=m)) % 9
    return p1, p2


def move_line_swap(flat: np.ndarray, deficit: np.ndarray, rng: np.random.Generator) -> None:
    """Swap two rows from different bands or two columns from different stacks."""
    m = len(flat)
    b1 = rng.integers(3, size=m)
    b2 = (b1 + rng.integers(1, 3, size=m)) % 3
    l1 = 3 * b1 + rng.integers(3, size=m)
    l2 = 3 * b2 + rng.integers(3, size=m)
    j = np.arange(9)
    rows = rng.random(m) < 0.5
    ia = np.where(rows[:, None], l1[:, None] * 9 + j, j * 9 + l1[:, None])
    ib = np.where(rows[:, None], l2[:, None] * 9 + j, j * 9 + l2[:, None])
    _swap_cells(flat, ia, ib)


def move_group_permute(flat: np.ndarray, deficit: np.ndarray, rng: np.random.Generator) -> None:
    """Cycle the digits of ``s`` cells inside one group (``s`` small when the deficit is small)."""
    m = len(flat)
    g = rng.integers(27, size=m)
    size = np.where(deficit <= 2, 2, np.where(deficit <= 5, rng.integers(2, 4, size=m), rng.integers(2, 10, size=m)))
    # small deficits: mostly a same-triple pair, whose swap breaks exactly the two crossing groups
    local = (deficit <= 2) & (rng.random(m) < 0.8)
    p1, p2 = _local_pair(rng, m)
    keys = rng.random((m, 9))
    rows = np.flatnonzero(local)
    keys[rows, p1[rows]] = -2.0  # sort the pair first, the other cells after it at random
    keys[rows, p2[rows]] = -1.0
    order = np.argsort(keys, axis=1)
    cells = GROUPS[g[:, None], order]  # [m,9]
    j = np.arange(9)
    src = np.where(j < size[:, None], np.where(j + 1 < size[:, None], j + 1, 0), j)
    vals = np.take_along_axis(flat, cells, axis=1)
    np.put_along_axis(flat, cells, np.take_along_axis(vals, src, axis=1), axis=1)


# move-type probabilities of the corrupt family by deficit: change, local swap, group swap, any swap
_CORRUPT_P = {1: (0.4, 0.2, 0.2, 0.2), 2: (0.15, 0.6, 0.15, 0.1), 3: (0.6, 0.15, 0.15, 0.1)}
_CORRUPT_P_BIG = (0.35, 0.15, 0.25, 0.25)
_CORRUPT_CDF = np.cumsum([_CORRUPT_P.get(d, _CORRUPT_P_BIG) for d in range(MAX_FAIL + 1)], axis=1)


def move_corrupt(flat: np.ndarray, deficit: np.ndarray, rng: np.random.Generator) -> None:
    """Overwrite a cell, or swap two cells (same box-line, same group, or anywhere)."""
    m = len(flat)
    cdf = _CORRUPT_CDF[np.clip(deficit, 0, MAX_FAIL)]
    kind = np.minimum((rng.random(m)[:, None] >= cdf).sum(axis=1), 3)
    ar = np.arange(m)
    # kind 0: overwrite with a different digit
    cell = rng.integers(81, size=m)
    old = flat[ar, cell].astype(np.int64)
    new = (np.clip(old, 1, 9) - 1 + rng.integers(1, 9, size=m)) % 9 + 1
    # kinds 1-3: swaps
    g = rng.integers(27, size=m)
    lp1, lp2 = _local_pair(rng, m)
    ap1, ap2 = _any_pair(rng, m)
    c1 = rng.integers(81, size=m)
    c2 = (c1 + rng.integers(1, 81, size=m)) % 81
    ia = np.select([kind == 1, kind == 2], [GROUPS[g, lp1], GROUPS[g, ap1]], c1)
    ib = np.select([kind == 1, kind == 2], [GROUPS[g, lp2], GROUPS[g, ap2]], c2)
    sw = kind > 0
    a = flat[ar[sw], ia[sw]].copy()
    flat[ar[sw], ia[sw]] = flat[ar[sw], ib[sw]]
    flat[ar[sw], ib[sw]] = a
    ch = ~sw
    flat[ar[ch], cell[ch]] = new[ch]


MOVES = (move_line_swap, move_group_permute, move_corrupt)


#: Proposals evaluated per step (all walkers together) before a walker gets more than one: a
#: thousand rows cost little more than one in per-call overhead, so the last slow walkers are
#: fanned out instead of taking hundreds of nearly empty steps.
FAN_OUT_ROWS = 1024
#: Most proposals one walker gets per step.
MAX_FAN_OUT = 16
#: Proposals in a row without raising the failing count after which a walker restarts (a
#: ``line_swap`` walk to 4 failing boxes from a grid where no single swap gives 4 never gets there).
STALL_PROPOSALS = 128


def fan_out(n_active: int) -> int:
    """Proposals per walker in a step with ``n_active`` walkers: ``FAN_OUT_ROWS // n_active`` in 1..MAX_FAN_OUT."""
    return int(min(MAX_FAN_OUT, max(1, FAN_OUT_ROWS // max(n_active, 1))))


def walk(
    bases: np.ndarray,
    targets: np.ndarray,
    family: np.ndarray,
    rng: np.random.Generator,
    max_steps: int = 60,
    retries: int = 2,
) -> tuple[np.ndarray, np.ndarray]:
    """Random walks from ``bases`` until each board fails exactly ``targets`` checks.

    Each step proposes :func:`fan_out` independent moves per walker (one while many walkers are
    active) and keeps the one with the most failing checks that does not overshoot the target.

    Parameters
    ----------
    bases : valid boards ``[n,9,9]`` (or ``[n,81]``).
    targets : failing-check counts ``[n]`` in 2..27.
    family : family codes ``[n]`` (index into :data:`FAMILIES`).
    max_steps : steps per attempt; an attempt that has not hit its target after ``max_steps``
        steps (or after :data:`STALL_PROPOSALS` proposals without raising its count) restarts from the
        valid base, ``retries`` times with its own family, then with ``corrupt``.

    Returns
    -------
    ``(boards int8 [n,9,9], family int64 [n])``: the family actually used.
    """
    n = len(bases)
    base = np.asarray(bases, dtype=np.int8).reshape(n, 81)
    cur = base.copy()
    family = np.asarray(family, dtype=np.int64).copy()
    targets = np.asarray(targets, dtype=np.int64)
    if n and (targets.min() < MIN_FAIL or targets.max() > MAX_FAIL):
        raise ValueError(f"walk: targets must lie in {MIN_FAIL}..{MAX_FAIL}")
    cnt = np.zeros(n, dtype=np.int64)
    steps = np.zeros(n, dtype=np.int64)
    tries = np.zeros(n, dtype=np.int64)
    stall = np.zeros(n, dtype=np.int64)  # proposals since the failing count last rose
    corrupt = FAMILIES.index("corrupt")
    for _ in range(1000 * max_steps):  # hard bound; corrupt walks always finish
        act = np.flatnonzero(cnt != targets)
        if len(act) == 0:
            break
        stale = act[(steps[act] >= max_steps) | (stall[act] >= STALL_PROPOSALS)]
        if len(stale):  # restart from the valid base; after `retries` restarts switch to corrupt
            cur[stale] = base[stale]
            cnt[stale] = 0
            steps[stale] = 0
            stall[stale] = 0
            tries[stale] += 1
            family[stale[tries[stale] > retries]] = corrupt
        r = fan_out(len(act))
        rep = np.repeat(act, r)  # r proposals per walker, adjacent
        prop = cur[rep]
        deficit = targets[rep] - cnt[rep]
        fam = family[rep]
        for f, move in enumerate(MOVES):
            sel = np.flatnonzero(fam == f)
            if len(sel):
                sub = prop[sel]
                move(sub, deficit[sel], rng)
                prop[sel] = sub
        new = n_failing(prop)
        # keep each walker's proposal with the most failing checks that does not overshoot (first on ties)
        score = np.where(new <= targets[rep], new, -1).reshape(len(act), r)
        best = score.argmax(axis=1)
        pick = np.arange(len(act)) * r + best
        ok = score[np.arange(len(act)), best] >= 0
        up = ok & (new[pick] > cnt[act])
        cur[act[ok]] = prop[pick[ok]]
        cnt[act[ok]] = new[pick[ok]]
        steps[act] += 1
        stall[act] += r
        stall[act[up]] = 0
    else:  # pragma: no cover - unreachable in practice
        raise RuntimeError("walk: did not reach the targets")
    return cur.reshape(n, 9, 9), family
