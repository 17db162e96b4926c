"""concept-benchmark 0.4's invalid boards (``corruption=swaps``): a valid board changed by 1 to
``max_cell_swaps`` actions (the count uniform), each drawn uniformly from six, redrawn while the
board is still valid. Vectorised over boards: step ``t`` acts on every board with ``t`` or more
actions, each action kind on its boards at once.

Boards of any box size (``[K, n, n]``, ``n = box**2``: 9x9 or 4x4). Actions (a band is ``box`` rows
of boxes, a stack ``box`` columns):

0. two cells of one column inside one band swap (two rows fail; columns and boxes hold);
1. two cells of one row inside one stack swap (two columns fail);
2. two whole rows from different bands swap (boxes fail; rows and columns hold);
3. two whole columns from different stacks swap (boxes fail);
4. one cell of a row is overwritten by another cell of that row (a duplicate: up to three checks);
5. one cell of a column is overwritten by another cell of that column.
"""

from __future__ import annotations

from math import isqrt

import numpy as np

from synthetic.sudoku.checker import check_board

#: Action names, in the order of their codes.
ACTIONS = ("swap_in_column", "swap_in_row", "rows_across_bands", "cols_across_stacks", "duplicate_in_row", "duplicate_in_column")
#: Redraws of a board the actions left valid before giving up (each redraw is rare: two swaps
#: undoing each other, a duplicate of an equal value cannot happen on a valid board).
MAX_REDRAWS = 100


def _two_distinct(rng: np.random.Generator, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    a = rng.integers(0, n, k)
    b = (a + rng.integers(1, n, k)) % n
    return a, b


def _act(boards: np.ndarray, kind: int, rng: np.random.Generator) -> None:
    """Apply action ``kind`` once to each of ``boards [K, n, n]`` (in place)."""
    k, n = len(boards), boards.shape[-1]
    box = isqrt(n)
    rows = np.arange(k)
    if kind in (0, 1):  # a swap of two cells in one line inside one band / stack
        line = rng.integers(0, n, k)
        group = rng.integers(0, box, k)
        u, v = _two_distinct(rng, box, k)
        a, b = group * box + u, group * box + v
        if kind == 0:  # same column, rows a and b of one band
            boards[rows, a, line], boards[rows, b, line] = boards[rows, b, line].copy(), boards[rows, a, line].copy()
        else:
            boards[rows, line, a], boards[rows, line, b] = boards[rows, line, b].copy(), boards[rows, line, a].copy()
    elif kind in (2, 3):  # two whole lines from different bands / stacks
        g1, g2 = _two_distinct(rng, box, k)
        a = g1 * box + rng.integers(0, box, k)
        b = g2 * box + rng.integers(0, box, k)
        if kind == 2:
            boards[rows, a], boards[rows, b] = boards[rows, b].copy(), boards[rows, a].copy()
        else:
            boards[rows, :, a], boards[rows, :, b] = boards[rows, :, b].copy(), boards[rows, :, a].copy()
    else:  # a duplicate inside one line
        line = rng.integers(0, n, k)
        src, dst = _two_distinct(rng, n, k)
        if kind == 4:
            boards[rows, line, dst] = boards[rows, line, src]
        else:
            boards[rows, dst, line] = boards[rows, src, line]


def corrupt(valid: np.ndarray, max_actions: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Invalid boards from ``valid [N, n, n]``: returns ``(boards, n_actions)``."""
    n = len(valid)
    out = valid.copy()
    n_actions = rng.integers(1, max_actions + 1, n)
    todo = np.arange(n)
    for _ in range(MAX_REDRAWS):
        work = valid[todo].copy()
        for t in range(1, max_actions + 1):
            active = np.flatnonzero(n_actions[todo] >= t)
            kinds = rng.integers(0, len(ACTIONS), len(active))
            for kind in range(len(ACTIONS)):
                sel = active[kinds == kind]
                if len(sel):
                    part = work[sel]
                    _act(part, kind, rng)
                    work[sel] = part
        out[todo] = work
        still = check_board(work).all(1)
        todo = todo[still]
        if not len(todo):
            return out, n_actions
    raise RuntimeError("corrupt: could not make every board invalid")  # pragma: no cover
