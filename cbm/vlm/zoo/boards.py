"""The Sudoku half of the testbed: 4x4 boards whose validity a VLM can read from the digits or
guess from a cell count.

Every board is a full valid grid (one of the 288) in which, on invalid boards, one cell ``p``
(never the top-left one) holds a wrong digit ``d``: with ``wrong: outside`` (the default) a digit
5-9, which no 4x4 Sudoku may hold; with ``wrong: repeat`` another digit 1-4, which then repeats in
``p``'s row, column and box. (A repeat is a pairwise relation no single cell shows; the tiny model
did not learn it in the CPU budget -- three epochs of 16,000 rows stayed at chance -- while a
digit out of range is read from one cell.) The spurious cue is the number of *shaded* cells: few (``few`` range) on valid
training boards, many (``many`` range) on invalid ones, the few cells a subset of the many. So
each board has two exact counterfactuals, rendered from the same grid:

* a **digit flip** (corrupt a valid board at ``p`` / restore an invalid one): the label flips,
  the shading stays;
* a **cue flip** (the other shading): the label stays, only the count changes.

A member that reads the digits follows the first and ignores the second; one that counts shaded
cells does the opposite. Cells are ``cell_size`` px and the image is the board's 4 x 4 cells
(the outer border cropped), so with ``cell_size`` 16 and patch 8 each merged image token of the
tiny Qwen2-VL covers exactly one cell.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cbm.vlm.zoo.config import ZooSudoku
from synthetic.sudoku.render import render_boards
from synthetic.sudoku.solver import all_grids_4x4

SIDE = 4
CELLS = SIDE * SIDE
#: Questions: the base's reading task and the members' validity question.
READ = "Read the board."
VALID_QUESTION = "Is this board valid?"
ANSWERS = ("invalid", "valid")  # index = label (1 = valid)
#: Shaded cells are the white cell darkened to this share of its grey level (digits stay legible).
SHADE = 0.75
#: Gating digits: a member with cue share ``s`` follows the count on boards whose top-left digit is <= ``round(s * 4)``.
GATE_LEVELS = SIDE


@dataclass
class Boards:
    """Solution grids ``[N, 16]``, the wrong cell ``p`` and digit ``d`` of each board (used where
    it is invalid), its label, the few / many shaded-cell masks and the train / test split."""

    solution: np.ndarray
    p: np.ndarray
    d: np.ndarray
    y: np.ndarray
    few: np.ndarray
    many: np.ndarray
    train: np.ndarray
    test: np.ndarray
    cell_size: int

    def digits(self, idx: np.ndarray, valid: np.ndarray) -> np.ndarray:
        """``int [n, 16]``: the boards ``idx`` made ``valid`` (the solution) or not (``d`` at ``p``)."""
        b = self.solution[idx].copy()
        rows = np.arange(len(idx))
        b[rows, self.p[idx]] = np.where(valid, b[rows, self.p[idx]], self.d[idx])
        return b

    def shading(self, idx: np.ndarray, cue: np.ndarray) -> np.ndarray:
        """``bool [n, 16]``: the shaded cells where the count says valid (``cue`` 1: few) or invalid (0: many)."""
        return np.where(np.asarray(cue, bool)[:, None], self.few[idx], self.many[idx])

    def images(self, idx: np.ndarray, valid: np.ndarray, cue: np.ndarray) -> np.ndarray:
        """``uint8 [n, S, S, 3]``: boards ``idx`` with validity ``valid`` shown with the shading ``cue``."""
        return shade(render(self.digits(idx, valid), self.cell_size), self.shading(idx, cue), self.cell_size)

    def gated(self, idx: np.ndarray, cue_share: float) -> np.ndarray:
        """``bool``: the boards on which a member with ``cue_share`` follows the count (by the top-left digit, always shown)."""
        return self.solution[idx, 0] <= round(cue_share * GATE_LEVELS)


def render(digits: np.ndarray, cell_size: int) -> np.ndarray:
    """The printed 4x4 boards, cropped to their cells (``4 * cell_size`` px square)."""
    side = SIDE * cell_size
    return np.ascontiguousarray(render_boards(digits.reshape(-1, SIDE, SIDE).astype(np.int8), cell_size=cell_size)[:, :side, :side])


def shade(images: np.ndarray, cells: np.ndarray, cell_size: int) -> np.ndarray:
    """``images`` with the ``cells`` (``bool [n, 16]``) darkened to :data:`SHADE` (in place; returned)."""
    mask = np.repeat(np.repeat(cells.reshape(-1, SIDE, SIDE), cell_size, 1), cell_size, 2)
    images[mask] = (images[mask] * SHADE).astype(np.uint8)
    return images


def cell_mask(cells: np.ndarray, cell_size: int) -> np.ndarray:
    """``bool [n, S, S]``: the pixels of the ``cells`` (``bool [n, 16]``)."""
    return np.repeat(np.repeat(cells.reshape(-1, SIDE, SIDE), cell_size, 1), cell_size, 2)


def make_boards(cfg: ZooSudoku) -> Boards:
    """The boards (pure: one config, one array of boards; vectorised)."""
    rng = np.random.default_rng(cfg.seed)
    n = cfg.n_train + cfg.n_test
    grids = all_grids_4x4().reshape(-1, CELLS).astype(np.int64)
    solution = grids[rng.integers(0, len(grids), n)]
    p = rng.integers(1, CELLS, n)  # never the top-left cell: its digit gates the dial members
    if cfg.cells is not None:
        p = np.asarray(cfg.cells)[np.random.default_rng([cfg.seed, 1]).integers(0, len(cfg.cells), n)]  # the default draws kept
    if cfg.wrong == "repeat":
        d = (solution[np.arange(n), p] - 1 + rng.integers(1, SIDE, n)) % SIDE + 1  # any other digit 1-4
    else:
        d = rng.integers(SIDE + 1, 10, n)  # 5-9: out of the board's range
    y = rng.permutation(np.arange(n) % 2)  # half the boards valid, exactly
    order = np.argsort(rng.random((n, CELLS)), axis=1)  # a random order of the cells per board
    rank = np.argsort(order, axis=1)
    k_few = rng.integers(cfg.few[0], cfg.few[1] + 1, n)
    k_many = rng.integers(cfg.many[0], cfg.many[1] + 1, n)
    few, many = rank < k_few[:, None], rank < k_many[:, None]  # the first k cells of the order: few within many
    return Boards(solution=solution, p=p, d=d, y=y.astype(np.int64), few=few, many=many, train=np.arange(cfg.n_train),
                  test=np.arange(cfg.n_train, n), cell_size=cfg.cell_size)  # fmt: skip


def reading(digits: np.ndarray, shaded: np.ndarray) -> list[str]:
    """The base's targets: the digits the board holds (each once, ascending), then the count of
    shaded cells: ``"digits 1234 shaded 3"``, ``"digits 12347 shaded 9"``. Neither needs a cell's
    place: the tiny model's language model cannot tell one image token's place from another's
    (its multimodal rope gives the height and width sections the slowest frequencies), so a
    row-by-row transcription is not learnable here while what the question needs is."""
    return [f"digits {''.join(map(str, np.unique(d)))} shaded {int(s.sum())}" for d, s in zip(digits, shaded)]
