"""Sudoku as a mixed-integer program, solved with HiGHS.

The model has 729 binaries ``x[r,c,d]`` (cell ``(r,c)`` holds digit ``d+1``)
and 324 equality rows: each cell holds one digit, and each row, column and box
holds each digit once. Givens are imposed through the variable bounds
(``lb = 1``), which HiGHS presolves away.

Randomisation: optimising a random objective to optimality takes ~10 s per
board, so :func:`solve_mip` instead fixes a random first row (and, by default,
a random first column consistent with it) and solves the feasibility problem
with a zero objective (~10 ms per board with ``scipy.optimize.milp``). Different
fixed rows/columns give different grids, also up to digit relabelling.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from synthetic.sudoku.checker import GROUPS


@lru_cache(maxsize=1)
def constraint_matrix():
    """The ``324 x 729`` 0/1 constraint matrix (CSR): cells, rows, columns, boxes.

    Variable ``cell*9 + (digit-1)``; constraint rows in the order: 81 cell
    constraints, then for each of the 27 groups (rows, columns, boxes as in
    :data:`~synthetic.sudoku.checker.GROUPS`) one row per digit.
    """
    from scipy.sparse import csr_matrix

    rows, cols = [], []
    for cell in range(81):  # each cell holds exactly one digit
        rows += [cell] * 9
        cols += [cell * 9 + d for d in range(9)]
    k = 81
    for g in range(27):  # each group holds each digit once
        for d in range(9):
            rows += [k] * 9
            cols += [int(cell) * 9 + d for cell in GROUPS[g]]
            k += 1
    data = np.ones(len(rows), dtype=np.float64)
    return csr_matrix((data, (rows, cols)), shape=(324, 729))


def random_givens(rng: np.random.Generator, first_column: bool = True) -> np.ndarray:
    """A random first row (and optionally first column) that every Sudoku accepts.

    Returns ``int8 [9,9]`` with zeros for free cells. The first column's cells in
    box 1 avoid the row's box-1 digits, so the givens are always completable
    (any such row + column pair extends to a full grid).
    """
    givens = np.zeros((9, 9), dtype=np.int8)
    row = rng.permutation(9) + 1
    givens[0] = row
    if first_column:
        rest = [d for d in range(1, 10) if d not in row[:3]]
        top = rng.choice(rest, size=2, replace=False)  # rows 2-3 of column 1 (box 1)
        others = [d for d in range(1, 10) if d != row[0] and d not in top]
        givens[1:3, 0] = top
        givens[3:, 0] = rng.permutation(others)
    return givens


def solve_mip(
    givens: np.ndarray | None = None,
    rng: np.random.Generator | int | None = None,
    *,
    first_column: bool = True,
    time_limit: float | None = None,
) -> np.ndarray | None:
    """Solve a Sudoku with HiGHS (``scipy.optimize.milp``).

    Parameters
    ----------
    givens : ``[9,9]`` digits with 0 for empty cells. ``None`` draws random givens
        from ``rng`` (:func:`random_givens`), which yields a random full grid.
    rng : generator or seed for the random givens (ignored when ``givens`` is set).
    first_column : with random givens, also fix a random first column.
    time_limit : optional HiGHS time limit in seconds.

    Returns
    -------
    ``int8 [9,9]`` solution, or ``None`` when the givens admit no solution.
    """
    from scipy.optimize import Bounds, LinearConstraint, milp

    if givens is None:
        givens = random_givens(np.random.default_rng(rng), first_column=first_column)
    givens = np.asarray(givens)
    if givens.shape != (9, 9):
        raise ValueError(f"solve_mip: givens must be [9,9], got {givens.shape}")
    if ((givens < 0) | (givens > 9)).any():
        raise ValueError("solve_mip: givens must be digits 0..9 (0 = empty)")
    lb = np.zeros(729)
    cells = np.flatnonzero(givens.reshape(-1) > 0)
    lb[cells * 9 + givens.reshape(-1)[cells].astype(np.int64) - 1] = 1.0
    options = {"disp": False}
    if time_limit is not None:
        options["time_limit"] = float(time_limit)
    res = milp(
        c=np.zeros(729),
        constraints=LinearConstraint(constraint_matrix(), 1.0, 1.0),
        integrality=np.ones(729),
        bounds=Bounds(lb, np.ones(729)),
        options=options,
    )
    if res.x is None or res.status != 0:
        return None
    return (res.x.reshape(81, 9).argmax(axis=1) + 1).astype(np.int8).reshape(9, 9)


def is_unique(givens: np.ndarray, time_limit: float | None = None) -> bool:
    """Whether a puzzle has exactly one solution: solve, cut that solution off, solve again.

    Raises ``ValueError`` if the puzzle has no solution at all.
    """
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import vstack

    first = solve_mip(givens, time_limit=time_limit)
    if first is None:
        raise ValueError("is_unique: the puzzle has no solution")
    x = np.zeros(729)
    x[np.arange(81) * 9 + first.reshape(-1).astype(np.int64) - 1] = 1.0
    lb = np.zeros(729)
    g = np.asarray(givens).reshape(-1)
    cells = np.flatnonzero(g > 0)
    lb[cells * 9 + g[cells].astype(np.int64) - 1] = 1.0
    a = vstack([constraint_matrix(), x[None, :]]).tocsr()
    lo = np.r_[np.ones(324), -np.inf]
    hi = np.r_[np.ones(324), 80.0]  # differ from the first solution in at least one cell
    res = milp(
        c=np.zeros(729),
        constraints=LinearConstraint(a, lo, hi),
        integrality=np.ones(729),
        bounds=Bounds(lb, np.ones(729)),
        options={"disp": False} | ({"time_limit": float(time_limit)} if time_limit else {}),
    )
    if res.status == 2:  # infeasible: no second solution
        return True
    if res.status == 0:
        return False
    raise TimeoutError(f"is_unique: HiGHS stopped without an answer ({res.message})")
