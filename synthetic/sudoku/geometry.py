"""Board geometry of a Sudoku with ``box x box`` boxes: ``n = box**2`` digits, ``n x n`` cells and
``3n`` group checks (``box=3``: the 9x9 board, 27 checks; ``box=2``: concept-benchmark 0.4's
``block_size=2``, 4x4 boards with 12 checks).

Groups are, in order, ``row1..rown``, ``col1..coln``, ``box1..boxn`` (boxes row-major). Within a row
or column the cells are in reading order, within a box row-major. Everything here is a pure function
of ``box`` and cached, so the checker, solver, transforms and renderer share one table each.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from math import isqrt

import numpy as np

#: Box sizes the generator supports (2: 4x4 boards, 3: the 9x9 board). Digits are stored in int8
#: and rendered from the 0..9 glyph bank, which bounds ``n = box**2`` at 9.
BOXES = (2, 3)


@dataclass(frozen=True)
class Geometry:
    """The tables of one board size (build with :func:`geometry`)."""

    box: int

    @property
    def n(self) -> int:
        """Side of the board = number of digits = cells per group."""
        return self.box * self.box

    @property
    def cells(self) -> int:
        return self.n * self.n

    @property
    def n_groups(self) -> int:
        """Number of checks (concepts): ``3n``."""
        return 3 * self.n

    @cached_property
    def groups(self) -> np.ndarray:
        """Flat cell indices ``r*n + c`` of the groups, ``int64 [3n, n]``."""
        n, b = self.n, self.box
        rows = [[r * n + c for c in range(n)] for r in range(n)]
        cols = [[r * n + c for r in range(n)] for c in range(n)]
        boxes = [[(b * (g // b) + i // b) * n + b * (g % b) + i % b for i in range(n)] for g in range(n)]
        out = np.array(rows + cols + boxes, dtype=np.int64)
        out.setflags(write=False)
        return out

    @cached_property
    def cell_groups(self) -> np.ndarray:
        """For every cell its row, column and box group, ``int64 [n*n, 3]``."""
        n, b = self.n, self.box
        out = np.array([[r, n + c, 2 * n + b * (r // b) + c // b] for r in range(n) for c in range(n)], dtype=np.int64)
        out.setflags(write=False)
        return out

    @cached_property
    def concept_names(self) -> list[str]:
        """Check names in the checker's column order."""
        return [f"{kind}{i}" for kind in ("row", "col", "box") for i in range(1, self.n + 1)]

    @cached_property
    def member(self) -> np.ndarray:
        """Group membership ``float32 [n*n, 3n]`` (1 where a cell belongs to a group)."""
        m = np.zeros((self.cells, self.n_groups), dtype=np.float32)
        m[self.groups.T.reshape(-1), np.tile(np.arange(self.n_groups), self.n)] = 1.0
        m.setflags(write=False)
        return m

    @property
    def full(self) -> np.float32:
        """``sum(2**d for d in 1..n)``: the power sum of a valid group (see :mod:`synthetic.sudoku.checker`)."""
        return np.float32(sum(1 << d for d in range(1, self.n + 1)))

    @cached_property
    def powers(self) -> np.ndarray:
        """``2**d`` for a cell byte ``d`` in 1..n, 0 for anything else, ``float32 [256]``."""
        p = np.zeros(256, dtype=np.float32)
        p[1 : self.n + 1] = 2.0 ** np.arange(1, self.n + 1)
        p.setflags(write=False)
        return p

    @cached_property
    def tile_class(self) -> np.ndarray:
        """Per cell ``2*[thick line on top] + [thick line on the left]`` (box edges), ``intp [n*n]``."""
        r, c = np.divmod(np.arange(self.cells), self.n)
        out = (2 * (r % self.box == 0) + (c % self.box == 0)).astype(np.intp)
        out.setflags(write=False)
        return out


@lru_cache(maxsize=len(BOXES))
def geometry(box: int = 3) -> Geometry:
    """The geometry of ``box x box`` boxes (``box`` in :data:`BOXES`)."""
    if box not in BOXES:
        raise ValueError(f"block_size={box!r} is not supported: use one of {list(BOXES)} (4x4 or 9x9 boards)")
    return Geometry(int(box))


def n_valid_grids(box: int) -> int:
    """Number of valid completed grids: 288 for 4x4 (so 4x4 datasets repeat boards), about 6.7e21 for 9x9."""
    return {2: 288, 3: 6_670_903_752_021_072_936_960}[geometry(box).box]


def box_of_side(side: int) -> int:
    """``box`` of a board whose side is ``side`` cells (4 or 9)."""
    b = isqrt(int(side))
    if b * b != side or b not in BOXES:
        raise ValueError(f"a Sudoku board side of {side} cells is not supported (4 or 9)")
    return b


def infer_box(boards: np.ndarray) -> int:
    """``box`` of an array of boards: ``[n,n]``, ``[N,n,n]`` or flat ``[N,n*n]`` (``n`` = 4 or 9)."""
    shape = np.shape(boards)
    if len(shape) >= 2 and shape[-1] == shape[-2] and shape[-1] in (4, 9):
        return box_of_side(shape[-1])
    if len(shape) >= 1 and shape[-1] in (16, 81):
        return box_of_side(isqrt(shape[-1]))
    raise ValueError(f"boards of shape {tuple(shape)} are no 4x4 or 9x9 Sudoku boards ([n,n], [N,n,n] or [N,n*n])")
