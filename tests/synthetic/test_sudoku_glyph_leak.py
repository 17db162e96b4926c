"""No Sudoku image preset shows a test glyph in training.

Every preset in ``conf/data/sudoku*.yaml`` is generated (small splits) and the centre crop of every
validation, calibration and test cell is looked up among the centre crops of the training cells:
none may occur there byte for byte. With one glyph bank shared by every split (the
``glyph_bank=shared`` speed knob) nearly all of them do, which is what the test would catch.
Printed starters of the 0.4 renderer (``renderer=v04``) are print, the same in every split as in
the reference, and are left out; its handwritten cells are checked.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from synthetic.base import SPLITS
from synthetic.sudoku.config import SudokuConfig
from synthetic.sudoku.dataset import generate

REPO = Path(__file__).resolve().parents[2]
PRESETS = sorted(p.stem for p in (REPO / "cbm/conf/data").glob("sudoku*.yaml"))
SMALL = {"n_train": 60, "n_val": 12, "n_calib": 12, "n_test": 24, "n_mip_seeds": 2}


def preset(name: str, **over) -> SudokuConfig:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(REPO / "cbm/conf"), version_base="1.3"):
        cfg = compose(overrides=[f"+data={name}"])
    raw = OmegaConf.to_container(cfg.data, resolve=True)
    return SudokuConfig.from_dict({**raw, **over})


def cell_crops(cfg: SudokuConfig, x: np.ndarray) -> np.ndarray:
    """``[N, 81, k]`` bytes of the centre of every cell (grid lines and corner marks left out)."""
    cs = cfg.cell_size
    top = cfg.v04.margin_px if cfg.renderer == "v04" else 0
    m = max(2, cs // 4)
    n = len(x)
    grid = x[:, top : top + 9 * cs, top : top + 9 * cs].reshape(n, 9, cs, 9, cs).transpose(0, 1, 3, 2, 4)
    return np.ascontiguousarray(grid[..., m : cs - m, m : cs - m]).reshape(n, 81, -1)


def leaked(cfg: SudokuConfig) -> tuple[float, int]:
    """Share of the held-out glyph cells whose centre crop occurs in a training cell, and how many were checked."""
    data = generate(cfg)
    crops = cell_crops(cfg, np.asarray(data.x))
    glyph = np.ones(crops.shape[:2], dtype=bool)
    if "starter" in data.extra:  # printed starters: the same print everywhere, by design
        glyph = ~data.extra["starter"].reshape(len(crops), 81).astype(bool)
    train = data.split == SPLITS["train"]
    seen = {row.tobytes() for row in crops[train][glyph[train]]}
    held = crops[~train][glyph[~train]]
    return float(np.mean([row.tobytes() in seen for row in held])), len(held)


@pytest.mark.parametrize("name", PRESETS)
def test_no_held_out_glyph_occurs_in_training(name):
    cfg = preset(name, **SMALL, glyph_variants=min(64, preset(name).glyph_variants))
    if cfg.modality != "image":
        pytest.skip("a tabular preset has no glyphs")
    share, checked = leaked(cfg)
    assert checked > 1000
    assert share == 0.0, f"{name}: {share:.1%} of the held-out cells show a training glyph"


def test_a_shared_bank_leaks_which_is_why_it_is_off():
    """The speed knob does what its documentation says: held-out glyphs are training glyphs."""
    cfg = preset("sudoku_10px", **SMALL, glyph_variants=16, glyph_bank="shared")
    share, _ = leaked(cfg)
    assert share > 0.9
    assert preset("sudoku_10px").glyph_bank == "per_split"


@pytest.mark.slow
@pytest.mark.parametrize("name", PRESETS)
def test_no_leak_at_the_presets_own_bank_sizes(name):
    cfg = preset(name, n_train=300, n_val=50, n_calib=50, n_test=200, n_mip_seeds=2)
    share, _ = leaked(cfg)
    assert share == 0.0, f"{name}: {share:.1%} of the held-out cells show a training glyph"
