"""4x4 boards (concept-benchmark 0.4's ``block_size=2``): the exact checker against a set-based
one, all 288 grids, the solver, the generator's labels and images, the reader's group layer read
exactly from certain digits, and the knobs' validation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from synthetic.sudoku import SudokuConfig
from synthetic.sudoku.checker import check_board, n_failing
from synthetic.sudoku.dataset import cache_key, generate, labelled_boards, rerender
from synthetic.sudoku.geometry import geometry, infer_box
from synthetic.sudoku.render import image_size, line_widths
from synthetic.sudoku.solver import all_grids_4x4, is_unique, solve_mip
from synthetic.sudoku.transforms import expand, unique_first

SMALL = dict(block_size=2, corruption="swaps", n_train=300, n_val=100, n_calib=100, n_test=200)


def set_checks(board: np.ndarray) -> list[bool]:
    """The 12 checks of one 4x4 board by sets (the definition, independent of the checker)."""
    rows = [set(board[r]) == {1, 2, 3, 4} for r in range(4)]
    cols = [set(board[:, c]) == {1, 2, 3, 4} for c in range(4)]
    boxes = [set(board[2 * (b // 2) : 2 * (b // 2) + 2, 2 * (b % 2) : 2 * (b % 2) + 2].ravel()) == {1, 2, 3, 4} for b in range(4)]
    return rows + cols + boxes


def test_geometry_of_4x4_boards():
    g = geometry(2)
    assert (g.n, g.cells, g.n_groups, float(g.full)) == (4, 16, 12, 30.0)
    assert g.concept_names == [f"row{i}" for i in range(1, 5)] + [f"col{i}" for i in range(1, 5)] + [f"box{i}" for i in range(1, 5)]
    assert g.groups[8].tolist() == [0, 1, 4, 5] and g.groups[11].tolist() == [10, 11, 14, 15]
    assert g.member.sum(0).tolist() == [4.0] * 12 and g.member.sum(1).tolist() == [3.0] * 16
    assert [infer_box(np.zeros(s, np.int8)) for s in [(4, 4), (7, 4, 4), (7, 16), (16, 16), (9, 9), (3, 81)]] == [2, 2, 2, 2, 3, 3]
    with pytest.raises(ValueError, match="no 4x4 or 9x9 Sudoku boards"):
        infer_box(np.zeros((5, 5)))
    with pytest.raises(ValueError, match="block_size=4 is not supported"):
        geometry(4)


def test_checker_equals_the_set_definition_on_random_boards():
    rng = np.random.default_rng(0)
    boards = rng.integers(0, 6, size=(3000, 4, 4))  # digits 1..4 plus 0 and 5, which satisfy nothing
    boards[:300] = all_grids_4x4()[rng.integers(288, size=300)]
    got = check_board(boards)
    want = np.array([set_checks(b) for b in boards])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(n_failing(boards), 12 - want.sum(1))
    np.testing.assert_array_equal(check_board(boards.astype(np.int8)), want)  # the byte path


def test_all_288_grids_are_distinct_and_valid():
    grids = all_grids_4x4()
    assert grids.shape == (288, 4, 4) and len(unique_first(grids)) == 288
    assert check_board(grids).all()
    # every permutation-row stack that passes is in the list: 288 is the known count of Shidoku grids
    assert all(all(set_checks(g)) for g in grids[::7])


def test_solver_fills_4x4_givens_and_decides_uniqueness():
    for seed in range(10):
        g = solve_mip(rng=seed, box=2)
        assert g.shape == (4, 4) and check_board(g).all()
    grid = all_grids_4x4()[17]
    givens = grid.copy()
    givens[1:] = 0  # one row fixed: several completions
    assert not is_unique(givens)
    full_but_one = grid.copy()
    full_but_one[2, 3] = 0
    assert is_unique(full_but_one)
    np.testing.assert_array_equal(solve_mip(full_but_one), grid)
    with pytest.raises(ValueError, match="digits 0..4"):
        solve_mip(np.full((4, 4), 5))


def test_expand_refuses_more_4x4_boards_than_the_orbits_hold():
    grids = np.stack([solve_mip(rng=s, box=2) for s in range(2)])
    out = expand(grids, 40, np.random.default_rng(0))
    assert out.shape == (40, 4, 4) and check_board(out).all() and len(unique_first(out)) == 40
    with pytest.raises(ValueError, match="only 288 exist"):
        expand(grids, 289, np.random.default_rng(0))


@pytest.mark.parametrize("modality", ["tabular", "image"])
def test_4x4_dataset_labels_are_the_exact_checks(modality):
    cfg = SudokuConfig(**SMALL, modality=modality, cell_size=12, max_cell_swaps=4)
    d = generate(cfg)
    boards = d.extra["board"]
    assert boards.shape == (700, 4, 4) and d.c.shape == (700, 12)
    assert d.concept_names == geometry(2).concept_names
    np.testing.assert_array_equal(d.c.astype(bool), np.array([set_checks(b) for b in boards]))
    np.testing.assert_array_equal(d.y, d.c.all(1).astype(np.int64))
    for split in range(4):  # exactly half valid in every split
        rows = d.split == split
        assert d.y[rows].sum() == rows.sum() // 2
    neg = d.y == 0
    actions = d.meta[neg, 17]
    assert actions.min() >= 1 and actions.max() <= 4 and d.meta.shape == (700, 18)
    np.testing.assert_array_equal(d.meta[:, :16].reshape(-1, 4, 4), boards)
    if modality == "tabular":
        assert d.x.shape == (700, 64)
        np.testing.assert_array_equal(d.x.reshape(700, 16, 4).argmax(-1) + 1, boards.reshape(700, 16))
    else:
        side = 4 * 12 + line_widths(12)[0]
        assert d.x.shape == (700, side, side) == (700, image_size(12, 4), image_size(12, 4))
        np.testing.assert_array_equal(rerender(d, np.arange(5), cfg), d.x[:5])
    again = generate(cfg)
    np.testing.assert_array_equal(again.x, d.x)


def test_block_size_knobs_and_cache_key():
    assert "block_size" not in cache_key(SudokuConfig()) and cache_key(SudokuConfig(**SMALL))["block_size"] == 2
    assert SudokuConfig(valid_board_ratio=0.25).valid_fraction == 0.25
    assert "valid_board_ratio" not in SudokuConfig(valid_board_ratio=0.25).to_dict()
    lab = labelled_boards(SudokuConfig(**{**SMALL, "n_test": 400}, valid_board_ratio=0.25, modality="tabular"))
    assert lab["y"][lab["split"] == 3].sum() == 100
    for kw, match in [({"block_size": 2}, "set corruption=swaps"), ({"block_size": 4, "corruption": "swaps"}, "must be one of"),
                      ({"valid_board_ratio": "x"}, "valid_board_ratio"), ({"valid_board_ratio": 2.0}, "valid_board_ratio: expected a number in \\[0.0, 1.0\\], got 2.0")]:  # fmt: skip
        with pytest.raises(ValueError, match=match):
            SudokuConfig(**kw)


def test_group_layer_reads_4x4_checks_exactly_from_certain_digits():
    from cbm.models.backbones_sudoku import GroupValidity, SudokuCellReader
    from cbm.models.config import BackboneConfig, DataInfo

    d = generate(SudokuConfig(**SMALL, modality="tabular"))
    onehot = torch.from_numpy(d.x).view(-1, 16, 4)
    features = torch.log(onehot.clamp_min(1e-6)).flatten(1)  # certain digit log-probabilities [B, 64]
    logits = GroupValidity(box=2)(features)
    np.testing.assert_array_equal((logits > 0).numpy(), d.c.astype(bool))
    side = image_size(12, 4)
    info = DataInfo("sudoku", "image", [3, side, side], geometry(2).concept_names, ["invalid", "valid"])
    reader = SudokuCellReader(BackboneConfig(name="sudoku_cells"), info)
    assert (reader.n, reader.out_dim) == (4, 64)
    x = torch.from_numpy(generate(SudokuConfig(**SMALL, cell_size=12)).x[:6]).unsqueeze(1).expand(-1, 3, -1, -1)
    assert reader(x).shape == (6, 64) and reader.read(x).shape == (6, 4, 4)
    assert isinstance(reader.make_concept_layer(12), GroupValidity)
    with pytest.raises(ValueError, match="gives 12 concepts, not 27"):
        reader.make_concept_layer(27)
    blackbox = SudokuCellReader(BackboneConfig(name="sudoku_cells"), DataInfo("sudoku", "image", [3, side, side], [], ["a", "b"]))
    assert blackbox.n == 4  # no concepts: the board size is read from the image side
