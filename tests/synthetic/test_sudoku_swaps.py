"""concept-benchmark 0.4's invalid boards (``corruption=swaps``): each action's exact effect on a
valid board, every negative invalid and every positive valid by the exact checker, the action
count uniform on 1..max_cell_swaps, and the default walk untouched."""

from __future__ import annotations

import numpy as np
import pytest

from synthetic.sudoku import SudokuConfig
from synthetic.sudoku.checker import check_board
from synthetic.sudoku.corrupt import ACTIONS, _act, corrupt
from synthetic.sudoku.dataset import cache_key, labelled_boards, valid_boards

ROWS, COLS, BOXES = slice(0, 9), slice(9, 18), slice(18, 27)


@pytest.fixture(scope="module")
def valid():
    return valid_boards(600, seed=1)


def test_each_action_breaks_exactly_what_it_should(valid):
    assert check_board(valid).all()
    for kind in range(len(ACTIONS)):
        b = valid.copy()
        _act(b, kind, np.random.default_rng(kind))
        c = check_board(b)
        fail = ~c
        if kind == 0:  # two cells of a column inside a band: exactly two rows
            assert (fail[:, ROWS].sum(1) == 2).all() and not fail[:, COLS].any() and not fail[:, BOXES].any()
        elif kind == 1:
            assert (fail[:, COLS].sum(1) == 2).all() and not fail[:, ROWS].any() and not fail[:, BOXES].any()
        elif kind in (2, 3):  # whole lines across bands / stacks: rows and columns stay permutations;
            # per stack (band) the two boxes trade segments, so both fail or neither: 0, 2, 4 or 6
            boxes = fail[:, BOXES].sum(1)
            assert not fail[:, ROWS].any() and not fail[:, COLS].any()
            assert set(np.unique(boxes)) <= {0, 2, 4, 6} and (boxes > 0).mean() > 0.9
        else:  # a duplicate: its line, the overwritten cell's cross line and its box
            assert (fail.sum(1) == 3).all()
            assert (fail[:, ROWS].sum(1) == 1).all() and (fail[:, COLS].sum(1) == 1).all() and (fail[:, BOXES].sum(1) == 1).all()


def test_corrupt_makes_every_board_invalid_with_a_uniform_action_count(valid):
    boards, n_actions = corrupt(valid, 9, np.random.default_rng(0))
    assert not check_board(boards).all(1).any()
    assert n_actions.min() >= 1 and n_actions.max() <= 9
    big = np.concatenate([valid] * 10)
    _, counts = corrupt(big, 4, np.random.default_rng(1))
    share = np.bincount(counts, minlength=5)[1:] / len(big)
    assert np.all(np.abs(share - 0.25) <= 4.5 * np.sqrt(0.25 * 0.75 / len(big)))
    again, _ = corrupt(valid, 9, np.random.default_rng(0))
    np.testing.assert_array_equal(boards, again)


def test_swaps_dataset_labels_come_from_the_checker():
    cfg = SudokuConfig(modality="tabular", n_train=300, n_val=100, n_calib=0, n_test=200, corruption="swaps", max_cell_swaps=3)
    lab = labelled_boards(cfg)
    c, y = lab["c"], lab["y"]
    np.testing.assert_array_equal(c, check_board(lab["board"]))
    np.testing.assert_array_equal(y, c.all(1))
    assert y.mean() == pytest.approx(0.5)
    neg = y == 0
    assert set(np.unique(lab["neg_op"][neg])) <= {1, 2, 3} and (lab["neg_op"][~neg] == -1).all()
    assert len(np.unique(lab["board"].reshape(len(y), -1), axis=0)) == len(y)  # distinct boards


def band_triples(boards: np.ndarray) -> np.ndarray:
    """Per board, the most distinct 3-cell row segments (as sets) any band holds: 3 on 0.4.1's pattern
    boards (a band's rows are its three triples in rotated order), up to 9 on others."""
    seg = np.sort(boards.reshape(len(boards), 3, 3, 3, 3), axis=-1)  # [board, band, row, stack, cell]
    return np.array([max(len({tuple(s) for s in b[band].reshape(9, 3).tolist()}) for band in range(3)) for b in seg])


def test_pattern_boards_are_0_4_1s_canonical_board_shuffled():
    """valid_source=pattern: every valid board, and every invalid board's base, is the canonical board
    (r, c) -> (3 (r % 3) + r // 3 + c) % 9 + 1 under line / band / stack shuffles and a relabelling:
    each band's rows (and each stack's columns) hold only three triples, as the canonical board's do;
    MIP boards almost never do."""
    from synthetic.sudoku.dataset import pattern_grid

    g = pattern_grid(3)
    assert g[0].tolist() == list(range(1, 10)) and g[1].tolist() == [4, 5, 6, 7, 8, 9, 1, 2, 3] and check_board(g[None]).all()
    cfg = SudokuConfig(modality="tabular", n_train=300, n_val=100, n_calib=0, n_test=100, corruption="swaps", valid_source="pattern")
    lab = labelled_boards(cfg)
    pos = lab["board"][lab["y"] == 1]
    assert (band_triples(pos) == 3).all() and (band_triples(pos.transpose(0, 2, 1)) == 3).all()
    assert len(np.unique(lab["board"].reshape(len(pos) * 2, -1), axis=0)) == 2 * len(pos)  # distinct boards
    np.testing.assert_array_equal(lab["c"], check_board(lab["board"]))
    mip = labelled_boards(SudokuConfig(modality="tabular", n_train=300, n_val=100, n_calib=0, n_test=100, corruption="swaps"))
    assert (band_triples(mip["board"][mip["y"] == 1]) == 3).mean() < 0.05
    assert cache_key(cfg)["valid_source"] == "pattern" and "valid_source" not in cache_key(SudokuConfig())
    with pytest.raises(ValueError, match="valid_source: must be one of"):
        SudokuConfig(valid_source="solver")
    with pytest.raises(ValueError, match="valid_source=pattern draws 9x9 boards"):
        SudokuConfig(valid_source="pattern", block_size=2, corruption="swaps")


def test_default_walk_keeps_its_cache_key_and_bad_values_fail():
    assert "corruption" not in cache_key(SudokuConfig()) and "max_cell_swaps" not in cache_key(SudokuConfig())
    assert cache_key(SudokuConfig(corruption="swaps"))["corruption"] == "swaps"
    for kw, match in [({"corruption": "shuffle"}, "corruption: must be one of"), ({"max_cell_swaps": 0}, "max_cell_swaps"),
                      ({"max_cell_swaps": 10}, "max_cell_swaps")]:  # fmt: skip
        with pytest.raises(ValueError, match=match):
            SudokuConfig(**kw)


@pytest.mark.parametrize("cell", [8, 10])
def test_small_cells_render_every_board_and_refuse_below_eight(cell):
    """0.4's 10 px handwritten regime (and 8 px): boards render at ``9 * cell`` + lines, digits drawn."""
    from synthetic.sudoku.dataset import generate
    from synthetic.sudoku.render import image_size

    data = generate(SudokuConfig(n_train=6, n_val=0, n_calib=0, n_test=0, style="handwritten", cell_size=cell, pencil_prob=0.3))
    assert data.x.shape == (6, image_size(cell), image_size(cell)) and data.x.min() == 0 and data.x.max() == 255
    with pytest.raises(ValueError, match="cell_size: expected an integer in \\[8, 128\\], got 7"):
        SudokuConfig(cell_size=7)
