"""Sudoku as a mixed-integer program, solved with HiGHS.

The model has 729 binaries ``x[r,c,d]`` (cell ``(r,c)`` holds digit ``d+1``)
and 324 equality rows: each cell holds one digit, and each row, column and box
holds each digit once. Givens are imposed through the variable bounds
(``lb = 1``), which HiGHS presolves away.

Randomisation: optimising a random objective to optimality takes ~10 s per
board, so :func:`solve_mip` instead fixes a random first row (and, by default,
a random first column consistent with it) and solves the feasibility problem
with a zero objective (~10 ms per board). Different fixed rows/columns give different
grids, also up to digit relabelling.

HiGHS is called through ``highspy`` directly: the same model and the same solutions as
``scipy.optimize.milp`` (which wraps it), without the ~0.8 s import of ``scipy.optimize`` that a
new process would otherwise pay before its first board.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from synthetic.sudoku.checker import GROUPS


@lru_cache(maxsize=1)
def constraint_matrix() -> tuple[np.ndarray, np.ndarray]:
    """The ``324 x 729`` 0/1 constraint matrix as ``(rows, cols)`` of its ones: cells, rows,
    columns, boxes.

    Variable ``cell*9 + (digit-1)``; constraint rows in the order: 81 cell
    constraints, then for each of the 27 groups (rows, columns, boxes as in
    :data:`~synthetic.sudoku.checker.GROUPS`) one row per digit.
    """
    digits = np.arange(9)
    cell_rows = np.repeat(np.arange(81), 9)  # each cell holds exactly one digit
    cell_cols = np.arange(729)
    group_rows = 81 + np.repeat(np.arange(27 * 9), 9)  # each group holds each digit once: row 81 + 9g + d
    group_cols = (GROUPS.astype(np.int64)[:, None, :] * 9 + digits[None, :, None]).reshape(-1)  # [g, d, member]
    return np.concatenate([cell_rows, group_rows]), np.concatenate([cell_cols, group_cols])


def _colwise(rows: np.ndarray, cols: np.ndarray, n_cols: int) -> tuple[np.ndarray, np.ndarray]:
    """Column starts and row indices (sorted within each column) of a 0/1 matrix's ones."""
    order = np.lexsort((rows, cols))
    start = np.concatenate([[0], np.cumsum(np.bincount(cols, minlength=n_cols))])
    return start.astype(np.int32), rows[order].astype(np.int32)


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


def _highs(ones: tuple[np.ndarray, np.ndarray], row_lower: np.ndarray, row_upper: np.ndarray, col_lower: np.ndarray,
           time_limit: float | None) -> tuple[str, np.ndarray | None]:  # fmt: skip
    """Solve the 0/1 feasibility problem ``row_lower <= A x <= row_upper``, ``col_lower <= x <= 1``,
    ``x`` integer, zero objective, ``A``'s ones at ``ones = (rows, cols)``. Returns
    ``("optimal", x)``, ``("infeasible", None)`` or ``("stopped: <status>", None)``."""
    import highspy

    # the raw solver: highspy.Highs wraps it with Python callbacks whose set-up prints HiGHS's banner
    h = getattr(getattr(highspy, "_core", None), "_Highs", highspy.Highs)()
    h.setOptionValue("output_flag", False)
    if time_limit is not None:
        h.setOptionValue("time_limit", float(time_limit))
    n_cols = len(col_lower)
    start, index = _colwise(*ones, n_cols)
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = n_cols, len(row_lower)
    lp.col_cost_ = np.zeros(n_cols)
    lp.col_lower_, lp.col_upper_ = col_lower, np.ones(n_cols)
    lp.row_lower_, lp.row_upper_ = row_lower, row_upper
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = start, index, np.ones(len(index))
    lp.integrality_ = [highspy.HighsVarType.kInteger] * n_cols
    h.passModel(lp)
    h.run()
    status = h.getModelStatus()
    if status == highspy.HighsModelStatus.kOptimal:
        return "optimal", np.asarray(h.getSolution().col_value)
    if status == highspy.HighsModelStatus.kInfeasible:
        return "infeasible", None
    return f"stopped: {h.modelStatusToString(status)}", None


def _given_bounds(givens: np.ndarray) -> np.ndarray:
    """Variable lower bounds: 1 for each given digit, else 0."""
    lb = np.zeros(729)
    g = np.asarray(givens).reshape(-1)
    cells = np.flatnonzero(g > 0)
    lb[cells * 9 + g[cells].astype(np.int64) - 1] = 1.0
    return lb


def solve_mip(
    givens: np.ndarray | None = None,
    rng: np.random.Generator | int | None = None,
    *,
    first_column: bool = True,
    time_limit: float | None = None,
) -> np.ndarray | None:
    """Solve a Sudoku with HiGHS.

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
    if givens is None:
        givens = random_givens(np.random.default_rng(rng), first_column=first_column)
    givens = np.asarray(givens)
    if givens.shape != (9, 9):
        raise ValueError(f"solve_mip: givens must be [9,9], got {givens.shape}")
    if ((givens < 0) | (givens > 9)).any():
        raise ValueError("solve_mip: givens must be digits 0..9 (0 = empty)")
    status, x = _highs(constraint_matrix(), np.ones(324), np.ones(324), _given_bounds(givens), time_limit)
    if x is None:
        return None
    return (x.reshape(81, 9).argmax(axis=1) + 1).astype(np.int8).reshape(9, 9)


def is_unique(givens: np.ndarray, time_limit: float | None = None) -> bool:
    """Whether a puzzle has exactly one solution: solve, cut that solution off, solve again.

    Raises ``ValueError`` if the puzzle has no solution at all.
    """
    first = solve_mip(givens, time_limit=time_limit)
    if first is None:
        raise ValueError("is_unique: the puzzle has no solution")
    chosen = np.arange(81) * 9 + first.reshape(-1).astype(np.int64) - 1  # the first solution's ones
    rows, cols = constraint_matrix()
    ones = (np.concatenate([rows, np.full(81, 324)]), np.concatenate([cols, chosen]))
    lo = np.r_[np.ones(324), -np.inf]
    hi = np.r_[np.ones(324), 80.0]  # differ from the first solution in at least one cell
    status, _ = _highs(ones, lo, hi, _given_bounds(givens), time_limit)
    if status == "infeasible":  # no second solution
        return True
    if status == "optimal":
        return False
    raise TimeoutError(f"is_unique: HiGHS stopped without an answer ({status})")
