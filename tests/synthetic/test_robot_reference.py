"""``data.render=reference``: concept-benchmark 0.4.1's robots, catalogue, labels and row split.

The reference itself is not installed here; these are exact expectations from its geometry and
procedure (``synthetic/robot/reference``), plus our counts against the reference's recorded ones
(``benchmarks/results/vs_reference_pixels.json``, made by ``benchmarks/vs_reference_pixels.py``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from synthetic.robot import RobotConfig, generate
from synthetic.robot.attributes import BODY_NAMES, META_INDEX
from synthetic.robot.reference import geometry as g
from synthetic.robot.reference.catalog import N_ROBOTS, catalogue
from synthetic.robot.reference.draw import N_SCHEMES, render
from synthetic.robot.reference.rows import labels
from synthetic.robot.reference.schemes import SCHEMES

COL = {name: i for i, name in enumerate(BODY_NAMES)}
RESULTS = Path(__file__).parents[2] / "benchmarks" / "results" / "vs_reference_pixels.json"


def robots(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    body, scheme = catalogue(4)
    rows = np.random.default_rng(seed).choice(len(body), n, replace=False)
    return body[rows], scheme[rows]


def flipped(body: np.ndarray, name: str, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = body.copy(), body.copy()
    lo[:, COL[name]], hi[:, COL[name]] = a, b
    return lo, hi


def changed(body: np.ndarray, scheme: np.ndarray, name: str, size: int, a: int = 0, b: int = 1) -> np.ndarray:
    """``bool [N, size, size]``: the pixels that change when attribute ``name`` goes from a to b."""
    lo, hi = flipped(body, name, a, b)
    return (render(lo, scheme, size) != render(hi, scheme, size)).any(axis=-1)


# --------------------------------------------------------------------------- geometry
@pytest.mark.parametrize("size", [32, 64, 119])
def test_knee_and_elbow_dots_are_drawn_on_every_robot_below_120_px(size):
    body, scheme = robots(200)
    for name in ("knees", "elbows"):
        assert not changed(body, scheme, name, size).any(), f"{name} changes pixels at {size} px"


@pytest.mark.parametrize("size", [120, 224])
def test_knees_and_elbows_show_from_120_px(size):
    body, scheme = robots(50)
    for name in ("knees", "elbows"):
        assert changed(body, scheme, name, size).sum(axis=(1, 2)).min() > 0


@pytest.mark.parametrize("size, faint", [(32, 2), (128, 20)])
@pytest.mark.parametrize("flat, pointy", [(0, 5), (2, 7)])  # trapezoid and square twins
def test_twin_feet_differ_only_in_the_sole_rows(size, faint, flat, pointy):
    """The twins share every vertex above 88% of the foot's height: above the sole rows at most the
    anti-aliasing of a side edge changes (the trapezoids' sides tilt a little differently)."""
    body, scheme = robots(100)
    lo, hi = flipped(body, "foot_subtype", flat, pointy)
    diff = np.abs(render(lo, scheme, size).astype(np.int16) - render(hi, scheme, size)).max(axis=-1)
    f = g.Frame(size)
    sole = math.floor(f.y_feet + 0.88 * f.foot_h - 0.5)  # first row the parted vertices' outline reaches
    assert diff[:, sole:].max() > faint  # the twins do differ, at the sole
    assert diff[:, :sole].max() <= faint
    assert not diff[:, math.floor(f.y_feet + f.foot_h + 0.5) + 1 :].any()
    if (flat, pointy) == (2, 7):
        assert not diff[:, :sole].any()  # the square twins' sides are the same lines


def test_a_knee_dot_is_tiny_and_shared():
    """At 32 px the knee dot is 0.1 r wide (0.27 px) plus its 1 px outline: a few dark pixels, the same with and without knees."""
    body, scheme = robots(20)
    lo, hi = flipped(body, "knees", 0, 1)
    np.testing.assert_array_equal(render(lo, scheme, 32), render(hi, scheme, 32))
    assert g.Frame(32).joint == pytest.approx(32 / 12 * 0.1)


def test_colours_are_the_scheme_table_on_white_with_black_outlines():
    assert len(SCHEMES) == N_SCHEMES == 71
    assert SCHEMES[0] == ((171, 221, 164), (106, 61, 154))  # colorir spectral/paired, shuffled by 0.4.1 with seed 123456
    assert all(len(s) == 2 and all(0 <= c <= 255 for rgb in s for c in rgb) for s in SCHEMES)
    size = 120  # the body's left edge, x = 42.5, runs through the centre of pixel column 42
    f = g.Frame(size)
    body, scheme = robots(60)
    body[:, COL["body_round"]] = 0  # square body: its halves are flat fills
    x = render(body, scheme, size)
    y = int(f.y_body + 0.5 * f.body_h)
    left, right = int(f.x_mid - 0.5 * f.body_w / 2), int(f.x_mid + 0.5 * f.body_w / 2)
    np.testing.assert_array_equal(x[:, y, left], np.asarray(SCHEMES)[scheme, 0])
    np.testing.assert_array_equal(x[:, y, right], np.asarray(SCHEMES)[scheme, 1])
    assert (x[:, 0, 0] == 255).all() and (x[:, -1, -1] == 255).all()  # white background
    outline = int(f.x_mid - 0.5 * f.body_w)  # 1 px wide and black
    assert (x[:, y, outline] == 0).all() and (x[:, y, outline - 1] == 255).all()


def test_render_is_vectorised_and_checks_its_inputs():
    body, scheme = robots(10)
    one = np.stack([render(body[i : i + 1], scheme[i : i + 1], 32)[0] for i in range(10)])
    np.testing.assert_array_equal(render(body, scheme, 32), one)
    with pytest.raises(ValueError, match="colour scheme out of range"):
        render(body[:1], [71], 32)
    with pytest.raises(ValueError, match="2 robots but 1 colour schemes"):
        render(body[:2], [0], 32)


# --------------------------------------------------------------------------- catalogue, labels, split
def reference_cfg(**kw) -> RobotConfig:
    base = {"render": "reference", "label_rule": "balanced", "train_constraints": "rule", "renders_per_robot": 4,
            "n_calib": 0, "seed": 1014, "modality": "tabular"}  # fmt: skip
    return RobotConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def v04():
    return generate(reference_cfg())


def test_catalogue_is_every_robot_per_render_with_scheme_row_mod_71():
    body, scheme = catalogue(4)
    assert len(body) == 4 * N_ROBOTS == 30720
    assert len(np.unique(body[:N_ROBOTS], axis=0)) == N_ROBOTS
    np.testing.assert_array_equal(body[N_ROBOTS:2 * N_ROBOTS], body[:N_ROBOTS])
    np.testing.assert_array_equal(scheme, np.arange(30720) % 71)
    # 0.4.1's order: head first, foot sub-type fastest; its mouth values are (closed, open)
    assert body[0].tolist() == [0, 0, 0, 0, 0, 0, 1, 0, 0] and body[1, COL["foot_subtype"]] == 1


def test_split_sizes_and_training_shares_are_the_references(v04):
    sizes = {name: len(v04.indices(name)) for name in ("train", "val", "calib", "test")}
    assert sizes == {"train": 3800, "val": 3384, "calib": 0, "test": 10000}
    feet = v04.meta[:, COL["foot_subtype"]]
    counts = np.bincount(feet[v04.indices("train")], minlength=10)
    assert counts.tolist() == [380, 0, 380, 1140, 0, 0, 380, 380, 0, 1140]
    for split in ("val", "test"):
        assert (np.bincount(feet[v04.indices(split)], minlength=10) > 0).all()  # all ten sub-types, unshifted
    rows = v04.meta[:, META_INDEX["robot_id"]]
    assert len(np.unique(rows)) == len(rows)  # rows, not robots: each catalogue row at most once
    for split in ("train", "val", "test"):
        r = rows[v04.indices(split)]
        assert (np.diff(r) > 0).all()  # in catalogue order, as 0.4.1's mask filter leaves them
    np.testing.assert_array_equal(v04.meta[:, META_INDEX["palette"]], rows % 71)


def test_labels_are_drawn_per_row(v04):
    body, _ = catalogue(4)
    from synthetic.robot.generator import glorp_probability
    from synthetic.robot.reference.catalog import meta_rows

    meta = meta_rows(body, np.zeros(len(body), dtype=np.int64), np.arange(len(body)))
    from synthetic.robot.attributes import attribute_table

    p = glorp_probability(attribute_table(meta), reference_cfg())
    y = labels(p, 1014, True)
    np.testing.assert_array_equal(y, np.random.default_rng(1014).random(len(p)) < p)
    renders = y.reshape(4, N_ROBOTS)
    assert (renders.min(axis=0) != renders.max(axis=0)).mean() > 0.01  # the four renders of a robot differ in label
    np.testing.assert_array_equal(v04.y, y[v04.meta[:, META_INDEX["robot_id"]]])


def test_same_config_is_byte_identical_and_another_seed_redraws():
    cfg = reference_cfg(modality="image", image_size=16, n_train=400, n_test=600, n_calib=50)
    a, b = generate(cfg), generate(cfg)
    for name in ("x", "c", "c_true", "y", "split", "meta"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    other = generate(reference_cfg(modality="image", image_size=16, n_train=400, n_test=600, n_calib=50, seed=1015))
    rows = lambda d, s: d.meta[d.indices(s), META_INDEX["robot_id"]]  # noqa: E731
    assert not np.array_equal(rows(a, "test"), rows(other, "test"))
    y_a = np.zeros(30720, dtype=np.int64) - 1
    y_o = y_a.copy()
    y_a[a.meta[:, -1]], y_o[other.meta[:, -1]] = a.y, other.y
    both = (y_a >= 0) & (y_o >= 0)
    assert (y_a[both] != y_o[both]).any()  # new labels on the rows both hold


def test_reference_images_follow_the_rows(v04):
    cfg = reference_cfg(modality="image", image_size=24, n_train=100, n_test=100, n_calib=10)
    data = generate(cfg)
    meta = data.meta
    np.testing.assert_array_equal(data.x, render(meta[:, :9], meta[:, META_INDEX["palette"]], 24))
    assert data.info["render"]["kind"] == "reference"


def test_reference_configs_are_checked():
    with pytest.raises(ValueError, match=r"RobotConfig.render: must be one of \['ours', 'reference'\], got 'cairo'"):
        RobotConfig(render="cairo")
    with pytest.raises(ValueError, match="source=concept_benchmark makes 0.4.1's own robots: needs render=reference"):
        RobotConfig(source="concept_benchmark")
    with pytest.raises(ValueError, match="RobotConfig.occlude: hides parts of this project's renderer"):
        RobotConfig(render="reference", occlude=["knees"])
    with pytest.raises(ValueError, match="n_train \\+ n_test = 31,000 do not fit"):
        RobotConfig(render="reference", renders_per_robot=4, n_train=21000)
    with pytest.raises(ValueError, match="leaves 13,536 catalogue rows for calibration, got n_calib=20,000"):
        reference_cfg(n_calib=20000)


def test_reference_mode_is_part_of_the_cache_key_and_ours_is_unchanged():
    from synthetic.robot.generator import cache_key

    ours = RobotConfig()
    assert "render" not in cache_key(ours)["config"] and "source" not in cache_key(ours)["config"]
    ref = cache_key(RobotConfig(render="reference", renders_per_robot=4, n_calib=0))["config"]
    assert ref["render"] == "reference" and "nuisance" not in ref


# --------------------------------------------------------------------------- against the reference's own renders
def test_flip_counts_are_within_25_percent_of_the_references_recorded_counts():
    """Our counts, recomputed here, against the reference's counts recorded by vs_reference_pixels.py."""
    import importlib.util

    recorded = json.loads(RESULTS.read_text())
    spec = importlib.util.spec_from_file_location("vs_reference_pixels", RESULTS.parents[1] / "vs_reference_pixels.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    body, scheme = bench.robots(recorded["n"], recorded["seed"])
    flip_body, flip_scheme = bench.pairs(body, scheme)
    ours = bench.counts(render(flip_body, flip_scheme, recorded["size"]), recorded["n"])
    assert set(ours) == set(recorded["concepts"])
    for name, row in recorded["concepts"].items():
        mine = {"ours_any": ours[name]["any"], "ours_over40": ours[name]["over40"], **{k: v for k, v in row.items() if k.startswith("reference")}}
        verdict = bench.judge(mine)
        assert verdict["within_25pct"], f"{name}: ours {ours[name]['any']:.1f} pixels, reference {row['reference_any']:.1f}"
        assert verdict["over40_within_25pct_or_1px"], f"{name} (> 40 levels): ours {ours[name]['over40']:.1f}, reference {row['reference_over40']:.1f}"
        assert ours[name]["any"] == pytest.approx(row["ours_any"])  # the recorded run drew what we draw now
        if name in ("knees", "elbows") and recorded["size"] < 120:
            assert ours[name]["any"] == row["reference_any"] == 0
