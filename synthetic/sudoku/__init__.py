"""Sudoku validity task: is a rendered 9x9 board a valid completed Sudoku?

Concepts are the 27 checks (9 rows, 9 columns, 9 boxes: "contains each digit
1-9 once"), the label is their AND. Valid boards come from a HiGHS MIP expanded
by validity-preserving transforms; invalid boards from line swaps across bands,
digit permutations inside a group and targeted corruptions, with a configured
distribution of the number of failing checks; every label comes from the exact
checker. Difficulty is set by the rendering (cell size, handwriting, pencil
marks, blur, noise)."""

from synthetic.sudoku.checker import CONCEPT_NAMES, check_board, n_failing
from synthetic.sudoku.config import SudokuConfig
from synthetic.sudoku.dataset import generate, labelled_boards, load, one_hot, rerender, valid_boards
from synthetic.sudoku.render import cell_box, image_size, render_boards
from synthetic.sudoku.solver import is_unique, solve_mip
from synthetic.sudoku.transforms import expand

__all__ = [
    "CONCEPT_NAMES",
    "SudokuConfig",
    "cell_box",
    "check_board",
    "expand",
    "generate",
    "image_size",
    "is_unique",
    "labelled_boards",
    "load",
    "n_failing",
    "one_hot",
    "render_boards",
    "rerender",
    "solve_mip",
    "valid_boards",
]

