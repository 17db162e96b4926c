"""Label rules (sparse, balanced, custom with expression terms, deterministic labels), the
training-split shift of concept-benchmark 0.4 and the human concept set: exact expectations
from the body-attribute grid (every combination once: the attributes are uniform and independent)."""

from __future__ import annotations

import numpy as np
import pytest

from synthetic.base import SPLITS
from synthetic.robot import RobotConfig, attribute_table, generate, load_concept_set
from synthetic.robot.config import LabelConfig, body_grid, pattern_share
from synthetic.robot.generator import glorp_probability
from synthetic.robot.rules import LABEL_RULES, RULE_TRAIN_CONSTRAINTS

N_TEST = 40_000


def tabular(**kw) -> RobotConfig:
    return RobotConfig(**{"modality": "tabular", "n_train": 3800, "n_calib": 0, "n_test": N_TEST, **kw})


def within_binomial(share: float, p: float, n: int, z: float = 4.5) -> bool:
    return abs(share - p) <= z * np.sqrt(p * (1 - p) / n)


def exact_rates(cfg: RobotConfig) -> tuple[float, float]:
    """``(Pr(Glorp), Bayes accuracy from the attributes)`` over the uniform body attributes."""
    p = glorp_probability(body_grid(), cfg)
    return float(p.mean()), float(np.maximum(p, 1 - p).mean())


def test_balanced_rule_is_half_glorps_exactly_and_generated_data_agree():
    cfg = tabular(label_rule="balanced")
    assert cfg.label == LabelConfig(**LABEL_RULES["balanced"])
    share, bayes = exact_rates(cfg)
    # score = 6(mouth + body + head + antennae + ears) + 8 pointy - 3 knees - 2 elbows - 16.5 has
    # mean 0 and is symmetric about it (each term is symmetric about w/2), so Pr(Glorp) = 1/2
    assert share == pytest.approx(0.5, abs=1e-12)
    data = generate(cfg)
    test = data.split == SPLITS["test"]
    assert within_binomial(data.y[test].mean(), share, N_TEST)
    # the Bayes classifier 1[p > 1/2] on the attributes reaches the exact Bayes rate (within noise)
    p = glorp_probability(attribute_table(data.meta[test]), cfg)
    assert within_binomial(((p > 0.5) == data.y[test]).mean(), bayes, N_TEST)
    assert 0.5 < bayes < 1.0


def test_sparse_rule_is_the_default_and_seven_eighths_glorps():
    assert RobotConfig().label == LabelConfig(**LABEL_RULES["sparse"]) == LabelConfig()
    share, _ = exact_rates(RobotConfig())
    # Drent needs an open mouth and flat feet (1/4 of robots), then knees decide: ~1/8 Drent
    assert share == pytest.approx(0.875, abs=2e-3)


def test_deterministic_labels_are_the_rule_thresholded():
    cfg = tabular(label_rule="balanced", label={"stochastic": False})
    data = generate(cfg)
    p = glorp_probability(attribute_table(data.meta), cfg)
    np.testing.assert_array_equal(data.y, (p > 0.5).astype(np.int64))


def test_custom_rule_with_expression_terms():
    rule = {"weights": {"foot_subtype == 9": 2.0, "(knees == 1) & (elbows == 0)": -1.0}, "bias": -0.5, "stochastic": False}
    data = generate(tabular(label_rule="custom", label=rule))
    t = attribute_table(data.meta)
    score = 2.0 * (t["foot_subtype"] == 9) - 1.0 * ((t["knees"] == 1) & (t["elbows"] == 0)) - 0.5
    np.testing.assert_array_equal(data.y, (score > 0).astype(np.int64))


