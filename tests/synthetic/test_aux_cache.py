"""Glyph banks and MIP-solved seed grids cached beside the datasets: shared across configs, byte
identical to drawing / solving them again, and a corrupt entry is redrawn."""

from __future__ import annotations

import numpy as np

from synthetic.cache import aux_cache
from synthetic.sudoku import dataset
from synthetic.sudoku.config import SudokuConfig
from synthetic.sudoku.glyphs import glyph_bank, pencil_bank

SMALL = dict(n_train=40, n_val=10, n_calib=0, n_test=20, cell_size=14, style="handwritten", glyph_variants=8, pencil_prob=0.2, n_mip_seeds=4)


def _fresh() -> None:
    """Forget every in-memory bank, as a new process would."""
    from synthetic.sudoku import render

    for f in (glyph_bank, pencil_bank, render.lined_bank, render._gray_rows, render._rgb_rows):
        f.cache_clear()


def test_cached_banks_and_grids_give_the_same_bytes_and_are_shared(tmp_path):
    _fresh()
    plain = dataset.load(SudokuConfig(**SMALL), None)  # memory only
    assert not list(tmp_path.iterdir())
    _fresh()
    first = dataset.load(SudokuConfig(**SMALL), tmp_path)
    names = sorted(p.name.split("-")[0] for p in tmp_path.glob("*.npz"))
    # main digits and pencil marks of each split present (train, val, test: one bank each), seed grids, the dataset
    assert names == ["glyphs"] * 6 + ["mipgrids", "sudoku"]
    np.testing.assert_array_equal(first.x, plain.x)
    np.testing.assert_array_equal(first.meta, plain.meta)
    _fresh()  # a new process: the banks come from the disk
    other = dataset.load(SudokuConfig(**{**SMALL, "n_test": 30}), tmp_path)  # another config, same seed / glyphs
    assert len(list(tmp_path.glob("*.npz"))) == 9  # only the new dataset was added
    _fresh()
    np.testing.assert_array_equal(other.x, dataset.load(SudokuConfig(**{**SMALL, "n_test": 30}), None).x)  # as if drawn afresh


def test_corrupt_entries_are_redrawn(tmp_path):
    _fresh()
    with aux_cache(tmp_path):
        bank = glyph_bank("printed", 12, 3, 0).copy()
        grids = dataset.seed_grids(0, 3).copy()
    for p in tmp_path.glob("*.npz"):
        p.write_bytes(b"garbage")
    _fresh()
    with aux_cache(tmp_path):
        np.testing.assert_array_equal(glyph_bank("printed", 12, 3, 0), bank)
        np.testing.assert_array_equal(dataset.seed_grids(0, 3), grids)
    _fresh()
    with aux_cache(tmp_path):  # and the rewritten entries serve the next process
        np.testing.assert_array_equal(glyph_bank("printed", 12, 3, 0), bank)
    assert not glyph_bank("printed", 12, 3, 0).flags.writeable
