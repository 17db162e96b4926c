"""Deep Concept Reasoner: the rule's truth by hand for both logics, readable rules that hold on the
model's own concepts (Gödel logic: exact), the alignment mask, interventions, and cbm-train writing
the rules the report shows."""

from __future__ import annotations

import json

import pytest
import torch
from test_contract import NAMES, TABULAR, make

from cbm.models.dcr import DCR
from cbm.models.state import ConceptState

# two concepts, two classes: class 0's rule is "c0 & ~c1", class 1's is "c1" (c0 irrelevant)
RELEVANCE = torch.tensor([[[1.0, 0.0], [1.0, 1.0]]])  # [B=1, m=2, C=2]
POLARITY = torch.tensor([[[1.0, 0.3], [0.0, 1.0]]])


def fixed_rules(monkeypatch, logic: str) -> DCR:
    info = {**TABULAR, "concept_names": ["wheels", "wings"], "class_names": ["car", "plane"]}
    model = make("dcr", info, logic=logic)
    monkeypatch.setattr(model, "rule_parts", lambda state: (RELEVANCE.expand(len(state.probs), -1, -1), POLARITY.expand(len(state.probs), -1, -1)))
    return model


@pytest.mark.parametrize("logic", ["godel", "product"])
def test_rule_truth_by_hand(monkeypatch, logic):
    model = fixed_rules(monkeypatch, logic)
    p = torch.tensor([[0.9, 0.2], [1.0, 0.0], [0.0, 1.0], [0.6, 0.7]])
    truth = model.rule_truth(ConceptState(logits=torch.logit(p.clamp(1e-6, 1 - 1e-6)), probs=p))
    if logic == "godel":  # AND = min, OR = max, NOT = 1 - x
        want = torch.tensor([[min(0.9, 0.8), 0.2], [1.0, 0.0], [0.0, 1.0], [min(0.6, 0.3), 0.7]])
    else:  # product t-norm: literal = s p + (1 - s)(1 - p), term = 1 - r (1 - literal), AND = product
        want = torch.tensor([[0.9 * 0.8, 0.2], [1.0, 0.0], [0.0, 1.0], [0.6 * 0.3, 0.7]])
    torch.testing.assert_close(truth, want.clamp(1e-6) if logic == "product" else want, atol=1e-6, rtol=0)
    logits = model.predict(ConceptState(logits=torch.zeros_like(p), probs=p))
    torch.testing.assert_close(logits, torch.logit(truth, eps=1e-6))


def test_readable_rules_name_the_relevant_literals(monkeypatch):
    model = fixed_rules(monkeypatch, "godel")
    p = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    state = ConceptState(logits=torch.logit(p, eps=1e-6), probs=p)
    assert model.rules(state) == ["car <- wheels & ~wings", "plane <- wings"]
    assert model.rules(state, torch.tensor([1, 0])) == ["plane <- wings", "car <- wheels & ~wings"]


def test_under_godel_logic_the_printed_rule_holds_on_the_models_own_concepts():
    """With AND = min, a class whose rule is more than 0.5 true has every relevant (r > 0.5) literal
    more than 0.5 true: the readable rule is true of the thresholded concepts. Exact, for any weights."""
    model = make("dcr", temperature=0.05).eval()  # sharp relevance: rules with several literals
    x = torch.randn(500, TABULAR["in_shape"][0], generator=torch.Generator().manual_seed(0)) * 3
    with torch.no_grad():
        state = model.encode(x)
        truth = model.rule_truth(state)
    pred = truth.argmax(1)
    confident = truth.gather(1, pred[:, None])[:, 0] > 0.5
    assert confident.sum() > 50
    names = NAMES
    literals = 0
    for rule, probs in zip([r for r, ok in zip(model.rules(state), confident) if ok], state.probs[confident]):
        body = rule.split(" <- ")[1]
        for lit in [] if body == "true" else body.split(" & "):
            neg = lit.startswith("~")
            j = names.index(lit.lstrip("~"))
            assert (probs[j] > 0.5) != neg, (rule, probs)
            literals += 1
    assert literals > 30


def test_zero_concepts_leave_every_rule():
    model = make("dcr", temperature=0.05, zero_concepts=["knees"]).eval()
    with torch.no_grad():
        state = model.encode(torch.randn(200, 12, generator=torch.Generator().manual_seed(1)) * 3)
        relevance, _ = model.rule_parts(state)
    assert not relevance[:, NAMES.index("knees")].any()
    assert not any("knees" in r for cls in (0, 1) for r in model.rules(state, torch.full((200,), cls)))


def test_an_intervention_moves_the_literal_and_the_rule(monkeypatch):
    model = fixed_rules(monkeypatch, "godel").eval()
    with torch.no_grad():
        state = model.encode(torch.randn(8, 12))
        mask = torch.ones(8, 2, dtype=torch.bool)
        car = model.intervene(state, mask, torch.tensor([[1.0, 0.0]]).expand(8, 2))  # wheels, no wings
        plane = model.intervene(state, mask, torch.tensor([[0.0, 1.0]]).expand(8, 2))
        assert (model.predict(car).argmax(1) == 0).all() and (model.predict(plane).argmax(1) == 1).all()
        torch.testing.assert_close(model.rule_truth(car), torch.tensor([[1.0, 0.0]]).expand(8, 2))
    assert model.rules(car) == ["car <- wheels & ~wings"] * 8


def test_cbm_train_writes_the_rules_and_the_table_counts_every_test_example(compose_train, tmp_path, one_thread):
    from cbm.experiments.train import run

    small = ["data.modality=tabular", "data.n_train=600", "data.n_calib=0", "data.n_test=300", "trainer.max_epochs=3"]
    metrics = run(compose_train("model=dcr", *small))
    rules = json.loads((tmp_path / "rules.json").read_text())
    assert metrics["model"] == "dcr" and rules
    assert sum(r["examples"] for r in rules) == 300 and sum(r["share"] for r in rules) == pytest.approx(1.0)
    assert [r["examples"] for r in rules] == sorted((r["examples"] for r in rules), reverse=True)
    assert all(r["rule"].split(" <- ")[0] in ("Drent", "Glorp") and 0 <= r["accuracy"] <= 1 for r in rules)
    # the examples' accuracy under their rules is the test accuracy
    acc = sum(r["accuracy"] * r["examples"] for r in rules) / 300
    assert acc == pytest.approx(metrics["test/task_acc"], abs=1e-6)
