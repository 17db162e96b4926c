"""Sudoku as a mixed-integer program, solved with HiGHS.

The model has 729 binaries ``x[r,c,d]`` (cell ``(r,c)`` holds digit ``d+1``)
and 324 equality rows (a 4x4 board: 64 and 64): each cell holds one digit, and each row, column and box
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

from synthetic.sudoku.geometry import geometry, infer_box


@lru_cache(maxsize=4)
def constraint_matrix(box: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """The 0/1 constraint matrix (``324 x 729`` for 9x9 boards, ``64 x 64`` for 4x4) as ``(rows,
    cols)`` of its ones: cells, rows, columns, boxes.

    Variable ``cell*n + (digit-1)``; constraint rows in the order: ``n*n`` cell
    constraints, then for each of the ``3n`` groups (rows, columns, boxes as in
    :data:`~synthetic.sudoku.checker.GROUPS`) one row per digit.
    """
    g = geometry(box)
    n, cells = g.n, g.cells
    digits = np.arange(n)
    cell_rows = np.repeat(np.arange(cells), n)  # each cell holds exactly one digit
    cell_cols = np.arange(cells * n)
    group_rows = cells + np.repeat(np.arange(g.n_groups * n), n)  # each group holds each digit once: row cells + n*grp + d
    group_cols = (g.groups[:, None, :] * n + digits[None, :, None]).reshape(-1)  # [grp, d, member]
    return np.concatenate([cell_rows, group_rows]), np.concatenate([cell_cols, group_cols])


def _colwise(rows: np.ndarray, cols: np.ndarray, n_cols: int) -> tuple[np.ndarray, np.ndarray]:
    """Column starts and row indices (sorted within each column) of a 0/1 matrix's ones."""
    order = np.lexsort((rows, cols))
    start = np.concatenate([[0], np.cumsum(np.bincount(cols, minlength=n_cols))])
    return start.astype(np.int32), rows[order].astype(np.int32)


def random_givens(rng: np.random.Generator, first_column: bool = True, box: int = 3) -> np.ndarray:
    """A random first row (and optionally first column) that every Sudoku accepts.

    Returns ``int8 [n,n]`` with zeros for free cells. The first column's cells in
    box 1 avoid the row's box-1 digits, so the givens are always completable
    (any such row + column pair extends to a full grid).
    """
    b = box
    n = b * b
    givens = np.zeros((n, n), dtype=np.int8)
    row = rng.permutation(n) + 1
    givens[0] = row
    if first_column:
        rest = [d for d in range(1, n + 1) if d not in row[:b]]
        top = rng.choice(rest, size=b - 1, replace=False)  # the other rows of column 1 inside box 1
        others = [d for d in range(1, n + 1) if d != row[0] and d not in top]
        givens[1:b, 0] = top
        givens[b:, 0] = rng.permutation(others)
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
    n = np.shape(givens)[-1]
    g = np.asarray(givens).reshape(-1)
    lb = np.zeros(len(g) * n)
    cells = np.flatnonzero(g > 0)
    lb[cells * n + g[cells].astype(np.int64) - 1] = 1.0
    return lb


def solve_mip(
    givens: np.ndarray | None = None,
    rng: np.random.Generator | int | None = None,
    *,
    first_column: bool = True,
    time_limit: float | None = None,
    box: int | None = None,
) -> np.ndarray | None:
    """Solve a Sudoku with HiGHS.

    Parameters
    ----------
    givens : ``[n,n]`` digits with 0 for empty cells (``n`` = 9, or 4 for ``box=2``). ``None`` draws random givens
        from ``rng`` (:func:`random_givens`), which yields a random full grid.
    rng : generator or seed for the random givens (ignored when ``givens`` is set).
    first_column : with random givens, also fix a random first column.
    time_limit : optional HiGHS time limit in seconds.
    box : box side; ``None`` reads it from ``givens`` (3 when they are drawn).

    Returns
    -------
    ``int8 [n,n]`` solution, or ``None`` when the givens admit no solution.
    """
    if givens is None:
        givens = random_givens(np.random.default_rng(rng), first_column=first_column, box=3 if box is None else box)
    givens = np.asarray(givens)
    try:
        g = geometry(infer_box(givens) if box is None else box)
    except ValueError:
        g = None
    if g is None or givens.shape != (g.n, g.n):
        raise ValueError(f"solve_mip: givens must be [9,9] (or [4,4] for box=2), got {givens.shape}")
    if ((givens < 0) | (givens > g.n)).any():
        raise ValueError(f"solve_mip: givens must be digits 0..{g.n} (0 = empty)")
    n_rows = g.cells + g.n_groups * g.n
    status, x = _highs(constraint_matrix(g.box), np.ones(n_rows), np.ones(n_rows), _given_bounds(givens), time_limit)
    if x is None:
        return None
    return (x.reshape(g.cells, g.n).argmax(axis=1) + 1).astype(np.int8).reshape(g.n, g.n)


def is_unique(givens: np.ndarray, time_limit: float | None = None) -> bool:
    """Whether a puzzle has exactly one solution: solve, cut that solution off, solve again.

    Raises ``ValueError`` if the puzzle has no solution at all.
    """
    first = solve_mip(givens, time_limit=time_limit)
    if first is None:
        raise ValueError("is_unique: the puzzle has no solution")
    g = geometry(infer_box(first))
    n_rows = g.cells + g.n_groups * g.n
    chosen = np.arange(g.cells) * g.n + first.reshape(-1).astype(np.int64) - 1  # the first solution's ones
    rows, cols = constraint_matrix(g.box)
    ones = (np.concatenate([rows, np.full(g.cells, n_rows)]), np.concatenate([cols, chosen]))
    lo = np.r_[np.ones(n_rows), -np.inf]
    hi = np.r_[np.ones(n_rows), g.cells - 1.0]  # differ from the first solution in at least one cell
    status, _ = _highs(ones, lo, hi, _given_bounds(givens), time_limit)
    if status == "infeasible":  # no second solution
        return True
    if status == "optimal":
        return False
    raise TimeoutError(f"is_unique: HiGHS stopped without an answer ({status})")


@lru_cache(maxsize=1)
def all_grids_4x4() -> np.ndarray:
    """Every valid 4x4 grid, ``int8 [288, 4, 4]`` in lexicographic order: the 24**4 stacks of
    permutation rows filtered by the exact checker (0.1 s), so 4x4 boards are drawn uniformly
    without a solver."""
    from itertools import permutations

    from synthetic.sudoku.checker import check_board

    rows = np.array(list(permutations(range(1, 5))), dtype=np.int8)  # [24, 4], lexicographic
    pick = np.stack(np.meshgrid(*[np.arange(24)] * 4, indexing="ij"), -1).reshape(-1, 4)
    boards = rows[pick]  # [24**4, 4, 4]
    out = boards[check_board(boards, 2).all(1)]
    out.setflags(write=False)
    return out
