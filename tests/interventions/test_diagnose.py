"""Diagnostics of a concept model (cbm.interventions.diagnose) on hand-made models whose answers
are known exactly: a model that reads only its first concept, and one that reads the image past
its concepts (a side channel the interventions never reach)."""

from __future__ import annotations

import pytest
import torch
from intervention_toys import FnHead, ToyModel

from cbm.interventions.diagnose import ceiling, diagnose
from cbm.interventions.hierarchy import Implications
from cbm.models.state import ConceptState

NAMES = ["a", "b", "c"]
N = 200


def pure_reader() -> ToyModel:
    """Class 1 exactly when concept ``a`` is predicted present (ties go to class 0)."""
    return ToyModel(FnHead(lambda p: torch.stack([1.0 - p[:, 0], p[:, 0]], 1)), 3, 2, fast=False)


class SideChannel(ToyModel):
    """Reads concept ``a`` from the image features (``extras``), which interventions leave alone."""

    def predict(self, state: ConceptState) -> torch.Tensor:
        a = torch.sigmoid(state.extras["features"][:, 0] / 2.0)
        return torch.stack([1.0 - a, a], 1)


def data(wrong: int = 20) -> tuple[list[dict], dict]:
    """Test rows: 40% with ``a`` = 1 (the label is ``a``), the detector wrong on ``a`` for the first
    ``wrong`` rows; a ``subtype`` attribute with a value (4) on rows 0-49 that training never saw,
    and an id column (every row its own value: not a category). Training: every concept vector,
    ``a`` present on 30% of rows."""
    g = torch.Generator().manual_seed(0)
    c = torch.randint(0, 2, (N, 3), generator=g).float()
    c[:, 0] = (torch.arange(N) % 5 < 2).float()  # 40% ones
    x = 4.0 * (2 * c - 1)
    x[:wrong, 0] = -x[:wrong, 0]
    subtype = torch.where(torch.arange(N) < 50, 4, torch.arange(N) % 4)
    meta = torch.stack([subtype, 1000 + torch.arange(N)], 1)
    test = [{"x": x[i:i + 64], "c": c[i:i + 64], "y": c[i:i + 64, 0].long(), "meta": meta[i:i + 64]} for i in range(0, N, 64)]
    vectors = torch.tensor([[a, b, cc] for a in (0, 1) for b in (0, 1) for cc in (0, 1)], dtype=torch.float32)
    tc = vectors.repeat(10, 1)  # 80 rows, a = 1 on half of them ...
    tc = torch.cat([tc, torch.zeros(53, 3)])  # ... then 53 more with a = 0: 40 / 133 = 30%
    train = {"c": tc, "y": tc[:, 0].long(), "meta": torch.stack([torch.arange(len(tc)) % 4, torch.arange(len(tc))], 1)}
    return test, train


def test_a_model_that_reads_only_its_concepts_leaks_nothing_and_follows_the_donor():
    test, train = data()
    d = diagnose(pure_reader(), test, train, NAMES, meta_names=["subtype", "robot_id"])
    lk = d["leakage"]
    assert lk["accuracy"] == pytest.approx(0.9) and lk["oracle"] == 1.0
    # the marginal of a is 40/133 < 0.5: class 0 everywhere, the test's majority (60%)
    assert lk["marginal"] == pytest.approx(0.6) and lk["majority"] == pytest.approx(0.6) and lk["leakage"] == pytest.approx(0.0)
    assert lk["follows_concepts"] == 1.0 and lk["follows_own"] == 0.0 and lk["oracle_error"] == 0.0
    assert 0 < lk["shuffled_rows"] < N
    assert d["ceiling"] == {"concepts": 1.0, "unseen_vectors": 0.0}
    sens = {s["concept"]: s for s in d["sensitivity"]}
    assert sens["a"] == {"concept": "a", "detector": pytest.approx(0.9), "true": 1.0, "flipped": 0.0, "changed": 1.0}
    for name in "bc":
        assert sens[name]["true"] == sens[name]["flipped"] == pytest.approx(0.9) and sens[name]["changed"] == 0.0
        assert sens[name]["detector"] == 1.0
    unseen = {u["kind"]: u for u in d["unseen"]}
    assert set(unseen) == {"concept vector", "subtype"}  # the id column is no category
    assert unseen["concept vector"]["rows"] == 0 and unseen["concept vector"]["accuracy"] is None
    sub = unseen["subtype"]
    assert sub["rows"] == 50 and sub["values"] == [4]
    assert sub["accuracy"] == pytest.approx(30 / 50) and sub["oracle"] == 1.0  # rows 0-19 misread
    assert sub["seen_accuracy"] == 1.0 and sub["seen_oracle"] == 1.0
    assert "hierarchy" not in d


