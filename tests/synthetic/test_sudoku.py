"""Sudoku generator: exact labels, MIP path, transforms, negatives, rendering, determinism, config."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from synthetic.base import SPLITS
from synthetic.sudoku import (
    CONCEPT_NAMES,
    SudokuConfig,
    cell_box,
    check_board,
    expand,
    generate,
    image_size,
    is_unique,
    labelled_boards,
    load,
    one_hot,
    render_boards,
    rerender,
    solve_mip,
    valid_boards,
)
from synthetic.sudoku.negatives import FAMILIES, allocate, parse_fail_counts, walk
from synthetic.sudoku.transforms import apply_transforms, random_transforms

REPO = Path(__file__).resolve().parents[2]
DIGITS = set(range(1, 10))


def ref_check(board) -> list[bool]:
    """Independent checker: plain Python sets, rows / columns / boxes."""
    b = [[int(v) for v in row] for row in np.asarray(board).reshape(9, 9)]
    rows = [set(b[r]) == DIGITS and len(b[r]) == 9 for r in range(9)]
    cols = [sorted(b[r][c] for r in range(9)) == list(range(1, 10)) for c in range(9)]
    boxes = [
        sorted(b[3 * (k // 3) + i][3 * (k % 3) + j] for i in range(3) for j in range(3)) == list(range(1, 10))
        for k in range(9)
    ]
    return rows + cols + boxes


def small(**kw) -> SudokuConfig:
    base = {"n_train": 300, "n_val": 60, "n_calib": 60, "n_test": 180, "n_mip_seeds": 4, "cell_size": 18}
    return SudokuConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def data():
    return generate(small())


@pytest.fixture(scope="module")
def big_tab():
    cfg = small(modality="tabular", n_train=6000, n_val=0, n_calib=0, n_test=0)
    return cfg, generate(cfg)


# --------------------------------------------------------------------------- checker
def test_checker_matches_independent_checker_on_arbitrary_boards():
    rng = np.random.default_rng(0)
    grid = solve_mip(rng=rng)
    boards = [grid, rng.integers(1, 10, size=(9, 9)), np.zeros((9, 9), int), np.full((9, 9), 10)]
    for _ in range(300):  # few random edits of a valid grid: many partially valid boards
        b = grid.copy().reshape(-1)
        for _ in range(rng.integers(1, 4)):
            b[rng.integers(81)] = rng.integers(0, 11)
        boards.append(b.reshape(9, 9))
    got = check_board(np.stack(boards).astype(np.int64))
    assert got.shape == (len(boards), 27) and got.dtype == bool
    assert [list(r) for r in got] == [ref_check(b) for b in boards]
    assert check_board(grid).shape == (27,)  # single board
    assert CONCEPT_NAMES[:2] == ["row1", "row2"] and CONCEPT_NAMES[9] == "col1" and CONCEPT_NAMES[-1] == "box9"


def test_single_failing_check_is_rejected_as_unreachable():
    with pytest.raises(ValueError, match="exactly one failing check is impossible"):
        parse_fail_counts("1:1")
    with pytest.raises(ValueError, match="must lie in 2..27"):
        walk(np.zeros((1, 9, 9), np.int8), np.array([1]), np.array([2]), np.random.default_rng(0))


# --------------------------------------------------------------------------- MIP
def test_mip_solver_really_solves():
    rng = np.random.default_rng(1)
    grid = solve_mip(rng=rng)
    assert grid.shape == (9, 9) and all(ref_check(grid))
    # a puzzle from that grid: the solver fills it consistently with its givens
    puzzle = grid.copy()
    puzzle[rng.random((9, 9)) < 0.5] = 0
    sol = solve_mip(puzzle)
    assert all(ref_check(sol)) and (sol[puzzle > 0] == puzzle[puzzle > 0]).all()
    one_blank = grid.copy()
    one_blank[4, 4] = 0
    assert is_unique(one_blank)
    bad = np.zeros((9, 9), np.int8)
    bad[0, :2] = 5  # a digit twice in a row: infeasible
    assert solve_mip(bad) is None
    # random givens give different grids, also up to digit relabelling
    grids = [solve_mip(rng=rng) for _ in range(4)]
    canon = {np.argsort(g[0])[g - 1].tobytes() for g in grids}  # relabel so the first row reads 1..9
    assert len(canon) == 4


# --------------------------------------------------------------------------- transforms
def test_transforms_preserve_validity_and_expand_deduplicates():
    rng = np.random.default_rng(2)
    grid = solve_mip(rng=rng)
    idx, rel = random_transforms(rng, 500)
    out = apply_transforms(np.repeat(grid[None], 500, 0), idx, rel)
    assert check_board(out).all()
    boards = expand(grid[None], 3000, rng)
    assert boards.shape == (3000, 9, 9) and boards.dtype == np.int8
    assert all(all(ref_check(b)) for b in boards[:300])  # independent checker on a sample
    assert check_board(boards).all()
    assert len(np.unique(boards.reshape(3000, 81), axis=0)) == 3000
    # deterministic
    np.testing.assert_array_equal(valid_boards(50, seed=3, n_mip_seeds=2), valid_boards(50, seed=3, n_mip_seeds=2))


# --------------------------------------------------------------------------- dataset contract
def test_every_label_comes_from_the_exact_checker(data):
    boards = data.extra["board"]
    n = len(boards)
    assert boards.shape == (n, 9, 9)
    ref = np.array([ref_check(b) for b in boards], dtype=np.float32)
    np.testing.assert_array_equal(data.c, ref)
    np.testing.assert_array_equal(data.c_true, ref)
    np.testing.assert_array_equal(data.y, ref.all(axis=1).astype(np.int64))
    assert data.c.dtype == np.float32 and data.y.dtype == np.int64
    assert data.concept_names == CONCEPT_NAMES and data.class_names == ["invalid", "valid"]
    # every valid board passes the independent checker; every invalid one fails >= 2 checks
    assert all(all(ref_check(b)) for b in boards[data.y == 1])
    assert ((27 - ref[data.y == 0].sum(1)) >= 2).all()
    np.testing.assert_array_equal(data.meta[:, :81], boards.reshape(n, 81))
    assert len(np.unique(boards.reshape(n, 81), axis=0)) == n  # all boards distinct


def test_class_balance_per_split(data):
    for name in SPLITS:
        rows = data.indices(name)
        assert abs(data.y[rows].mean() - 0.5) <= 1.0 / len(rows)
    d = generate(small(modality="tabular", valid_fraction=0.3))
    assert abs(d.y.mean() - 0.3) < 0.01


def test_failing_check_distribution_follows_config(big_tab):
    cfg, d = big_tab
    fails = (27 - d.c[d.y == 0].sum(1)).astype(int)
    counts = np.bincount(fails, minlength=28)
    expected = allocate(parse_fail_counts(cfg.fail_counts), len(fails))
    np.testing.assert_array_equal(counts, expected)  # stratified: exact up to rounding
    assert counts[:2].sum() == 0 and counts[2] > 0 and counts[27] > 0
    # a custom spec
    d2 = generate(small(modality="tabular", fail_counts="2:0.5, 20-21:0.5", n_train=2000, n_val=0, n_calib=0, n_test=0))
    f2 = np.bincount((27 - d2.c[d2.y == 0].sum(1)).astype(int), minlength=28)
    assert f2[2] == 500 and f2[20] + f2[21] == 500 and f2.sum() == 1000


def test_invalid_boards_vary_in_which_checks_fail(big_tab):
    _, d = big_tab
    neg = d.c[d.y == 0] < 0.5
    assert neg.any(axis=0).all()  # every concept fails somewhere
    k = neg.sum(1)
    many = neg[k >= 5]
    assert len({tuple(r) for r in many}) > 0.75 * len(many)  # failing patterns are diverse
    # two failing checks: always two rows of one band or two columns of one stack (18 patterns)
    two = {tuple(np.flatnonzero(r)) for r in neg[k == 2]}
    assert len(two) == 18
    assert all((a < 9 and b < 9 and a // 3 == b // 3) or (9 <= a < 18 and 9 <= b < 18 and (a - 9) // 3 == (b - 9) // 3)
               for a, b in two)
    ops = d.meta[:, -1]
    assert set(np.unique(ops[d.y == 0])) == set(range(len(FAMILIES)))
    assert (ops[d.y == 1] == -1).all()
    # line swaps keep rows and columns valid: only boxes fail
    line = (ops == FAMILIES.index("line_swap")) & (d.y == 0)
    assert line.sum() > 50 and (d.c[line][:, :18] == 1).all()


def test_single_family_configs():
    d = generate(small(modality="tabular", negative_ops={"line_swap": 1.0, "group_permute": 0.0, "corrupt": 0.0},
                       fail_counts="6-9:1"))
    neg = d.y == 0
    assert (d.c[neg][:, :18] == 1).all() and ((27 - d.c[neg].sum(1)) >= 6).all()
    with pytest.raises(ValueError, match="no family with positive weight reaches 2"):
        small(negative_ops={"line_swap": 1.0, "group_permute": 0.0, "corrupt": 0.0})


def test_seed_grids_scale_with_the_boards():
    """One HiGHS solve per ``boards_per_mip_seed`` boards, between 1 and ``n_mip_seeds``."""
    sizes = {"n_val": 0, "n_calib": 0, "n_test": 0}
    used = lambda n, **kw: SudokuConfig(n_train=n, **sizes, **kw).mip_seeds_used  # noqa: E731
    assert (used(1), used(1000), used(2000), used(2001), used(10_000), used(64_000), used(1_000_000)) == (1, 1, 1, 2, 5, 32, 32)
    assert used(1000, boards_per_mip_seed=0) == 32 and used(1000, boards_per_mip_seed=100, n_mip_seeds=4) == 4
    assert generate(small(modality="tabular")).info["valid_source"].startswith("1 HiGHS")


def test_a_walk_that_cannot_rise_restarts_early_and_still_hits_its_target(monkeypatch):
    """On the pattern grid no row or column swap breaks exactly 4 boxes (every swap breaks 6 or
    none), so ``line_swap`` walks to 4 can only stall: they restart after STALL_PROPOSALS
    proposals without a rise (not after max_steps steps each) and finish as ``corrupt``."""
    from synthetic.sudoku import negatives

    r = np.arange(9)
    pattern = ((r[:, None] * 3 + r[:, None] // 3 + r[None, :]) % 9 + 1).astype(np.int8)
    steps = []
    real = negatives.n_failing
    monkeypatch.setattr(negatives, "n_failing", lambda b: steps.append(len(b)) or real(b))
    boards, fam = walk(np.repeat(pattern[None], 5, 0), np.full(5, 4), np.zeros(5, np.int64), np.random.default_rng(0))
    assert (real(boards) == 4).all() and (fam == FAMILIES.index("corrupt")).all()
    assert steps[0] == 5 * negatives.fan_out(5) == 5 * negatives.MAX_FAN_OUT  # few walkers: many proposals each
    stalls = 3 * -(-negatives.STALL_PROPOSALS // negatives.MAX_FAN_OUT)  # three attempts, each stalled
    assert len(steps) <= stalls + 10 < 3 * 60


def test_determinism_and_seed_dependence():
    a = generate(small(modality="tabular")).to_arrays()
    b = generate(small(modality="tabular")).to_arrays()
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    c = generate(small(modality="tabular", seed=1))
    assert not np.array_equal(a["extra__board"], c.extra["board"])


def test_tabular_is_one_hot(data):
    x = one_hot(data.extra["board"])
    assert x.shape == (len(x), 729) and x.dtype == np.float32
    np.testing.assert_array_equal(x.reshape(-1, 81, 9).argmax(-1) + 1, data.meta[:, :81])


def test_load_uses_the_cache(tmp_path):
    cfg = small(modality="tabular")
    a = load(cfg, tmp_path)
    assert len(list(tmp_path.glob("sudoku-*.npz"))) == 1
    b = load(cfg, tmp_path)
    np.testing.assert_array_equal(a.c, b.c)
    np.testing.assert_array_equal(a.extra["board"], b.extra["board"])
    assert b.info["generator"] == "synthetic.sudoku"


# --------------------------------------------------------------------------- rendering
def test_image_dataset_shapes_and_rerender(data):
    side = 9 * 18 + 2
    assert data.x.shape == (len(data.y), side, side) and data.x.dtype == np.uint8  # grey: one channel
    assert image_size(18) == side and image_size(50) == 9 * 50 + 3
    rows = np.array([0, 7, 11])
    np.testing.assert_array_equal(rerender(data, rows, small()), data.x[rows])


def test_grey_storage_gives_the_rgb_model_inputs(data):
    """One stored channel, the same float batches as the RGB render: the RGB image is the grey one repeated."""
    import torch

    from synthetic.datamodule import images_to_float

    rows = np.arange(6)
    cfg = small()
    rgb = render_boards(data.meta[rows, :81].reshape(-1, 9, 9), cell_size=cfg.cell_size, style=cfg.style, seeds=data.meta[rows, 81],
                        pencil_prob=cfg.pencil_prob, pencil_max=cfg.pencil_max, blur=cfg.blur, noise=cfg.noise,
                        glyph_seed=cfg.seed, glyph_part=SPLITS["train"], glyph_variants=cfg.glyph_variants)  # fmt: skip
    assert (data.split[rows] == SPLITS["train"]).all()  # rows of one split: its glyph bank
    assert rgb.shape == (*data.x[rows].shape, 3)
    torch.testing.assert_close(images_to_float(torch.from_numpy(data.x[rows])), images_to_float(torch.from_numpy(rgb)), atol=0, rtol=0)


def _preset(name: str) -> SudokuConfig:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(overrides=[f"+data={name}"])
    return SudokuConfig.from_dict(OmegaConf.to_container(cfg.data, resolve=True))


@pytest.mark.parametrize("preset,side,style", [("sudoku_50px", 453, "printed"), ("sudoku_18px", 164, "handwritten")])
def test_preset_rendering_shapes(preset, side, style):
    cfg = _preset(preset)
    assert cfg.name == "sudoku" and cfg.style == style and image_size(cfg.cell_size) == side
    boards = valid_boards(6, seed=0, n_mip_seeds=1)
    boards[0, 0, 0] = 0  # an empty cell renders blank
    x = render_boards(boards, cell_size=cfg.cell_size, style=cfg.style, pencil_prob=cfg.pencil_prob,
                      pencil_max=cfg.pencil_max, blur=cfg.blur, noise=cfg.noise, glyph_seed=cfg.seed)
    assert x.shape == (6, side, side, 3) and x.dtype == np.uint8
    assert (x[..., 0] == x[..., 1]).all()  # grey boards
    y0, y1, x0, x1 = cell_box(0, 0, cfg.cell_size)
    m = cfg.cell_size // 5  # cell interior without lines
    blank = x[0, y0 + m : y1 - m, x0 + m : x1 - m, 0]
    ink = x[1, y0 + m : y1 - m, x0 + m : x1 - m, 0]
    if cfg.pencil_prob == 0:
        assert (blank == 255).all()
    assert ink.min() < 100  # a digit was drawn
    # the thick outer border is dark
    assert (x[:, :, :2, 0] < 60).all() and (x[:, :2, :, 0] < 60).all()


def test_render_is_per_board_deterministic():
    boards = valid_boards(5, seed=4, n_mip_seeds=1)
    kw = {"cell_size": 18, "style": "handwritten", "pencil_prob": 0.4, "noise": 6.0, "blur": 0.4}
    seeds = np.array([11, 22, 33, 44, 55])
    batch = render_boards(boards, seeds=seeds, **kw)
    for i in range(5):
        np.testing.assert_array_equal(render_boards(boards[i : i + 1], seeds=seeds[i : i + 1], **kw)[0], batch[i])
    other = render_boards(boards, seeds=seeds + 1, **kw)
    assert not np.array_equal(other, batch)
    plain = render_boards(boards, cell_size=18, style="printed", seeds=seeds)
    gray = render_boards(boards, cell_size=18, style="printed", seeds=seeds, gray=True)
    np.testing.assert_array_equal(plain[..., 0], gray)  # fast RGB path == grey path


# --------------------------------------------------------------------------- config
@pytest.mark.parametrize(
    "kw,msg",
    [
        ({"valid_fraction": 1.5}, "valid_fraction"),
        ({"cell_size": 4}, "cell_size"),
        ({"style": "cursive"}, "style"),
        ({"modality": "text"}, "modality"),
        ({"negative_ops": {"flip": 1.0}}, "unknown families"),
        ({"fail_counts": "2-x:1"}, "fail_counts"),
        ({"fail_counts": "2:0"}, "sum to zero"),
        ({"n_train": -1}, "n_train"),
        ({"name": "robot"}, "name"),
        ({"pencil_max": 9}, "pencil_max"),
        ({"boards_per_mip_seed": -1}, "boards_per_mip_seed"),
    ],
)
def test_config_fails_with_one_clear_line(kw, msg):
    with pytest.raises(ValueError, match=msg) as err:
        SudokuConfig(**kw)
    assert "\n" not in str(err.value)


def test_yaml_keys_are_the_dataclass_fields():
    import dataclasses

    import yaml

    keys = set(yaml.safe_load((REPO / "conf/data/sudoku.yaml").read_text()))
    assert keys == {f.name for f in dataclasses.fields(SudokuConfig)}
    cfg = _preset("sudoku")
    assert cfg == SudokuConfig()  # YAML defaults == dataclass defaults
    with pytest.raises(ValueError, match="unknown keys"):
        SudokuConfig.from_dict({"cell_sise": 3})


def test_labelled_boards_reports_targets():
    lab = labelled_boards(small(modality="tabular"))
    neg = lab["y"] == 0
    np.testing.assert_array_equal(27 - lab["c"][neg].sum(1), lab["target"][neg])


def test_datamodule_serves_boards(tmp_path):
    from synthetic.datamodule import SyntheticDataModule
    from synthetic.sudoku import SudokuConfig, load

    cfg = SudokuConfig.from_dict({"n_train": 40, "n_val": 8, "n_calib": 8, "n_test": 8, "n_mip_seeds": 2, "modality": "tabular"})
    dm = SyntheticDataModule(lambda: load(cfg, tmp_path), batch_size=16)
    batch = next(iter(dm.train_dataloader()))
    assert batch["x"].shape == (16, 729) and batch["c"].shape == (16, 27) and batch["board"].shape == (16, 9, 9)
    assert (batch["y"].bool() == batch["c"].bool().all(1)).all()


def test_cbm_data_export_writes_board(tmp_path):
    data_cli = pytest.importorskip("cbm.experiments.data_cli")
    out = tmp_path / "sudoku.npz"
    data_cli.run(["export", "data=sudoku", "data.modality=tabular", "data.n_train=20", "data.n_val=4",
                  "data.n_calib=4", "data.n_test=4", "data.n_mip_seeds=1", f"out={out}", "cache_dir=null"])
    with np.load(out) as f:
        assert f["board"].shape == (32, 9, 9)
        np.testing.assert_array_equal(f["c"], check_board(f["board"]).astype(np.float32))
        assert {"x", "c", "c_true", "y"} <= set(f.files)


def test_highspy_model_is_scipy_milps_model_with_the_same_solutions():
    """The MIP goes to HiGHS through highspy directly (no scipy.optimize import in a new process):
    the same 324 x 729 model as through scipy.optimize.milp, and the same grid for every givens."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import csr_matrix

    from synthetic.sudoku.solver import _given_bounds, constraint_matrix, random_givens

    rows, cols = constraint_matrix()
    a = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(324, 729)).toarray()
    assert a.max() == 1 and (a.sum(0) == 4).all() and (a.sum(1) == 9).all()  # a digit of a cell: cell, row, column, box
    board = solve_mip(rng=0)
    x = np.zeros(729)
    x[np.arange(81) * 9 + board.reshape(-1).astype(np.int64) - 1] = 1
    assert (a @ x == 1).all()
    for seed in range(6):
        givens = random_givens(np.random.default_rng(seed))
        res = milp(c=np.zeros(729), constraints=LinearConstraint(a, 1.0, 1.0), integrality=np.ones(729),
                   bounds=Bounds(_given_bounds(givens), np.ones(729)), options={"disp": False})  # fmt: skip
        assert (solve_mip(givens) == (res.x.reshape(81, 9).argmax(1) + 1).reshape(9, 9)).all()
