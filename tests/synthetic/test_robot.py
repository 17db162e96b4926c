"""Robot generator: label rule, concept sets, noise, determinism, cache, config, renderer."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import yaml

import synthetic.robot.generator as robot_gen
from synthetic.base import SPLITS
from synthetic.robot import (
    META_NAMES,
    PART_NAMES,
    TABULAR_NAMES,
    RobotConfig,
    attribute_table,
    decode,
    evaluate,
    generate,
    load,
    load_concept_set,
    part_mask,
    render,
    render_reference,
)
from synthetic.robot.attributes import FOOT_SUBTYPES

REPO = Path(__file__).resolve().parents[2]
COL = {name: i for i, name in enumerate(META_NAMES)}


def small(**kw) -> RobotConfig:
    base = {"n_train": 120, "n_calib": 30, "n_test": 60}
    return RobotConfig(**{**base, **kw})


def big_tabular(**kw) -> RobotConfig:
    base = {"modality": "tabular", "n_train": 24_000, "val_fraction": 0.0, "n_calib": 0, "n_test": 0}
    return RobotConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def big():
    return generate(big_tabular())


@pytest.fixture(scope="module")
def images():
    return generate(small(image_size=32))


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


# --------------------------------------------------------------------------- label rule
@pytest.mark.parametrize("scale", [4.2, 0.3])
def test_label_rule_per_causal_combination(scale, big):
    data = big if scale == 4.2 else generate(big_tabular(label_rule="custom", label={"scale": scale}))
    t = attribute_table(data.meta)
    for m in (0, 1):
        for f in (0, 1):
            for k in (0, 1):
                sel = (t["mouth_closed"] == m) & (t["foot_pointy"] == f) & (t["knees"] == k)
                n = int(sel.sum())
                assert n > 2000
                p = sigmoid(scale * (5 * m + 8 * f - 5 * k + 2))
                tol = 4.5 * np.sqrt(p * (1 - p) / n) + 1.0 / n
                assert abs(data.y[sel].mean() - p) <= tol, (m, f, k, data.y[sel].mean(), p)


def test_majority_class_is_glorp_seven_eighths(big):
    n = len(big.y)
    p = 0.875  # Drent needs open mouth, flat feet and knees (and then is Drent with prob ~1)
    assert abs(big.y.mean() - p) <= 4.5 * np.sqrt(p * (1 - p) / n) + 0.001
    assert big.class_names == ["Drent", "Glorp"]


def test_features_uniform(big):
    t = attribute_table(big.meta)
    n = len(big.y)
    for name in ("head_round", "body_round", "knees", "elbows", "antennae", "ears_triangle", "mouth_closed"):
        assert abs(t[name].mean() - 0.5) <= 4.5 * np.sqrt(0.25 / n)
    assert set(np.unique(t["foot_subtype"])) == set(range(10))
    assert set(np.unique(t["hand_subtype"])) == set(range(6))


def test_default_split_sizes():
    data = generate(RobotConfig(modality="tabular"))
    counts = {name: int((data.split == code).sum()) for name, code in SPLITS.items()}
    assert counts == {"train": 3040, "val": 760, "calib": 2000, "test": 10000}


def test_renders_per_robot_share_robot_and_split():
    data = generate(small(modality="tabular", renders_per_robot=3))
    assert len(data.y) == 3 * 210
    body = data.meta[:, : COL["shift_x"]]
    for r in (1, 2):
        np.testing.assert_array_equal(body[::3], body[r::3])
        np.testing.assert_array_equal(data.y[::3], data.y[r::3])
        np.testing.assert_array_equal(data.split[::3], data.split[r::3])
        np.testing.assert_array_equal(data.meta[::3, COL["robot_id"]], data.meta[r::3, COL["robot_id"]])
    nuisance = data.meta[:, COL["shift_x"]:COL["robot_id"]]
    assert (nuisance[::3] != nuisance[1::3]).any(axis=1).mean() > 0.9


def test_changing_modality_or_test_size_keeps_training_robots():
    a = generate(small(modality="tabular"))
    b = generate(small(modality="text", n_test=500))
    tr_a, tr_b = a.indices("train"), b.indices("train")
    np.testing.assert_array_equal(a.meta[tr_a], b.meta[tr_b])
    np.testing.assert_array_equal(a.y[tr_a], b.y[tr_b])


# --------------------------------------------------------------------------- determinism
@pytest.mark.parametrize("modality", ["image", "text", "tabular"])
def test_same_config_gives_byte_identical_arrays(modality):
    cfg = small(modality=modality, concept_noise=0.1, renders_per_robot=2, blur=0.7 if modality == "image" else 0.0)
    a, b = generate(cfg).to_arrays(), generate(dataclasses.replace(cfg)).to_arrays()
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert a[k].tobytes() == b[k].tobytes(), k
    c = generate(dataclasses.replace(cfg, seed=1)).to_arrays()
    assert a["meta"].tobytes() != c["meta"].tobytes()


# --------------------------------------------------------------------------- concepts
def test_concept_set_shapes_and_names():
    expected = {"true": 7, "fine": 12, "llm": 12}
    for name, m in expected.items():
        data = generate(small(modality="tabular", concept_set=name))
        assert data.c.shape == (210, m) and len(data.concept_names) == m
        assert data.c.dtype == np.float32 and set(np.unique(data.c)) <= {0.0, 1.0}
        assert data.c_true.shape == (210, 7)
        assert data.true_concept_names == load_concept_set("true").names
        assert data.concept_names == load_concept_set(name).names
        assert data.info["concept_set"]["name"] == name
    assert load_concept_set("true").names == [
        "head_round", "body_round", "knees", "antennae", "ears_triangle", "mouth_closed", "foot_pointy",
    ]


def test_true_concepts_equal_attributes(big):
    t = attribute_table(big.meta)
    for j, name in enumerate(big.true_concept_names):
        np.testing.assert_array_equal(big.c_true[:, j], t[name].astype(np.float32))
    np.testing.assert_array_equal(big.c, big.c_true)
    np.testing.assert_array_equal(t["foot_pointy"], big.meta[:, COL["foot_subtype"]] >= 5)


def test_fine_set_foot_one_hots():
    data = generate(big_tabular(n_train=3000, concept_set="fine"))
    t = attribute_table(data.meta)
    feet = [j for j, n in enumerate(data.concept_names) if n.startswith("foot_")]
    assert len(feet) == 6
    subtypes = [FOOT_SUBTYPES.index(data.concept_names[j][len("foot_"):]) for j in feet]
    assert sum(s < 5 for s in subtypes) == 3 and sum(s >= 5 for s in subtypes) == 3
    for j, s in zip(feet, subtypes):
        np.testing.assert_array_equal(data.c[:, j], (t["foot_subtype"] == s).astype(np.float32))
    assert data.c[:, feet].sum(axis=1).max() == 1
    hidden = ~np.isin(t["foot_subtype"], subtypes)
    assert hidden.any() and (data.c[hidden][:, feet] == 0).all()
    assert "foot_pointy" not in data.concept_names


def test_llm_set_is_not_causal(big):
    data = generate(big_tabular(n_train=6000, concept_set="llm"))
    t = attribute_table(data.meta)
    for j, name in enumerate(data.concept_names):
        col = data.c[:, j]
        assert 0.02 < col.mean() < 0.98, name
        for causal in ("mouth_closed", "foot_pointy", "knees"):
            assert abs(np.corrcoef(col, t[causal])[0, 1]) < 0.1, (name, causal)
        assert abs(np.corrcoef(col, data.y)[0, 1]) < 0.1, name


def test_annotation_noise_flips_at_rate_and_keeps_c_true(big):
    rate = 0.2
    noisy = generate(big_tabular(concept_noise=rate))
    np.testing.assert_array_equal(noisy.c_true, big.c_true)
    np.testing.assert_array_equal(noisy.y, big.y)
    flips = (noisy.c != big.c).mean(axis=0)
    n = len(big.y)
    assert np.all(np.abs(flips - rate) <= 4.5 * np.sqrt(rate * (1 - rate) / n))

    per = generate(big_tabular(n_train=8000, concept_noise={"knees": 0.3}))
    clean = per.c_true
    j = per.concept_names.index("knees")
    flips = (per.c != clean).mean(axis=0)
    assert abs(flips[j] - 0.3) <= 4.5 * np.sqrt(0.21 / 8000)
    assert flips[np.arange(7) != j].max() == 0


# --------------------------------------------------------------------------- modalities
def test_tabular_columns():
    data = generate(small(modality="tabular"))
    t = attribute_table(data.meta)
    assert data.x.dtype == np.float32 and data.x.shape == (210, len(TABULAR_NAMES))
    assert data.info["x_names"] == TABULAR_NAMES
    for j, name in enumerate(TABULAR_NAMES[:9]):
        np.testing.assert_array_equal(data.x[:, j], t[name])
    np.testing.assert_array_equal(data.x[:, 9:15].argmax(1), t["hand_subtype"])
    np.testing.assert_array_equal(data.x[:, 15:25].argmax(1), t["foot_subtype"])


def test_text_tokens_and_vocab():
    data = generate(small(modality="text"))
    vocab = data.info["vocab"]
    assert vocab[0] == "<pad>" and data.x.dtype == np.int64 and data.x.ndim == 2
    assert data.x.min() >= 0 and data.x.max() < len(vocab)
    t = attribute_table(data.meta)
    for i, s in enumerate(decode(data.x[:40], vocab)):
        words = s.split()
        assert words[:2] == ["a", data.info["palettes"][t["palette"][i]]] and s.endswith(".")
        assert FOOT_SUBTYPES[t["foot_subtype"][i]] in words
        assert ("open" in words or "gaping" in words) == (t["mouth_closed"][i] == 0)
        assert ("no knees" in s or "straight legs" in s) == (t["knees"][i] == 0)
    # padding only at the end
    nz = data.x != 0
    assert (np.diff(nz.astype(int), axis=1) <= 0).all()


@pytest.mark.parametrize("modality", ["image", "text", "tabular"])
def test_empty_dataset_is_refused(modality):
    with pytest.raises(ValueError, match="every split is empty"):
        RobotConfig(modality=modality, n_train=0, n_calib=0, n_test=0)
    data = generate(RobotConfig(modality=modality, n_train=0, n_calib=0, n_test=3))
    assert len(data.x) == len(data.y) == 3 and data.c.shape == (3, 7)


# --------------------------------------------------------------------------- cache
def test_cache_reuse_and_corruption_recovery(tmp_path, monkeypatch):
    cfg = small(modality="tabular")
    calls = []
    real = robot_gen.generate

    def counting(c):
        calls.append(1)
        return real(c)

    monkeypatch.setattr(robot_gen, "generate", counting)
    a = load(cfg, tmp_path)
    b = load(cfg, tmp_path)
    assert len(calls) == 1
    for k, v in a.to_arrays().items():
        assert v.tobytes() == b.to_arrays()[k].tobytes(), k
    files = list(tmp_path.glob("robot-*.npz"))
    assert len(files) == 1
    files[0].write_bytes(files[0].read_bytes()[:100])  # truncate
    c = load(cfg, tmp_path)
    assert len(calls) == 2
    np.testing.assert_array_equal(c.meta, a.meta)
    load(dataclasses.replace(cfg, seed=3), tmp_path)
    assert len(calls) == 3 and len(list(tmp_path.glob("robot-*.npz"))) == 2


# --------------------------------------------------------------------------- config
@pytest.mark.parametrize(
    "kw, match",
    [
        ({"concept_set": "nope"}, "concept_set"),
        ({"n_test": -1}, "n_test"),
        ({"concept_noise": 0.7}, "concept_noise"),
        ({"concept_noise": {"not_a_concept": 0.1}}, "concept_noise"),
        ({"occlude": ["tail"]}, "occlude"),
        ({"modality": "audio"}, "modality"),
        ({"image_size": 4}, "image_size"),
        ({"blur": -1.0}, "blur"),
        ({"renders_per_robot": 0}, "renders_per_robot"),
        ({"label": {"weights": {"tail": 1.0}}}, "label.weights"),
        ({"nuisance": {"max_shift": 9}}, "nuisance.max_shift"),
    ],
)
def test_bad_config_raises_clear_value_error(kw, match):
    with pytest.raises(ValueError, match=match) as err:
        RobotConfig(**kw)
    assert "\n" not in str(err.value)


def test_hydra_yaml_matches_dataclass():
    doc = yaml.safe_load((REPO / "conf" / "data" / "robot.yaml").read_text())
    assert set(doc) == {f.name for f in dataclasses.fields(RobotConfig)}
    assert doc["name"] == "robot"
    assert RobotConfig.from_dict(doc) == RobotConfig()


def test_expression_evaluator_is_restricted():
    env = {"arm_left": np.array([0, 4]), "elbows": np.array([1, 1]), "palette": np.array([0, 5])}
    np.testing.assert_array_equal(evaluate("(arm_left > 2) & elbows", env), [False, True])
    np.testing.assert_array_equal(evaluate("palette in (0, 1)", env), [True, False])
    np.testing.assert_array_equal(evaluate("not elbows or arm_left == 4", env), [False, True])
    for bad in ("__import__('os')", "arm_left.real", "env['x']", "lambda: 1", "unknown_name", "'a'"):
        with pytest.raises(ValueError):
            evaluate(bad, env)


# --------------------------------------------------------------------------- renderer
@pytest.mark.parametrize("size", [8, 32, 64])
def test_render_shape_dtype(size):
    meta = generate(small(modality="tabular", n_train=20, n_calib=0, n_test=0)).meta
    img = render(meta, size)
    assert img.shape == (20, size, size, 3) and img.dtype == np.uint8
    assert img.std() > 10


def test_rerender_from_meta_is_byte_identical(images):
    np.testing.assert_array_equal(render(images.meta, 32), images.x)
    cfg = small(image_size=48, blur=0.8, occlude=["hands"], n_train=40, n_test=10, n_calib=0)
    data = generate(cfg)
    np.testing.assert_array_equal(render(data.meta, 48, blur=0.8, occlude=["hands"]), data.x)


@pytest.mark.parametrize(
    "part, attr, values",
    [("mouth", "mouth_closed", (0, 1)), ("knees", "knees", (0, 1)), ("feet", "foot_subtype", (0, 6)),
     ("head", "head_round", (0, 1)), ("antennae", "antennae", (0, 1)), ("elbows", "elbows", (0, 1))],
)
def test_counterfactual_edit_is_local(images, part, attr, values):
    meta = images.meta[:60].copy()
    a, b = meta.copy(), meta.copy()
    a[:, COL[attr]], b[:, COL[attr]] = values
    ia, ib = render(a, 32), render(b, 32)
    changed = (ia != ib).any(axis=-1)
    region = part_mask(a, part, 32, region=True)
    np.testing.assert_array_equal(region, part_mask(b, part, 32, region=True))
    assert changed.any(axis=(1, 2)).all(), "every edit must change some pixels"
    assert not (changed & ~region).any(), "an edit must not change pixels outside the part's region"
    drawn = part_mask(b, part, 32) | part_mask(a, part, 32)
    assert (changed & drawn).sum() >= 0.5 * changed.sum()


def test_part_masks(images):
    meta = images.meta[:30]
    for part in PART_NAMES:
        m = part_mask(meta, part, 32)
        assert m.shape == (30, 32, 32) and m.dtype == bool
        assert (m <= part_mask(meta, part, 32, region=True)).all()
    assert part_mask(meta, "head", 32).any(axis=(1, 2)).all()
    with_knees = meta[:, COL["knees"]] == 1
    assert (part_mask(meta, "knees", 32).any(axis=(1, 2)) == with_knees).all()
    shifted = meta.copy()
    shifted[:, COL["shift_x"]] = meta[:, COL["shift_x"]] + 1
    shifted[:, COL["shift_x"]] = np.clip(shifted[:, COL["shift_x"]], -2, 2)
    moved = shifted[:, COL["shift_x"]] - meta[:, COL["shift_x"]] == 1
    np.testing.assert_array_equal(part_mask(shifted, "head", 32)[moved][:, :, 1:], part_mask(meta, "head", 32)[moved][:, :, :-1])


def test_occlusion_hides_the_part(images):
    meta = images.meta[:40].copy()
    a, b = meta.copy(), meta.copy()
    a[:, COL["mouth_closed"]], b[:, COL["mouth_closed"]] = 0, 1
    np.testing.assert_array_equal(render(a, 32, occlude=["mouth"]), render(b, 32, occlude=["mouth"]))
    assert (render(a, 32, occlude=["mouth"]) != render(a, 32)).any()


def test_blur_smooths():
    meta = generate(small(modality="tabular", n_train=10, n_calib=0, n_test=0)).meta
    sharp, blurred = render(meta, 32).astype(float), render(meta, 32, blur=1.5).astype(float)
    assert np.abs(np.diff(blurred, axis=2)).mean() < 0.7 * np.abs(np.diff(sharp, axis=2)).mean()


def test_vectorised_render_matches_pil_reference(images):
    meta = images.meta[:24]
    for size in (32, 64):
        diff = np.abs(render(meta, size).astype(int) - render_reference(meta, size).astype(int))
        assert diff.mean() < 1.0 and np.percentile(diff, 99) < 40


def test_oracle_values_are_noise_free():
    """``c_clean`` holds the chosen set's exact values; only ``c`` carries annotation noise."""
    from synthetic.robot.concepts import load_concept_set

    noisy = generate(RobotConfig(modality="tabular", concept_set="fine", concept_noise=0.3, n_train=500, n_calib=0, n_test=500))
    exact = load_concept_set("fine").evaluate(attribute_table(noisy.meta))
    np.testing.assert_array_equal(noisy.extra["c_clean"], exact)
    assert 0.2 < (noisy.c != noisy.extra["c_clean"]).mean() < 0.4
