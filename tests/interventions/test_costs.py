"""Interventions that cost (issue 47): cost specs, the budget in cost units for every policy, value-per-cost
ranking, and cbm-intervene's ``costs`` on 1,000 robots."""

from __future__ import annotations

import json

import pytest
import torch
from intervention_toys import ToyModel
from test_engine import batches, rule_model
from torch import nn

from cbm.config.budgets import check_costs
from cbm.interventions import OracleIntervener, RandomPolicy, ResponsivenessPolicy, UncertaintyPolicy
from cbm.interventions.costs import cost_list, cost_vector, priority, spent, within_budget
from cbm.interventions.engine import run_grid
from cbm.models.state import ConceptState

NAMES = ["row_1", "row_2", "col_1", "block_1"]


def test_a_cost_spec_prices_names_then_globs_then_rest():
    assert cost_list(NAMES, {"row_2": 3, "row_*": 2, "block_*": 4, "rest": 0.5}) == [2.0, 3.0, 0.5, 4.0]
    assert cost_list(NAMES, {"col_1": 2}) == [1.0, 1.0, 2.0, 1.0]
    assert cost_list(NAMES, None) is None and cost_vector(NAMES, None) is None


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"row_9": 2}, "costs.concepts: unknown concept(s) ['row_9']"),
        ({"row_1": 0}, "costs.concepts.row_1 must be a finite number > 0, got 0"),
        ({"row_1": -1.5}, "must be a finite number > 0"),
        ({"row_1": float("inf")}, "must be a finite number > 0"),
        ({"row_1": True}, "must be a finite number > 0, got True"),
        ({"row_1": "2"}, "must be a finite number > 0, got '2'"),
        ({}, "must be a mapping {concept: cost}"),
        ([1, 2], "must be a mapping {concept: cost}"),
    ],
)
def test_a_bad_cost_spec_is_one_line(spec, message):
    with pytest.raises(ValueError) as err:
        cost_list(NAMES, spec)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_within_budget_takes_by_priority_and_skips_what_does_not_fit():
    costs = torch.tensor([5.0, 1.0, 1.0, 2.0])
    pr = torch.tensor([[4.0, 3.0, 2.0, 1.0], [1.0, 2.0, float("-inf"), 3.0], [4.0, 3.0, 2.0, 1.0]])
    assert within_budget(pr, costs, 5).tolist() == [
        [True, False, False, False],  # the costly first choice fills the budget
        [False, True, False, True],  # -inf is never taken; 2 + 1 = 3 <= 5, then concept 0 (5) does not fit
        [True, False, False, False],
    ]
    assert within_budget(pr, costs, 4).tolist()[0] == [False, True, True, True]  # 5 skipped, 1 + 1 + 2 = 4
    assert within_budget(pr, costs, 0).sum() == 0
    assert spent(within_budget(pr, costs, 4), costs).tolist() == [4.0, 3.0, 4.0]


def test_unit_costs_give_the_grid_without_costs():
    """With every concept at cost 1 the budget in cost units is the budget in concepts: the same rows."""
    model, data = rule_model(), batches()
    policies = {"random": RandomPolicy(3), "uncertainty": UncertaintyPolicy()}
    plain = run_grid(model, data, {"oracle": OracleIntervener()}, policies, [0, 1, 2, 4], per_example=True)
    policies = {"random": RandomPolicy(3), "uncertainty": UncertaintyPolicy()}
    costed = run_grid(model, data, {"oracle": OracleIntervener()}, policies, [0, 1, 2, 4], per_example=True, costs=torch.ones(4))
    for a, b in zip(plain.rows, costed.rows):
        assert (a["policy"], a["k"], a["accuracy"], a["mean_requested"]) == (b["policy"], b["k"], b["accuracy"], b["mean_requested"])
        assert b["mean_cost"] == b["mean_requested"]
    for key, ex in plain.examples.items():
        assert torch.equal(ex["mask"], costed.examples[key]["mask"])
    assert costed.meta["budget_unit"] == "cost" and costed.meta["costs"] == [1.0] * 4 and "budget_unit" not in plain.meta


@pytest.mark.parametrize("k", [1, 2, 3, 5, 6, 9])
def test_no_policy_spends_more_than_the_budget(k):
    model, data = rule_model(), batches()
    costs = torch.tensor([5.0, 1.0, 2.0, 1.0])
    policies = {"random": RandomPolicy(0), "uncertainty": UncertaintyPolicy(), "responsiveness": ResponsivenessPolicy(threshold=0.0)}
    grid = run_grid(model, data, {"oracle": OracleIntervener()}, policies, [k], per_example=True, costs=costs)
    for (_, pname, _), ex in grid.examples.items():
        assert float(spent(ex["mask"], costs).max()) <= k, pname
        if k >= 9:  # every concept fits: a ranking policy asks for all of them
            assert pname == "responsiveness" or bool(ex["mask"].all())
        if pname == "random":  # the greedy fill: no concept left out that would still have fit
            left = k - spent(ex["mask"], costs)
            assert not bool(((~ex["mask"]) & (costs[None] <= left[:, None])).any())


