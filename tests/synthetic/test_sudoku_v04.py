"""concept-benchmark 0.4's board drawing (``data.renderer=v04``, ``data=sudoku_v04``): layout, split
sizes, printed starters, candidate bubbles, per-board determinism, Pillow's LANCZOS, typed knobs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from synthetic.base import SPLITS
from synthetic.sudoku.config import SudokuConfig
from synthetic.sudoku.dataset import generate, rerender, valid_boards
from synthetic.sudoku.v04_config import V04Render
from synthetic.sudoku.v04_glyphs import N_UNIFORMS, draw_glyphs, lanczos_matrix
from synthetic.sudoku.v04_render import bubble_options, render_v04, starters

REPO = Path(__file__).resolve().parents[2]
TINY = {"n_train": 8, "n_val": 3, "n_calib": 0, "n_test": 3, "n_mip_seeds": 1, "cell_size": 10, "style": "handwritten",
        "corruption": "swaps", "renderer": "v04"}  # fmt: skip


@pytest.fixture(scope="module")
def tiny():
    cfg = SudokuConfig(**TINY)
    return cfg, generate(cfg)


def test_the_preset_is_the_reference_pipelines_data():
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(REPO / "cbm/conf"), version_base="1.3"):
        raw = OmegaConf.to_container(compose(overrides=["+data=sudoku_v04"]).data, resolve=True)
    cfg = SudokuConfig.from_dict(raw)
    assert cfg.sizes == {"train": 600, "val": 200, "calib": 0, "test": 200}  # 0.4.1: 1,000 boards, 60 / 20 / 20
    assert (cfg.seed, cfg.renderer, cfg.cell_size, cfg.image_side) == (171, "v04", 10, 94)  # 2 * 2 + 9 * 10
    assert (cfg.corruption, cfg.max_cell_swaps, cfg.valid_fraction) == ("swaps", 9, 0.5)
    assert cfg.v04 == V04Render()  # 0.4.1's drawing knobs are the defaults


def test_images_layout_starters_and_splits(tiny):
    cfg, data = tiny
    assert data.x.shape == (14, 94, 94) and data.x.dtype == np.uint8
    assert [int((data.split == SPLITS[s]).sum()) for s in ("train", "val", "calib", "test")] == [8, 3, 0, 3]
    assert (data.extra["starter"].sum(1) == round(0.35 * 81)).all()  # 28 printed cells on every board
    # 0.4.1's 94 px boards start white, 150, black (its 5 px border at 50 px, LANCZOS-resized), as here
    # (a bubble's outline above a top-row cell can lighten the border a little, there as here)
    assert (data.x[:, 0, 5:89] == 255).all() and np.median(data.x[:, 1, 5:89]) == 150 and (data.x[:, 2, 5:89] == 0).mean() > 0.9
    np.testing.assert_array_equal(rerender(data, np.arange(14), cfg), data.x)
    assert data.info["render"]["renderer"] == "v04"


def test_a_board_is_drawn_the_same_alone_as_in_a_batch_and_by_its_seed_only():
    boards = valid_boards(5, seed=3, n_mip_seeds=1)
    seeds = np.array([7, 8, 9, 10, 11])
    cfg = V04Render()
    batch, st = render_v04(boards, seeds, 10, cfg, chunk=2)
    for i in (0, 3):
        alone, st1 = render_v04(boards[i : i + 1], seeds[i : i + 1], 10, cfg)
        np.testing.assert_array_equal(alone[0], batch[i])
        np.testing.assert_array_equal(st1[0], st[i])
    other, _ = render_v04(boards, seeds + 100, 10, cfg)
    assert not np.array_equal(other, batch)
    assert not np.array_equal(batch[0], batch[1])  # each board its own handwriting


def test_bubbles_pair_handwritten_neighbours_and_show_their_digits():
    boards = valid_boards(20, seed=1, n_mip_seeds=1)
    seeds = np.arange(20)
    st = starters(seeds, 0.35)
    for b, opts in enumerate(bubble_options(boards, st, seeds, 0.22)):
        flat = boards[b].reshape(81)
        assert opts and all(not st[b, cell] for cell in opts)  # starters never get bubbles
        for cell, digits in opts.items():
            assert int(flat[cell]) in digits and 1 <= len(digits) <= 5  # its own digit and a neighbour's
            r, c = divmod(cell, 9)
            neigh = {flat[rr * 9 + cc] for rr, cc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)) if 0 <= rr < 9 and 0 <= cc < 9}
            assert set(digits) - {int(flat[cell])} <= {int(v) for v in neigh}
        # round(0.22 * 53) = 12 seeds, each with a partner (a handwritten rook neighbour): at most 24 cells
        assert len(opts) <= 24


def test_pillow_lanczos_as_a_matrix():
    rng = np.random.default_rng(0)
    img = rng.random((82, 82)).astype(np.float32)
    ours = lanczos_matrix(82, 41) @ img @ lanczos_matrix(82, 41).T
    pil = np.asarray(Image.fromarray(img, mode="F").resize((41, 41), Image.Resampling.LANCZOS))
    np.testing.assert_allclose(ours, pil, atol=1e-5)


def test_glyphs_are_a_function_of_their_uniforms():
    rng = np.random.default_rng(1)
    digits, u = rng.integers(1, 10, 6), rng.random((6, N_UNIFORMS))
    cfg = V04Render()
    g = draw_glyphs(digits, u, 41, cfg, chunk=4)
    assert g.shape == (6, 41, 41) and 0 <= g.min() and g.max() <= 1 and (g.reshape(6, -1).max(1) > 0.5).all()
    np.testing.assert_array_equal(draw_glyphs(digits[2:3], u[2:3], 41, cfg), g[2:3])


def test_one_allograph_per_digit_by_default_every_one_on_request():
    from synthetic.sudoku.glyphs import STROKES
    from synthetic.sudoku.v04_glyphs import ONE_ALLOGRAPH, atlas

    one, every = atlas("strokes", 0.065, None, "one"), atlas("strokes", 0.065, None, "all")
    assert [len(p) for p in one.digit_protos[1:]] == [1] * 9  # one shape per digit, as a font writes it
    assert [len(p) for p in every.digit_protos[1:]] == [len(STROKES[d]) for d in range(1, 10)]
    side = one.image.shape[-2]
    for d in range(1, 10):  # the one shape is that allograph's prototype, pixel for pixel
        i, j = one.digit_protos[d][0], every.digit_protos[d][ONE_ALLOGRAPH[d]]
        assert (one.image[..., i * side : (i + 1) * side] == every.image[..., j * side : (j + 1) * side]).all()
    u = np.repeat(np.random.default_rng(2).random((1, N_UNIFORMS)), 2, axis=0)
    u[:, 5] = [0.1, 0.9]  # the same glyph but for its allograph uniform, which picks a shape only under "all"
    one_g, all_g = draw_glyphs(np.full(2, 4), u, 41, V04Render()), draw_glyphs(np.full(2, 4), u, 41, V04Render(allographs="all"))
    np.testing.assert_array_equal(one_g[0], one_g[1])
    assert np.abs(all_g[0] - all_g[1]).sum() > 10  # two shapes of a 4


@pytest.mark.parametrize(
    "kw,msg",
    [
        ({"renderer": "pen"}, "renderer: must be one of"),
        ({"v04": {"scale": [2, 1]}}, "v04.scale: expected [a, b] with 0.1 <= a <= b <= 4.0, got [2, 1]"),
        ({"v04": {"starter_share": 0.5}}, "v04.* settings are read only with renderer=v04"),
        ({"renderer": "v04"}, "style='printed' does not apply"),
        ({"renderer": "v04", "style": "handwritten", "pencil_prob": 0.2}, "pencil_prob=0.2 does not apply"),
        ({"renderer": "v04", "style": "handwritten", "v04": {"stroke": 1}}, "unknown v04 keys ['stroke']"),
        ({"renderer": "v04", "style": "handwritten", "v04": {"font_file": "x.otf"}}, "v04.font_file: read only with handwriting=font"),
        ({"renderer": "v04", "style": "handwritten", "v04": {"blur": []}}, "v04.blur: expected a non-empty list"),
        ({"renderer": "v04", "style": "handwritten", "v04": {"allographs": "some"}}, "v04.allographs: must be one of"),
        ({"renderer": "v04", "style": "handwritten", "v04": {"handwriting": "font", "font_file": "/no/such.otf"}}, "is not a file"),
    ],
)
def test_bad_knobs_fail_in_one_line(kw, msg):
    with pytest.raises(ValueError, match=None) as err:
        SudokuConfig(**kw)
    assert msg in str(err.value) and "\n" not in str(err.value)
