"""Coverage, selective accuracy, AURC, concept costs and NetWorkAutomated by hand."""

import numpy as np
import pytest
import torch

from cbm.selective import (
    aurc,
    concept_costs,
    excess_aurc,
    net_work_automated,
    request_cost,
    risk_coverage_curve,
    selective_summary,
)


def test_nwa_by_hand():
    # 4 examples: 2 confident, 1 rescued with 1 of 4 concepts, 1 deferred after 2 of 4.
    automated = [1, 1, 1, 0]
    cost = [0, 0, 1 / 4, 2 / 4]
    assert net_work_automated(automated, cost) == pytest.approx(3 / 4 - 3 / 16)


def test_nwa_is_negative_when_interventions_cost_more_than_they_rescue():
    # 1 confident; 3 abstained, each asked for every concept (a full review) and 1 rescued.
    assert net_work_automated([1, 1, 0, 0], [0, 1, 1, 1]) == pytest.approx(2 / 4 - 3 / 4)
    assert net_work_automated([0, 0], [1, 1]) == -1.0  # the worst case: full reviews, nothing automated


def test_concept_costs_are_shares_of_a_full_review_at_unit_cost():
    torch.testing.assert_close(
        concept_costs(["a", "b", "c", "d"]), torch.full((4,), 0.25, dtype=torch.float64)
    )
    w = concept_costs(["a", "b", "c"], {"a": 3.0, "b": 0.5})  # c is left out: 1 unit; 0.4.1's cost / m
    torch.testing.assert_close(w, torch.tensor([1.0, 0.5 / 3, 1 / 3], dtype=torch.float64))
    mask = torch.tensor([[True, False, True], [False, True, False], [True, True, True]])
    torch.testing.assert_close(request_cost(mask, w), torch.tensor([4 / 3, 0.5 / 3, 1.5], dtype=torch.float64))
    # the cost spec of cbm-intervene: globs and rest
    torch.testing.assert_close(concept_costs(["row1", "row2", "box1"], {"row*": 2.0, "rest": 0.5}),
                               torch.tensor([2 / 3, 2 / 3, 0.5 / 3], dtype=torch.float64))  # fmt: skip
    with pytest.raises(ValueError, match=r"costs: unknown concept\(s\) \['z'\]"):
        concept_costs(["a"], {"z": 1.0})
    with pytest.raises(ValueError, match="costs.a must be a finite number > 0, got 0.0"):
        concept_costs(["a"], {"a": 0.0})
    with pytest.raises(ValueError, match="costs.a must be a finite number > 0, got -1.0"):
        concept_costs(["a", "b"], {"a": -1.0})


def test_selective_summary_and_undefined_accuracy():
    s = selective_summary([True, True, False, False], [True, False, False, True])
    assert s == {"n": 4, "n_accepted": 2, "coverage": 0.5, "selective_accuracy": 0.5}
    s = selective_summary([False, False], [True, True])
    assert s["coverage"] == 0.0 and s["selective_accuracy"] is None  # not 0/0
    with pytest.raises(ValueError, match="no examples"):
        selective_summary([], [])


def test_risk_coverage_and_aurc_by_hand():
    scores = [0.9, 0.8, 0.7, 0.6]
    correct = [True, False, True, False]
    cov, risk, tau = risk_coverage_curve(scores, correct)
    assert cov.tolist() == [0.25, 0.5, 0.75, 1.0]
    np.testing.assert_allclose(risk, [0.0, 0.5, 1 / 3, 0.5])
    assert tau.tolist() == [0.8, 0.7, 0.6, 0.0]
    assert aurc(scores, correct) == pytest.approx((0 + 0.5 + 1 / 3 + 0.5) / 4)
    # perfect ranking of 2 right + 2 wrong: risks 0, 0, 1/3, 1/2
    assert excess_aurc(scores, correct) == pytest.approx((0.5 + 1 / 3 + 0.5) / 4 - (1 / 3 + 1 / 2) / 4)


def test_aurc_keeps_ties_together():
    # one tie group of two (1 right, 1 wrong) then one right: risks 1/2 for both tied positions, then 1/3.
    assert aurc([0.9, 0.9, 0.5], [True, False, True]) == pytest.approx((0.5 + 0.5 + 1 / 3) / 3)
    assert aurc([0.9, 0.9, 0.5], [False, True, True]) == aurc([0.9, 0.9, 0.5], [True, False, True])
