"""Data transforms of concept-benchmark 0.4 on the robot generator: asymmetric concept noise,
missing training annotations (MCAR / MNAR) and label noise -- rates within binomial tolerance,
everything else byte-identical to the untransformed data."""

from __future__ import annotations

import numpy as np
import pytest

from synthetic.base import SPLITS
from synthetic.robot import RobotConfig, generate

BASE = {"modality": "tabular", "n_train": 12_000, "val_fraction": 0.2, "n_calib": 0, "n_test": 4000}


def within(rate: float, p: float, n: int, z: float = 4.5) -> bool:
    return abs(rate - p) <= z * np.sqrt(max(p * (1 - p), 1e-12) / n) + 1e-12


@pytest.fixture(scope="module")
def plain():
    return generate(RobotConfig(**BASE))


def test_asymmetric_noise_flips_each_value_at_its_own_rate(plain):
    data = generate(RobotConfig(**BASE, concept_noise_asym={"p01": 0.2, "p10": 0.05}))
    clean = data.extra["c_clean"]
    np.testing.assert_array_equal(clean, plain.c)  # the clean values are those of the plain data
    flipped = data.c != clean
    zeros, ones = clean == 0, clean == 1
    assert within(flipped[zeros].mean(), 0.2, int(zeros.sum()))
    assert within(flipped[ones].mean(), 0.05, int(ones.sum()))
    np.testing.assert_array_equal(data.y, plain.y)
    np.testing.assert_array_equal(data.meta, plain.meta)


def test_mcar_missingness_is_on_the_training_split_only(plain):
    data = generate(RobotConfig(**BASE, concept_missing={"mechanism": "mcar", "p": 0.3}))
    obs = data.extra["c_observed"]
    train = data.split == SPLITS["train"]
    assert obs.dtype == np.uint8 and obs.shape == data.c.shape
    assert within(1 - obs[train].mean(), 0.3, int(obs[train].size))
    assert obs[~train].all()
    np.testing.assert_array_equal(data.c, plain.c)  # missingness marks, it does not change values
    assert "c_observed" not in plain.extra


def test_mnar_missingness_depends_on_the_annotated_value():
    data = generate(RobotConfig(**BASE, concept_missing={"mechanism": "mnar", "present_prob": 0.4, "absent_prob": 0.1}))
    train = data.split == SPLITS["train"]
    c, miss = data.c[train], data.extra["c_observed"][train] == 0
    assert within(miss[c == 1].mean(), 0.4, int((c == 1).sum()))
    assert within(miss[c == 0].mean(), 0.1, int((c == 0).sum()))


def test_label_noise_flips_labels_in_the_named_splits_only(plain):
    data = generate(RobotConfig(**BASE, label_noise={"p": 0.15, "splits": ["train"]}))
    flipped = data.y != plain.y
    train = data.split == SPLITS["train"]
    assert within(flipped[train].mean(), 0.15, int(train.sum()))
    assert not flipped[~train].any()
    np.testing.assert_array_equal(data.c, plain.c)


def test_neutral_transforms_keep_the_cache_key():
    rec = RobotConfig().record()
    assert not {"concept_noise_asym", "concept_missing", "label_noise"} & set(rec)


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"concept_noise_asym": {"p01": 1.5}}, "concept_noise_asym.p01"),
        ({"concept_noise_asym": {"p02": 0.1}}, "concept_noise_asym"),
        ({"concept_missing": {"mechanism": "mar"}}, "concept_missing.mechanism"),
        ({"concept_missing": {"mechanism": "mcar", "p": 1.0}}, "leaves no concept annotated"),
        ({"label_noise": {"p": 0.7}}, "label_noise.p"),
        ({"label_noise": {"p": 0.1, "splits": ["holdout"]}}, "label_noise.splits"),
    ],
)
def test_bad_transforms_raise_one_line(kw, match):
    with pytest.raises(ValueError, match=match) as err:
        RobotConfig(**kw)
    assert "\n" not in str(err.value)
