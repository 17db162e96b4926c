"""policy=fixed_order: every example is asked the same concepts in the same order (0.4.1's conceptual
safeguards reveal the Sudoku checks rows, then columns, then blocks), the first k not asked yet."""

from __future__ import annotations

import pytest
import torch

from cbm.interventions import registry
from cbm.interventions.policies.fixed_order import FixedOrderPolicy
from cbm.interventions.registry import BuildContext
from cbm.models.state import ConceptState
from synthetic.sudoku.checker import CONCEPT_NAMES


def state(b: int, m: int, intervened: torch.Tensor | None = None) -> ConceptState:
    p = torch.rand(b, m, generator=torch.Generator().manual_seed(0))
    s = ConceptState(logits=torch.logit(p), probs=p)
    if intervened is not None:
        s.intervened = intervened
    return s


def test_rows_then_columns_then_blocks():
    policy = registry.build("policy", "fixed_order", {}, BuildContext(concept_names=tuple(CONCEPT_NAMES)))
    mask = policy.select(None, state(4, 27), 3)
    assert mask.sum(1).tolist() == [3] * 4
    assert [CONCEPT_NAMES[i] for i in torch.nonzero(mask[0]).flatten().tolist()] == ["row1", "row2", "row3"]
    full = policy.select(None, state(2, 27), 27)
    assert full.all()
    asked = torch.zeros(2, 27, dtype=torch.bool)
    asked[0, :2] = True  # row1, row2 already answered: the next three in the order
    nxt = policy.select(None, state(2, 27, asked), 3)
    assert torch.nonzero(nxt[0]).flatten().tolist() == [2, 3, 4] and torch.nonzero(nxt[1]).flatten().tolist() == [0, 1, 2]


def test_an_order_asks_those_first_and_bad_orders_fail():
    policy = registry.build("policy", "fixed_order", {"order": ["box9", "col1"]}, BuildContext(concept_names=tuple(CONCEPT_NAMES)))
    assert torch.nonzero(policy.select(None, state(1, 27), 3)[0]).flatten().tolist() == [0, 9, 26]
    assert FixedOrderPolicy([26, 9]).ranks(27)[:3] == [26, 9, 0]
    with pytest.raises(ValueError, match="unknown concept 'box10'"):
        registry.build("policy", "fixed_order", {"order": ["box10"]}, BuildContext(concept_names=tuple(CONCEPT_NAMES)))
    with pytest.raises(ValueError, match="lists the concept 'row1' twice"):
        registry.validate_all("policy", {"fixed_order": {"order": ["row1", "row1"]}}, exactly_one=True)
