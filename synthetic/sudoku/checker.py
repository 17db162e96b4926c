"""Exact, vectorised Sudoku checker: the only source of concept labels.

The 27 concepts are, in this order, ``row1..row9``, ``col1..col9``,
``box1..box9`` (boxes numbered row-major: ``box1`` top-left, ``box3``
top-right, ``box9`` bottom-right). Concept ``j`` is true iff its group of nine
cells contains each digit 1..9 exactly once; the label is the AND of all 27.

The test is arithmetic, not set-based: a group is valid iff
``sum(2**d) == 2**1 + ... + 2**9 = 1022`` over its nine cells (cells outside
1..9 contribute 0), all 27 sums computed as one ``[N,81] @ [81,27]`` product. Nine powers of two sum to a number with nine one-bits only
when no carry happens, i.e. when they are pairwise distinct, so the test is
exact.

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

#: Flat cell indices (``r*9 + c``) of the 27 groups, shape ``[27, 9]``. Within a
#: row or column the cells are in reading order, so positions 0-2 / 3-5 / 6-8
#: share a box; within a box they are row-major, so 0-2 / 3-5 / 6-8 share a row.
GROUPS: np.ndarray = np.array(
    [[r * 9 + c for c in range(9)] for r in range(9)]
    + [[r * 9 + c for r in range(9)] for c in range(9)]
    + [[(3 * (b // 3) + i // 3) * 9 + 3 * (b % 3) + i % 3 for i in range(9)] for b in range(9)],
    dtype=np.int64,
)

#: Concept names in column order of :func:`check_board`.
CONCEPT_NAMES: list[str] = (
    [f"row{i}" for i in range(1, 10)] + [f"col{i}" for i in range(1, 10)] + [f"box{i}" for i in range(1, 10)]
)

#: For every cell, the indices of its three groups (row, column, box), shape ``[81, 3]``.
CELL_GROUPS: np.ndarray = np.array(
    [[r, 9 + c, 18 + 3 * (r // 3) + c // 3] for r in range(9) for c in range(9)], dtype=np.int64
)

_FULL = np.float32(sum(1 << d for d in range(1, 10)))  # 1022
# 2**d for d in 0..255 (uint8 view of any board); anything outside 1..9 maps to 0.
_POW = np.zeros(256, dtype=np.float32)
_POW[1:10] = 2.0 ** np.arange(1, 10)
# group membership [81, 27]: the 27 group sums are one small matrix product (exact in float32:
# the largest possible sum, 9 * 512, is far below 2**24)
_MEMBER = np.zeros((81, 27), dtype=np.float32)
_MEMBER[GROUPS.T.reshape(-1), np.tile(np.arange(27), 9)] = 1.0


def check_board(boards: np.ndarray) -> np.ndarray:
    """The 27 exact checks of one board ``[9,9]`` or many ``[N,9,9]`` / ``[N,81]``.

    Parameters
    ----------
    boards : integer array of digits; values outside 1..9 never satisfy a check.

    Returns
    -------
    ``bool [N,27]`` (or ``[27]`` for a single board), columns as :data:`CONCEPT_NAMES`.

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
    single = arr.ndim == 2 and arr.shape == (9, 9)
    flat = arr.reshape(-1, 81)
    if flat.dtype.kind not in "iu":
        raise TypeError(f"check_board: boards must be integers, got {flat.dtype}")
    if flat.dtype.itemsize == 1:  # int8 / uint8: any byte indexes the table (negatives -> >= 128 -> 0)
        idx = flat.view(np.uint8)
    else:
        idx = np.where((flat >= 0) & (flat <= 9), flat, 0).astype(np.uint8)
    out = (_POW[idx] @ _MEMBER) == _FULL  # [N,81] @ [81,27]
    return out[0] if single else out


def n_failing(boards: np.ndarray) -> np.ndarray:
    """Number of failing checks per board, ``int64 [N]``."""
    return 27 - check_board(np.asarray(boards).reshape(-1, 81)).sum(axis=1).astype(np.int64)
