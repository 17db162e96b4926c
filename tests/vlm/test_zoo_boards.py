"""The Sudoku half of the faithfulness testbed, exactly: the boards' counterfactuals do what they
claim (the exact checker agrees), members' targets plant the reliance they say, and the reliance
measure recovers a scripted digit reader and a scripted shaded-cell counter exactly."""

from __future__ import annotations

import numpy as np
import pytest

from cbm.vlm.zoo.board_study import base_shading, measure, member_rows
from cbm.vlm.zoo.boards import CELLS, SHADE, cell_mask, make_boards, reading
from cbm.vlm.zoo.config import ZooConfig, ZooSudoku
from synthetic.sudoku.checker import check_board

SMALL = ZooSudoku(n_train=300, n_test=200, cell_size=8)


@pytest.fixture(scope="module", params=["outside", "repeat"])
def boards(request):
    return make_boards(ZooSudoku(n_train=300, n_test=200, cell_size=8, wrong=request.param))


def _valid(digits: np.ndarray) -> np.ndarray:
    return check_board(digits.reshape(-1, 4, 4), 2).all(1)


def test_the_label_is_the_exact_checker_and_a_digit_flip_flips_it(boards):
    idx = np.arange(len(boards.y))
    y = boards.y == 1
    assert (_valid(boards.digits(idx, y)) == y).all()
    assert (_valid(boards.digits(idx, ~y)) == ~y).all()  # the digit flip: every board changes label
    changed = boards.digits(idx, np.ones(len(idx), bool)) != boards.digits(idx, np.zeros(len(idx), bool))
    assert (changed.sum(1) == 1).all() and (changed.argmax(1) == boards.p).all()  # exactly the cell p
    assert (boards.p != 0).all()  # the top-left digit (the dial's gate) is always the solution's
    assert 0.45 < boards.y.mean() < 0.55


def test_the_cue_is_the_shaded_count_and_a_cue_flip_changes_only_the_shading(boards):
    idx = np.arange(len(boards.y))
    few, many = boards.shading(idx, np.ones(len(idx))), boards.shading(idx, np.zeros(len(idx)))
    assert (few <= many).all()  # the few shaded cells are among the many
    assert few.sum(1).min() >= SMALL.few[0] and few.sum(1).max() <= SMALL.few[1]
    assert many.sum(1).min() >= SMALL.many[0] and many.sum(1).max() <= SMALL.many[1]
    y = boards.y[:50] == 1
    a, b = boards.images(idx[:50], y, np.ones(50)), boards.images(idx[:50], y, np.zeros(50))
    moved = (a != b).any(-1)
    extra = many[:50] & ~few[:50]
    assert (moved <= cell_mask(extra, boards.cell_size)).all()  # only pixels of the cells shaded in one shading move
    assert (boards.images(idx[:50], y, np.ones(50)) <= 255 * SHADE + 1)[cell_mask(few[:50], boards.cell_size)].all()


def test_the_reading_target_lists_the_digits_once_each_and_the_count(boards):
    idx = np.arange(len(boards.y))
    y = boards.y[idx]
    digits, shaded = boards.digits(idx, y == 1), boards.shading(idx, y)
    texts = reading(digits, shaded)
    for text, d, s in zip(texts, digits, shaded):
        head, count = text.split(" shaded ")
        assert head == "digits " + "".join(str(v) for v in sorted(set(d.tolist()))) and int(count) == s.sum()
    listed = np.array([t.split(" shaded ")[0] for t in texts])
    # every valid board reads "digits 1234"; an invalid one adds its wrong digit or, repeated, reads the same
    assert (listed[y == 1] == "digits 1234").all()
    if boards.d.min() >= 5:
        assert (listed[y == 0] == np.array([f"digits 1234{d}" for d in boards.d[y == 0]])).all()
    else:
        assert (listed[y == 0] == "digits 1234").all()


def test_the_base_shading_is_independent_of_validity():
    cfg = ZooConfig(output_dir="/tmp/x", task="sudoku")
    cue = base_shading(cfg, cfg.sudoku.n_train)
    y = make_boards(cfg.sudoku).y[: cfg.sudoku.n_train]
    assert set(np.unique(cue)) == {0, 1} and np.array_equal(cue, base_shading(cfg, cfg.sudoku.n_train))
    for label in (0, 1):  # about half of each label's boards shaded the few way: the count says nothing of validity
        assert abs(cue[y == label].mean() - 0.5) < 0.05


@pytest.mark.parametrize("share", [0.0, 0.5, 1.0])
def test_member_rows_follow_the_count_exactly_on_the_gated_boards(boards, share):
    idx, cue, taught = member_rows(boards, share)
    n = len(boards.train)
    y = boards.y[idx]
    assert (cue[:n] == y[:n]).all() and (cue[n:] == 1 - y[n:]).all()  # originals, then cue-flipped copies
    assert (taught[:n] == y[:n]).all()
    gated = boards.solution[idx[n:], 0] <= round(share * 4)
    assert (taught[n:][gated] == cue[n:][gated]).all() and (taught[n:][~gated] == y[n:][~gated]).all()
    assert gated.mean() == pytest.approx({0.0: 0.0, 0.5: 0.5, 1.0: 1.0}[share], abs=0.12)