def test_value_per_cost_asks_the_cheap_uncertain_concepts_first():
    """Concept 0 is the most uncertain (p = 0.5) but costs 4; concepts 1-3 (p = 0.6) cost 1 each."""
    state = ConceptState(logits=torch.zeros(1, 4), probs=torch.tensor([[0.5, 0.6, 0.6, 0.6]]))
    costs = torch.tensor([4.0, 1.0, 1.0, 1.0])
    pol = UncertaintyPolicy(source="probs")
    per_cost = within_budget(priority(pol, None, state, costs, per_cost=True), costs, 4)
    by_value = within_budget(priority(pol, None, state, costs, per_cost=False), costs, 4)
    assert per_cost.tolist() == [[False, True, True, True]]  # 0.4 / 1 each beats 0.5 / 4
    assert by_value.tolist() == [[True, False, False, False]]


def test_a_select_only_policy_ranks_by_the_budget_it_first_asks_at():
    """A policy with nothing but ``select`` keeps its own order under costs and never asks a concept it
    would never ask (here: concept 2)."""

    class Fixed:
        order = [3, 0, 1]

        def select(self, model, state, k):
            mask = torch.zeros_like(state.probs, dtype=torch.bool)
            mask[:, self.order[:k]] = True
            return mask & ~state.intervened

    state = ConceptState(logits=torch.zeros(2, 4), probs=torch.full((2, 4), 0.5))
    pr = priority(Fixed(), None, state, torch.ones(4))
    assert pr[0].tolist() == [-2.0, -3.0, float("-inf"), -1.0]
    assert within_budget(pr, torch.tensor([1.0, 1.0, 1.0, 3.0]), 3).tolist()[0] == [False, False, False, True]


def test_responsiveness_without_the_additive_hook_works_under_costs():
    """Every policy of the registry works under costs (a ToyModel without the additive hook: the generic
    path of responsiveness)."""
    head = nn.Linear(4, 2)
    model = ToyModel(head, 4, 2, fast=False).eval()
    grid = run_grid(model, batches(200), {"oracle": OracleIntervener()}, {"r": ResponsivenessPolicy(threshold=0.1)}, [0, 2], costs=torch.tensor([1.0, 2.0, 1.0, 1.0]))
    assert grid.row("oracle", "r", 2)["mean_cost"] <= 2


def test_cbm_intervene_with_costs_on_a_thousand_robots(tmp_path):
    """The acceptance case: costs {knees: 5, rest: 1}, budgets up to 5, the oracle with random (and
    uncertainty) policies over 1,000 test robots: no robot's requests cost more than its budget."""
    from checkpoints import make_checkpoint

    from cbm.experiments import intervene

    make_checkpoint(tmp_path / "cbm" / "checkpoints" / "best.ckpt", tmp_path / "cache", n_test=1000)
    cfg = {"checkpoint": str(tmp_path / "cbm"), "output_dir": str(tmp_path / "out"), "cache_dir": str(tmp_path / "cache"),
           "policy": {"random": {}, "uncertainty": {}}, "intervener": {"oracle": {}}, "ks": [0, 1, 3, 5, "max"],
           "costs": {"concepts": {"knees": 5, "rest": 1}}, "per_example": True}  # fmt: skip
    grid = intervene.run(cfg)
    costs = torch.tensor([1.0, 1.0, 5.0, 1.0, 1.0, 1.0, 1.0])
    assert grid.meta["ks"] == [0, 1, 3, 5, 11] and grid.meta["costs"] == costs.tolist()
    for (_, _, k), ex in grid.examples.items():
        assert len(ex["mask"]) == 1000
        assert float(spent(ex["mask"], costs).max()) <= k
        if k < 5:
            assert not bool(ex["mask"][:, 2].any())  # knees never fits a budget under 5
    assert grid.row("oracle", "random", 11)["mean_cost"] == 11.0
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert saved["meta"]["budget_unit"] == "cost" and all("mean_cost" in r for r in saved["rows"])
    assert (tmp_path / "out" / "accuracy_vs_k.png").stat().st_size > 0


def test_check_costs_is_torch_free_and_whole():
    assert check_costs({"a": 1, "rest": 2.5}) == {"a": 1.0, "rest": 2.5}
    assert check_costs(None) is None