@pytest.mark.parametrize("rule", ["balanced", "sparse"])
def test_training_split_shift_has_the_exact_shares_and_other_splits_do_not(rule):
    cfg = tabular(label_rule=rule, train_constraints="rule", n_calib=2000)
    data = generate(cfg)
    feet = attribute_table(data.meta)["foot_subtype"]
    train = data.split == SPLITS["train"]
    n = int(train.sum())
    want = np.zeros(10, dtype=np.int64)
    for c in RULE_TRAIN_CONSTRAINTS[rule]:
        want[int(c["expr"].split("==")[1])] = int(n * c["min_fraction"])
    counts = np.bincount(feet[train], minlength=10)
    # each constraint gets int(n * share) robots; the shares sum to 1, so only the rounding is left
    # (balanced: none; sparse: 2 robots drawn as usual from what the constraints left in the pool)
    left = n - int(want.sum())
    assert left == {"balanced": 0, "sparse": 2}[rule]
    assert (counts >= want).all() and int((counts - want).sum()) == left
    for split in ("val", "calib", "test"):
        rows = data.split == SPLITS[split]
        counts = np.bincount(feet[rows], minlength=10)
        assert (counts > 0).all(), split  # every sub-type, drawn as usual
        assert all(within_binomial(s, 0.1, int(rows.sum())) for s in counts / rows.sum())
    # shifted training robots are drawn afresh; the other splits are those of the unshifted config
    plain = generate(tabular(label_rule=rule, n_calib=2000))
    for split in ("val", "calib", "test"):
        rows = data.split == SPLITS[split]
        np.testing.assert_array_equal(data.meta[rows], plain.meta[plain.split == SPLITS[split]])


def test_custom_constraints_take_their_share_then_draw_as_usual_and_are_deterministic():
    cons = [{"expr": "(knees == 1) & (elbows == 1)", "min_fraction": 0.6}]
    a, b = (generate(tabular(train_constraints=cons, n_test=0)) for _ in range(2))
    np.testing.assert_array_equal(a.meta, b.meta)
    t = attribute_table(a.meta[a.split == SPLITS["train"]])
    hit = ((t["knees"] == 1) & (t["elbows"] == 1)).mean()
    n = len(t["knees"])
    forced = int(n * 0.6) / n
    # the forced 60% plus a quarter of the freely drawn rest (the pattern's share)
    assert pattern_share("(knees == 1) & (elbows == 1)") == 0.25
    assert within_binomial(hit - forced, 0.25 * (1 - forced), n)


def test_human_concept_set_marks_the_six_training_foot_subtypes():
    cs = load_concept_set("human")
    assert len(cs) == 12 and cs.names[:6] == load_concept_set("true").names[:6]
    table = body_grid()
    c = cs.evaluate(table)
    feet = table["foot_subtype"]
    shown = sorted({int(e["expr"].split("==")[1]) for e in RULE_TRAIN_CONSTRAINTS["balanced"]})
    assert shown == [0, 2, 3, 6, 7, 9]
    np.testing.assert_array_equal(c[:, 6:].sum(1), np.isin(feet, shown).astype(np.float32))
    for j, k in enumerate(shown):
        np.testing.assert_array_equal(c[:, 6 + j], (feet == k).astype(np.float32))


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"label_rule": "bogus"}, "label_rule: must be one of"),
        ({"label_rule": "balanced", "label": {"bias": 3.0}}, "label_rule=balanced fixes the rule"),
        ({"label_rule": "custom", "label": {"weights": {"tail == 1": 1.0}}}, "label.weights: term 'tail == 1'"),
        ({"label_rule": "custom", "label": {"weights": {}}}, "non-empty mapping"),
        ({"label_rule": "custom", "label": {"stochastic": "yes"}}, "label.stochastic"),
        ({"label_rule": "custom", "train_constraints": "rule"}, "'rule' needs a named label_rule"),
        ({"train_constraints": "fancy"}, "train_constraints: expected a list"),
        ({"train_constraints": [{"expr": "knees"}]}, "exactly the keys expr and min_fraction"),
        ({"train_constraints": [{"expr": "palette == 1", "min_fraction": 0.1}]}, "body attributes only"),
        ({"train_constraints": [{"expr": "foot_subtype == 12", "min_fraction": 0.1}]}, "matches no robot"),
        ({"train_constraints": [{"expr": "knees", "min_fraction": 0.7}, {"expr": "elbows", "min_fraction": 0.4}]}, "sum to 1.1 > 1"),
        ({"train_constraints": [{"expr": "knees", "min_fraction": 1.5}]}, "min_fraction: expected a number in"),
    ],
)
def test_bad_rules_and_constraints_raise_one_line(kw, match):
    with pytest.raises(ValueError, match=match) as err:
        RobotConfig(**kw)
    assert "\n" not in str(err.value)


def test_neutral_new_knobs_keep_the_cache_key():
    rec = RobotConfig().record()
    assert "label_rule" not in rec and "train_constraints" not in rec and "stochastic" not in rec["label"]
    assert "label_rule" in RobotConfig(label_rule="balanced").record()
