"""The spurious cue (``data.cue``, the faithfulness testbed's knob): it agrees with the label at the
configured rate, changes nothing else, is drawn exactly where it says, flips exactly, and leaves the
cache key of every config without it unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from synthetic.datamodule import data_tensors
from synthetic.robot import generator as g
from synthetic.robot.config import RobotConfig
from synthetic.robot.cue import cue_mask, draw_cue
from synthetic.robot.renderer import render

SMALL = {"n_train": 1500, "n_calib": 0, "n_test": 500}


def make(**cue) -> object:
    return g.generate(RobotConfig(**SMALL, cue=cue) if cue else RobotConfig(**SMALL))


@pytest.mark.parametrize("kind", ["corner", "swatch", "tint"])
def test_the_cue_changes_the_pixels_only_and_agrees_with_the_label_at_its_rate(kind):
    base = make()
    for corr, lo, hi in ((1.0, 1.0, 1.0), (0.0, 0.0, 0.0), (0.75, 0.72, 0.78), (0.5, 0.46, 0.54)):
        d = make(kind=kind, correlation=corr)
        for key in ("y", "c", "c_true", "meta", "split"):
            assert np.array_equal(getattr(d, key), getattr(base, key)), key
        agree = float((d.extra["cue"] == d.y).mean())
        assert lo <= agree <= hi, (kind, corr, agree)
        assert np.array_equal(d.x, draw_cue(render(d.meta, 32), d.extra["cue"], RobotConfig(cue={"kind": kind}).cue))


def test_a_corner_cue_is_a_white_square_in_its_corner_and_flipping_it_moves_it():
    d = make(kind="corner")
    cfg = RobotConfig(cue={"kind": "corner"}).cue
    plain = render(d.meta, 32)
    flipped = draw_cue(plain, 1 - d.extra["cue"], cfg)
    glorp, drent = cue_mask(cfg, 32, True), cue_mask(cfg, 32, False)
    assert glorp.sum() == drent.sum() == 16 and not (glorp & drent).any()
    says_glorp = d.extra["cue"] == 1
    assert (d.x[says_glorp][:, glorp] == 255).all() and (flipped[says_glorp][:, drent] == 255).all()
    changed = (d.x != flipped).any(-1)  # the pixels the flip touched: inside the two squares only
    assert not changed[:, ~(glorp | drent)].any() and changed.any()


def test_a_swatch_is_white_for_glorp_and_black_for_drent_in_the_same_corner():
    d = make(kind="swatch")
    cfg = RobotConfig(cue={"kind": "swatch"}).cue
    box = cue_mask(cfg, 32, True)
    assert np.array_equal(box, cue_mask(cfg, 32, False)) and box.sum() == 16 and box[0, 0]
    glorp = d.extra["cue"] == 1
    assert (d.x[glorp][:, box] == 255).all() and (d.x[~glorp][:, box] == 0).all()
    flipped = draw_cue(render(d.meta, 32), 1 - d.extra["cue"], cfg)
    changed = (d.x != flipped).any(-1)
    assert changed[:, box].all() and not changed[:, ~box].any()


def test_a_tint_shifts_toward_red_or_blue_by_its_strength():
    d = make(kind="tint", strength=10)
    plain = render(d.meta, 32).astype(int)
    shift = d.x.astype(int) - plain
    inside = (plain >= 10) & (plain <= 245)  # away from clipping
    red_glorp = shift[d.extra["cue"] == 1][..., 0][inside[d.extra["cue"] == 1][..., 0]]
    blue_drent = shift[d.extra["cue"] == 0][..., 2][inside[d.extra["cue"] == 0][..., 2]]
    assert (red_glorp == 10).all() and (blue_drent == 10).all() and (shift[..., 1] == 0).all()


def test_every_storage_draws_the_same_cue_and_batches_carry_it(tmp_path):
    cfg = RobotConfig(**SMALL, cue={"kind": "corner", "correlation": 0.9})
    mem = g.load(cfg)
    lazy = g.load(cfg, cache_dir=str(tmp_path), storage="render")
    disk = g.load(cfg, cache_dir=str(tmp_path / "d"), storage="disk")
    rows = np.arange(0, len(mem.y), 97)
    assert np.array_equal(np.asarray(lazy.x[rows]), mem.x[rows]) and np.array_equal(np.asarray(disk.x[rows]), mem.x[rows])
    assert data_tensors(mem, rows)["cue"].tolist() == mem.extra["cue"][rows].tolist()


def test_configs_without_a_cue_keep_their_cache_key_and_a_cue_needs_images():
    assert "cue" not in RobotConfig().record() and RobotConfig(cue={"kind": "tint"}).record()["cue"]["kind"] == "tint"
    assert g.cache_key(RobotConfig(cue={"kind": "none", "correlation": 0.3})) == g.cache_key(RobotConfig())
    with pytest.raises(ValueError, match=r"RobotConfig.cue.kind: a cue is drawn into images: needs modality=image, got 'tabular'"):
        RobotConfig(modality="tabular", cue={"kind": "corner"})
    with pytest.raises(ValueError, match=r"RobotConfig.cue.correlation: expected a number in \[0.0, 1.0\], got 2"):
        RobotConfig(cue={"kind": "corner", "correlation": 2})
