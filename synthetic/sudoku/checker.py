"""Exact, vectorised Sudoku checker: the only source of concept labels.

On the 9x9 board the 27 concepts are, in this order, ``row1..row9``, ``col1..col9``,
``box1..box9`` (boxes numbered row-major: ``box1`` top-left, ``box3``
top-right, ``box9`` bottom-right). Concept ``j`` is true iff its group of nine
cells contains each digit 1..9 exactly once; the label is the AND of all 27.

The test is arithmetic, not set-based: a group is valid iff
``sum(2**d) == 2**1 + ... + 2**9 = 1022`` over its nine cells (cells outside
1..9 contribute 0), all 27 sums computed as one ``[N,81] @ [81,27]`` product. Nine powers of two sum to a number with nine one-bits only
when no carry happens, i.e. when they are pairwise distinct, so the test is
exact. A 4x4 board (``box=2``) is checked the same way by its own tables
(:mod:`synthetic.sudoku.geometry`): 12 checks, valid sum ``2 + 4 + 8 + 16 = 30``.

Reachability of failing-check counts (documented here because the negative
sampler relies on it): on any 9x9 filling, **exactly one failing check is
impossible**. If the failing check is a row, the nine valid columns put each
digit exactly 9 times on the board and the eight valid rows account for 8 of
them, so the remaining row also holds each digit once (same argument for a
column via the rows, and for a box via the rows and the other 8 boxes). The
minimum for an invalid board is therefore 2 (e.g. swapping two cells of one row
inside one box breaks exactly their two columns); every count 2..27 is
reachable. The same counting shows that two failing checks are always two rows
of one band or two columns of one stack (18 patterns): a failing row and a
failing column (or box) would leave one type with a single failure, two rows of
different bands would leave a band with one bad row and three good boxes, and
two boxes would have to share both their band and their stack.
"""

from __future__ import annotations

import numpy as np

from synthetic.sudoku.geometry import geometry, infer_box

_G9 = geometry(3)
#: Flat cell indices (``r*9 + c``) of the 27 groups, shape ``[27, 9]``. Within a
#: row or column the cells are in reading order, so positions 0-2 / 3-5 / 6-8
#: share a box; within a box they are row-major, so 0-2 / 3-5 / 6-8 share a row.
#: (:func:`~synthetic.sudoku.geometry.geometry` gives the tables of 4x4 boards.)
GROUPS: np.ndarray = _G9.groups

#: Concept names in column order of :func:`check_board`.
CONCEPT_NAMES: list[str] = _G9.concept_names

#: For every cell, the indices of its three groups (row, column, box), shape ``[81, 3]``.
CELL_GROUPS: np.ndarray = _G9.cell_groups


def check_board(boards: np.ndarray, box: int | None = None) -> np.ndarray:
    """The exact checks of one board ``[n,n]`` or many ``[N,n,n]`` / ``[N,n*n]``.

    Parameters
    ----------
    boards : integer array of digits; values outside 1..n never satisfy a check.
    box : box side (3: 9x9 boards, 27 checks; 2: 4x4 boards, 12 checks); ``None`` reads it from
        the array's shape (:func:`~synthetic.sudoku.geometry.infer_box`).

    Returns
    -------
    ``bool [N,3n]`` (or ``[3n]`` for a single board), columns as the geometry's concept names
    (:data:`CONCEPT_NAMES` for 9x9).

    Examples
    --------
    >>> import numpy as np
    >>> b = (np.arange(9)[:, None] * 3 + np.arange(9)[None, :] + np.arange(9)[:, None] // 3) % 9 + 1
    >>> bool(check_board(b).all())
    True
    >>> b[0, [0, 1]] = b[0, [1, 0]]  # swap two cells of row 1 inside box 1
    >>> [CONCEPT_NAMES[j] for j in np.flatnonzero(~check_board(b))]
    ['col1', 'col2']
    """
    arr = np.asarray(boards)
    g = geometry(infer_box(arr) if box is None else box)
    single = arr.ndim == 2 and arr.shape == (g.n, g.n)
    flat = arr.reshape(-1, g.cells)
    if flat.dtype.kind not in "iu":
        raise TypeError(f"check_board: boards must be integers, got {flat.dtype}")
    if flat.dtype.itemsize == 1:  # int8 / uint8: any byte indexes the table (negatives -> >= 128 -> 0)
        idx = flat.view(np.uint8)
    else:
        idx = np.where((flat >= 0) & (flat <= g.n), flat, 0).astype(np.uint8)
    out = (g.powers[idx] @ g.member) == g.full  # [N,n*n] @ [n*n,3n]
    return out[0] if single else out


def n_failing(boards: np.ndarray, box: int | None = None) -> np.ndarray:
    """Number of failing checks per board, ``int64 [N]``."""
    arr = np.asarray(boards)
    g = geometry(infer_box(arr) if box is None else box)
    return g.n_groups - check_board(arr.reshape(-1, g.cells), g.box).sum(axis=1).astype(np.int64)
