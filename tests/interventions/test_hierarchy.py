"""Concept structure (issue 47): implications derived from the concept definitions, answers propagated
along them (one answer, one cost), and the predictions that break them."""

from __future__ import annotations

import pytest
import torch
from intervention_toys import ToyModel
from torch import nn

from cbm.interventions import OracleIntervener, RandomPolicy
from cbm.interventions.engine import run_grid
from cbm.interventions.hierarchy import Implications
from synthetic.robot.concepts import load_concept_set
from synthetic.robot.hierarchy import derive, implications

SUBTYPES = ["foot_block", "foot_dome", "foot_flare", "foot_diamond", "foot_fork", "foot_saw"]

FOOT_SET = """name: feet
description: the flat / pointy foot and three of its sub-types
concepts:
  - {name: foot_pointy, description: pointy feet, expr: foot_pointy}
  - {name: foot_block, description: block feet (flat), expr: "foot_subtype == 0"}
  - {name: foot_diamond, description: diamond feet (pointy), expr: "foot_subtype == 6"}
  - {name: knees, description: knees, expr: knees}
"""


@pytest.fixture
def foot_set(tmp_path):
    path = tmp_path / "feet.yaml"
    path.write_text(FOOT_SET)
    return str(path)


def test_a_foot_sub_type_implies_flat_or_pointy_and_excludes_its_siblings(foot_set):
    imps = set(derive(load_concept_set(foot_set)))
    assert imps == {
        ("foot_block", 1, "foot_pointy", 0),  # a sub-type reveals flat / pointy
        ("foot_diamond", 1, "foot_pointy", 1),
        ("foot_block", 1, "foot_diamond", 0),  # siblings: at most one
        ("foot_diamond", 1, "foot_block", 0),
        ("foot_pointy", 1, "foot_block", 0),  # the parent rules its children out
        ("foot_pointy", 0, "foot_diamond", 0),
    }  # knees, independent of the feet, takes part in none


def test_the_built_in_sets_structure():
    assert implications("true") == []  # seven independent features
    human = implications("human")  # six one-hot sub-types: each excludes the five others
    assert len(human) == 30 and {(a, v, w) for a, v, _, w in human} == {(s, 1, 0) for s in SUBTYPES}


def rows(n: int = 400, seed: int = 0) -> dict:
    """Concepts [foot_pointy, foot_block, foot_diamond, knees] of robots with uniform foot sub-types."""
    g = torch.Generator().manual_seed(seed)
    sub = torch.randint(0, 10, (n,), generator=g)
    c = torch.stack([(sub >= 5), sub == 0, sub == 6, torch.rand(n, generator=g) < 0.5], 1).float()
    return {"c": c, "y": c[:, 0].long()}


def test_revealing_foot_block_sets_foot_pointy_and_costs_one_answer(foot_set):
    """The label is foot_pointy; the detector reads foot_pointy wrongly on every row; the policy may ask
    only foot_block. Without propagation nothing improves (0%); with it, every robot with block feet
    gets foot_pointy = 0 from the one answer: the accuracy is exactly the share of block feet."""
    d = rows()
    x = 6.0 * (2 * d["c"] - 1)
    x[:, 0] = -x[:, 0]  # foot_pointy read wrongly everywhere
    head = nn.Linear(4, 2)
    with torch.no_grad():
        head.weight.copy_(torch.tensor([[-8.0, 0, 0, 0], [8.0, 0, 0, 0]]))
        head.bias.copy_(torch.tensor([4.0, -4.0]))  # class 1 iff p(foot_pointy) > 0.5
    model = ToyModel(head, 4, 2).eval()
    batch = [{"x": x, **d}]
    h = Implications.build(["foot_pointy", "foot_block", "foot_diamond", "knees"], implications(foot_set))
    ask_block = {"block": RandomPolicy(0, allowed=[1])}
    plain = run_grid(model, batch, {"oracle": OracleIntervener()}, ask_block, [0, 1], implications=h)
    spread = run_grid(model, batch, {"oracle": OracleIntervener()}, ask_block, [0, 1], implications=h, propagate=True, costs=torch.ones(4))
    assert plain.row("oracle", "block", 1)["accuracy"] == 0.0
    assert spread.row("oracle", "block", 1)["accuracy"] == pytest.approx(float(d["c"][:, 1].mean()))
    assert spread.row("oracle", "block", 1)["mean_cost"] == 1.0 and spread.row("oracle", "block", 1)["mean_requested"] == 1.0
    # every row's predicted foot_pointy contradicts its predicted sub-type where the sub-type is block or diamond
    expected = int(((d["c"][:, 1] + d["c"][:, 2]) > 0).sum())
    assert plain.meta["hierarchy"]["violating_rows"] == expected and plain.meta["hierarchy"]["implications"] == 6
    assert plain.meta["hierarchy"]["violations"] == 2 * expected  # A=1 => pointy, and pointy => not A


def test_propagation_is_one_step_and_keeps_the_asked_answers():
    h = Implications.build(["a", "b", "c"], [("a", 1, "b", 0), ("a", 0, "c", 1)])
    mask = torch.tensor([[True, False, False], [True, False, False], [False, True, False]])
    values = torch.tensor([[1.0, 0.7, 0.2], [0.0, 0.7, 0.2], [0.3, 1.0, 0.3]])
    m2, v2 = h.propagate(mask, values)
    assert m2.tolist() == [[True, True, False], [True, False, True], [False, True, False]]
    assert torch.equal(v2, torch.tensor([[1.0, 0.0, 0.2], [0.0, 0.7, 1.0], [0.3, 1.0, 0.3]]))
    assert len(h) == 2 and h.violations(torch.tensor([[0.9, 0.9, 0.1], [0.1, 0.1, 0.1]])).tolist() == [1, 1]


def test_cbm_intervene_reports_the_models_violations(tmp_path):
    from checkpoints import make_checkpoint

    from cbm.experiments import intervene

    make_checkpoint(tmp_path / "cbm" / "checkpoints" / "best.ckpt", tmp_path / "cache", concept_set="human")
    cfg = {"checkpoint": str(tmp_path / "cbm"), "output_dir": str(tmp_path / "out"), "cache_dir": str(tmp_path / "cache"),
           "policy": {"random": {}}, "intervener": {"oracle": {}}, "ks": [0, 1], "hierarchy": {"propagate": True}}  # fmt: skip
    grid = intervene.run(cfg)
    h = grid.meta["hierarchy"]
    assert h["implications"] == 30 and h["propagate"] is True
    assert 0 <= h["violating_rows"] <= 300 and h["violating_fraction"] == h["violating_rows"] / 300