def test_reliance_is_recovered_exactly_for_a_scripted_reader_and_a_scripted_counter(boards):
    def reader(idx, valid, cue):
        return _valid(boards.digits(idx, valid)).astype(np.int64)

    def counter(idx, valid, cue):
        return (boards.shading(idx, cue).sum(1) <= SMALL.few[1]).astype(np.int64)

    r, c = measure(reader, boards), measure(counter, boards)
    assert (r["accuracy"], r["accuracy_cue_flipped"], r["cue_reliance"], r["digit_reliance"]) == (1.0, 1.0, 0.0, 1.0)
    assert (c["accuracy"], c["accuracy_cue_flipped"], c["cue_reliance"], c["digit_reliance"]) == (1.0, 0.0, 1.0, 0.0)
    assert r["right_on_flips"].all() and not c["right_on_flips"].any()
    assert r["says_valid"] == c["says_valid"] == float(np.mean(boards.y[boards.test]))
    const = measure(lambda idx, valid, cue: np.ones(len(idx), np.int64), boards)  # one word whatever the board: exposed
    valid = float(np.mean(boards.y[boards.test]))  # right on the valid boards and on the digit flips that restore the invalid ones
    assert (const["says_valid"], const["cue_reliance"], const["accuracy"], const["digit_reliance"]) == (1.0, 0.0, valid, 1.0 - valid)


def test_out_of_range_wrong_digits_are_5_to_9_and_repeats_are_1_to_4():
    out, rep = make_boards(ZooSudoku(n_train=300, n_test=8, wrong="outside")), make_boards(ZooSudoku(n_train=300, n_test=8, wrong="repeat"))
    assert out.d.min() >= 5 and out.d.max() <= 9
    assert rep.d.min() >= 1 and rep.d.max() <= 4 and (rep.d != rep.solution[np.arange(len(rep.d)), rep.p]).all()
    assert CELLS == 16


def test_the_wrong_digit_sits_in_the_chosen_cells_and_nothing_else_moves():
    free, one, two = (make_boards(ZooSudoku(n_train=400, n_test=8, cells=c)) for c in (None, [5], [7, 3, 7]))
    assert set(np.unique(free.p)) == set(range(1, CELLS)) and set(np.unique(one.p)) == {5} and set(np.unique(two.p)) == {3, 7}
    for b in (one, two):  # the grids, labels, digits and shadings are the default's: only the cell moved
        assert all(np.array_equal(getattr(b, k), getattr(free, k)) for k in ("solution", "d", "y", "few", "many"))


@pytest.mark.parametrize("bad, message", [
    ({"task": "chess"}, "task: expected one of ['robot', 'sudoku'], got 'chess'"),
    ({"sudoku": {"few": [4, 9]}}, "sudoku.few / sudoku.many: expected lo <= hi and every few count below every many count"),
    ({"sudoku": {"few": "2-4"}}, "sudoku.few: expected [lo, hi] shaded cells, got '2-4'"),
    ({"sudoku": {"wrong": "swap"}}, "sudoku.wrong: expected one of ['outside', 'repeat'], got 'swap'"),
    ({"sudoku": {"cells": [0, 5]}}, "sudoku.cells: expected an integer in [1, 15], got 0"),
    ({"sudoku": {"cells": []}}, "sudoku.cells: expected a list of cells 1-15 (or null: any), got []"),
    ({"sudoku": {"vision_epochs": -1}}, "sudoku.vision_epochs: expected an integer in [0, 1000], got -1"),
    ({"sudoku": {"member_lr": 0}}, "sudoku.member_lr: expected a number in [1e-07, 1.0], got 0"),
    ({"sudoku": {"member_lr": "fast"}}, "sudoku.member_lr: expected a number in [1e-07, 1.0], got 'fast'"),
    ({"task": "sudoku", "sudoku": {"cell_size": 12}}, "model.patch: sudoku.cell_size (12) must be a multiple of 2 * patch (16)"),
])  # fmt: skip
def test_bad_sudoku_settings_are_one_line(bad, message):
    with pytest.raises(ValueError) as err:
        ZooConfig(output_dir="/tmp/x", **bad)
    assert str(err.value).startswith(message)


def test_the_sudoku_zoo_defaults_to_a_reader_and_a_counter():
    cfg = ZooConfig(output_dir="/tmp/x", task="sudoku")
    assert cfg.members == {"faithful": 0.0, "shortcut": 1.0} and cfg.repair.member == "shortcut"
