"""Typed concepts (issue 47, part 3): categorical concepts as one softmax group, continuous concepts
fitted by their squared error, from the concept set's declaration to the models, their losses and
metrics, and group interventions (one request reveals the whole categorical concept)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from cbm.core.validation import ConfigError
from cbm.interventions import OracleIntervener, RandomPolicy
from cbm.interventions.costs import budget_total, within_budget
from cbm.interventions.engine import run_grid
from cbm.models import build_model
from cbm.models.concept_types import ConceptTypes, expand
from synthetic.registry import data_config, data_info, load_data
from synthetic.robot.attributes import FOOT_SUBTYPES, META_INDEX
from synthetic.robot.concepts import load_concept_set

FEET = [f"foot_{s}" for s in FOOT_SUBTYPES]


def test_the_typed_set_declares_a_ten_valued_foot_and_a_continuous_hand():
    s = load_concept_set("typed")
    assert s.names[6:16] == FEET and s.names[-1] == "hand_edginess" and len(s) == 17
    assert s.groups == {"foot": FEET} and s.continuous == ["hand_edginess"]


@pytest.fixture(scope="module")
def robots(tmp_path_factory):
    """Tabular robots with the typed set (1,000 training rows, 500 test rows)."""
    cfg = data_config({"name": "robot", "modality": "tabular", "concept_set": "typed", "n_train": 1000, "n_calib": 0, "n_test": 500})
    return cfg, load_data(cfg, str(tmp_path_factory.mktemp("cache")))


def test_the_data_carries_one_hot_feet_and_the_hands_value(robots):
    cfg, data = robots
    meta = data.meta
    feet = data.c[:, 6:16]
    assert np.array_equal(feet.argmax(1), meta[:, META_INDEX["foot_subtype"]]) and (feet.sum(1) == 1).all()
    assert np.allclose(data.c[:, 16], meta[:, META_INDEX["hand_subtype"]] / 5)
    info = data_info(data, cfg)
    assert info["concept_groups"] == {"foot": FEET} and info["continuous_concepts"] == ["hand_edginess"]


@pytest.mark.parametrize(
    "entry, message",
    [
        ("{name: foot, kind: categorical, values: {block: 'foot_subtype == 0'}}", "at least two value names"),
        ("{name: foot, kind: categorical, expr: foot_subtype}", "needs 'name' and 'values'"),
        ("{name: foot, kind: ordinal, expr: foot_subtype}", "kind must be one of"),
        ("{name: foot, kind: categorical, values: {a: 'foot_subtype < 5', b: 'foot_subtype < 6'}}", "more than one of its values holds for 3840 robot"),
        ("{name: hands, kind: continuous, expr: hand_subtype}", "must lie in [0, 1], got values in [0, 5]"),
        ("{name: foot, kind: categorical, values: {a: 'nope == 1', b: 'foot_subtype == 1'}}", "value 'a': unknown name 'nope'"),
    ],
)
def test_a_bad_typed_concept_is_refused_with_its_reason(tmp_path, entry, message):
    from synthetic.robot.attributes import body_table
    from synthetic.robot.hierarchy import body_space

    path = tmp_path / "set.yaml"
    path.write_text(f"name: bad\nconcepts:\n  - {{name: knees, expr: knees}}\n  - {entry}\n")
    with pytest.raises(ValueError) as err:
        load_concept_set(str(path)).evaluate(body_table(body_space()))
    assert message in str(err.value)


# ------------------------------------------------------------------------------------ the types
TYPES = ConceptTypes.build(["a", "g1", "g2", "r"], {"g": ["g1", "g2"]}, ["r"])


def test_a_group_is_a_softmax_with_a_none_value_and_a_one_column_group_is_the_sigmoid():
    z = torch.tensor([[0.3, 1.0, -2.0, 0.7]])
    p = TYPES.activate(z)
    e = torch.exp(torch.tensor([1.0, -2.0, 0.0]))
    assert torch.allclose(p[0, 1:3], e[:2] / e.sum()) and torch.allclose(p[0, [0, 3]], torch.sigmoid(z[0, [0, 3]]))
    one = ConceptTypes.build(["a", "b"], {"g": ["b"]}, [])
    assert torch.allclose(one.activate(z[:, :2]), torch.sigmoid(z[:, :2]))
    assert TYPES.unit_of.tolist() == [0, 1, 1, 2] and TYPES.n_units == 3 and TYPES.binary == [0, 1, 2]


def test_the_loss_is_a_mean_over_concepts_with_a_group_counted_once():
    """At logits 0: BCE log 2 (binary), cross-entropy log 3 (two values + none), (0.5 - 0.2)^2."""
    z = torch.zeros(2, 4)
    c = torch.tensor([[1.0, 0.0, 1.0, 0.2], [0.0, 0.0, 0.0, 0.2]])  # row 2's group: "none"
    expected = (math.log(2) + math.log(3) + 0.09) / 3
    assert TYPES.loss(z, c).item() == pytest.approx(expected, abs=1e-6)
    assert TYPES.loss_from_probs(TYPES.activate(z), c).item() == pytest.approx(expected, abs=1e-6)
    observed = torch.tensor([[1.0, 1.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]])  # row 1's group not annotated
    assert TYPES.loss(z, c, observed).item() == pytest.approx((2 * math.log(2) + math.log(3) + 2 * 0.09) / 5, abs=1e-6)


def test_asking_a_value_of_a_group_answers_the_group_for_one_request_and_one_cost():
    unit = TYPES.unit_of
    assert expand(torch.tensor([[False, False, True, False]]), unit).tolist() == [[False, True, True, False]]
    prio = torch.tensor([[1.0, 4.0, 3.0, 2.0]])  # g1, g2 (same group: not asked again), r, a
    assert within_budget(prio, torch.ones(4), 2, unit).tolist() == [[False, True, False, True]]
    assert within_budget(prio, torch.ones(4), 2).tolist() == [[False, True, True, False]]  # without groups
    assert budget_total(None, [0, 1, 2, 3], unit) == 3 and budget_total(torch.tensor([1.0, 2, 5, 1]), [0, 1, 2, 3], unit) == 7


# ------------------------------------------------------------------------------------ the models
INFO = {"dataset": "toy", "modality": "tabular", "in_shape": [5], "concept_names": ["a", "g1", "g2", "r"],
        "class_names": ["no", "yes"], "concept_groups": {"g": ["g1", "g2"]}, "continuous_concepts": ["r"]}  # fmt: skip


@pytest.mark.parametrize("name", ["cbm", "cem", "probcbm"])
def test_cbm_cem_and_probcbm_read_typed_concepts(name):
    torch.manual_seed(0)
    model = build_model({"name": name}, INFO).eval()
    with torch.no_grad():
        state = model.encode(torch.randn(64, 5))
    assert (state.probs[:, 1:3].sum(1) < 1).all()  # the group's values and "none" share the mass
    losses, _, _ = model.train().compute_losses({"x": torch.randn(8, 5), "c": torch.tensor([[1.0, 0.0, 1.0, 0.3]] * 8), "y": torch.ones(8, dtype=torch.long)})
    assert torch.isfinite(losses["concept_loss"])


@pytest.mark.parametrize("name", ["hybrid_cbm", "scbm", "intcem", "dcr", "ecbm"])
def test_the_other_architectures_refuse_typed_concepts_in_one_line(name):
    with pytest.raises(ConfigError, match=rf"model {name}: the data has typed concepts \(categorical \['g'\], continuous \['r'\]\)"):
        build_model({"name": name}, INFO)


@pytest.fixture(scope="module")
def trained(robots):
    """A CBM trained on the typed tabular robots (independent: the head reads the true concepts; Adam,
    300 steps of 100 rows)."""
    cfg, data = robots
    from synthetic.datamodule import data_tensors

    torch.manual_seed(0)
    model = build_model({"name": "cbm", "training": "independent", "head": {"solver": "gradient"}}, data_info(data, cfg))
    train = data_tensors(data, data.indices("train"))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(0)
    for _ in range(300):
        rows = torch.randint(0, len(train["y"]), (100,), generator=g)
        losses, _, _ = model.compute_losses({k: v[rows] for k, v in train.items() if k in ("x", "c", "y")})
        opt.zero_grad()
        losses["loss"].backward()
        opt.step()
    return model.eval(), data_tensors(data, data.indices("test"))


def test_a_cbm_with_a_categorical_foot_learns_it(trained):
    model, test = trained
    with torch.no_grad():
        state = model.encode(test["x"])
    hit = model.types.group_accuracy(state.probs, test["c"])
    assert hit.float().mean() > 0.99  # 1.0 here
    assert (state.probs[:, 16] - test["c"][:, 16]).abs().mean() < 0.1  # the hand's edginess as a number


def test_a_group_intervention_equals_revealing_its_binary_columns(trained):
    """Oracle on the foot (one request) = the ten foot columns set to their true values, exactly."""
    model, test = trained
    foot = list(range(6, 16))
    batches = [{k: v[i : i + 128] for k, v in test.items()} for i in range(0, len(test["y"]), 128)]
    grid = run_grid(model, batches, {"oracle": OracleIntervener()}, {"r": RandomPolicy(seed=0, allowed=foot)}, [0, 1])
    row = {r["k"]: r for r in grid.rows}
    with torch.no_grad():
        state = model.encode(test["x"])
        mask = torch.zeros_like(state.probs, dtype=torch.bool)
        mask[:, foot] = True
        by_hand = (model.predict(model.intervene(state, mask, test["c"])).argmax(1) == test["y"]).float().mean().item()
    assert row[1]["accuracy"] == pytest.approx(by_hand, abs=1e-9) and row[1]["mean_requested"] == 1.0
    # priced: the foot at 3 units, a budget of 3 asks it once (3 spent) and answers all ten columns
    costs = torch.ones(17)
    costs[foot] = 3.0
    priced = run_grid(model, batches, {"oracle": OracleIntervener()}, {"r": RandomPolicy(seed=0, allowed=foot)}, [3], costs=costs, per_example=True)
    assert priced.rows[0]["accuracy"] == pytest.approx(by_hand, abs=1e-9) and priced.rows[0]["mean_cost"] == 3.0
    answered = next(iter(priced.examples.values()))["mask"]
    assert answered[:, foot].all() and not answered[:, [j for j in range(17) if j not in foot]].any()


def test_a_simulated_expert_answers_a_categorical_concept_with_one_value():
    """Right with the accuracy of its first column; wrong: another value, "none" included, uniformly."""
    from cbm.interventions import ExpertIntervener
    from cbm.models.state import ConceptState

    n = 20000
    c = torch.zeros(n, 4)
    c[:, 1] = 1.0  # value g1
    c[:, 3] = 0.25
    expert = ExpertIntervener(accuracy=0.7, seed=3)
    expert.groups = TYPES.groups
    state = ConceptState(logits=torch.zeros(n, 4), probs=torch.full((n, 4), 0.5))
    out = expert({"c": c, "idx": torch.arange(n)}, state, torch.ones(n, 4, dtype=torch.bool))
    group = out[:, 1:3]
    assert set(group.sum(1).tolist()) <= {0.0, 1.0}  # one value or "none", never two
    right = (group[:, 0] == 1).float().mean().item()
    assert abs(right - 0.7) < 0.015 and abs((group[:, 1] == 1).float().mean().item() - 0.15) < 0.015  # the other two share 0.3
    assert set(out[:, 3].tolist()) == {0.25, 0.75}