def test_a_pure_reader_keeps_its_own_label_exactly_where_it_errs_on_the_donor():
    test, train = data(wrong=0)

    def a_xor_b(p: torch.Tensor) -> torch.Tensor:  # errs with true concepts wherever b = 1 (the label is a)
        one = ((p[:, 0] > 0.5) != (p[:, 1] > 0.5)).float()
        return torch.stack([1.0 - one, one], 1)

    xor = ToyModel(FnHead(a_xor_b), 3, 2, fast=False)
    lk = diagnose(xor, test, train, NAMES)["leakage"]
    b = torch.cat([t["c"][:, 1] for t in test])
    assert lk["oracle"] == pytest.approx(1.0 - float(b.mean())) and 0 < lk["oracle_error"] < 1
    assert lk["follows_own"] == lk["oracle_error"]


def test_a_side_channel_shows_as_leakage_and_as_the_own_label():
    test, train = data(wrong=0)
    d = diagnose(SideChannel(FnHead(lambda p: p), 3, 2, fast=False), test, train, NAMES)
    lk = d["leakage"]
    assert lk["accuracy"] == lk["oracle"] == lk["marginal"] == 1.0
    assert lk["leakage"] == pytest.approx(0.4)  # 1.0 against the majority's 0.6
    assert lk["follows_own"] == 1.0 and lk["oracle_error"] == 0.0
    assert lk["follows_concepts"] == pytest.approx(1.0 - lk["shuffled_rows"] / N)
    assert all(s["changed"] == 0.0 and s["true"] == s["flipped"] == 1.0 for s in d["sensitivity"])


def test_hierarchy_violations_are_counted():
    test, train = data()
    structure = Implications.build(NAMES, [("b", 1, "c", 1)])
    d = diagnose(pure_reader(), test, train, NAMES, structure)
    c = torch.cat([t["c"] for t in test])
    broken = int(((c[:, 1] == 1) & (c[:, 2] == 0)).sum())  # the detector reads b and c right
    assert d["hierarchy"] == {"implications": 1, "violating_rows": broken, "violating_fraction": broken / N, "violations": broken}


def test_the_concept_ceiling_is_each_vectors_majority_training_label():
    a, b = [1.0, 0.0], [0.0, 1.0]
    train_c = torch.tensor([a, a, a, b, b])
    train_y = torch.tensor([1, 1, 0, 0, 0])  # a -> 1 (2 of 3), b -> 0; majority class 0
    test_c = torch.tensor([a, a, b, [1.0, 1.0], [1.0, 1.0]])  # [1, 1] never seen: class 0
    test_y = torch.tensor([1, 0, 0, 0, 1])
    assert ceiling(train_c, train_y, test_c, test_y) == {"concepts": pytest.approx(3 / 5), "unseen_vectors": pytest.approx(2 / 5)}


def test_a_black_box_and_a_mismatched_concept_count_are_refused():
    test, train = data()
    bb = pure_reader()
    bb.has_concepts = False
    with pytest.raises(ValueError, match="a black-box model has no concepts"):
        diagnose(bb, test, train, NAMES)
    with pytest.raises(ValueError, match="the data has 3 concepts but the model names 2"):
        diagnose(pure_reader(), test, train, NAMES[:2])
