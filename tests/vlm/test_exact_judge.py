"""The exact EDCT judge for synthetic robots: decisive parts by enumeration of the sparse rule,
templated explanations that parse back (also as real models word them), and AC / EF / CCS that
separate a faithful responder from a shortcut one on exact part edits."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from cbm.vlm.edct.exact import (
    PHRASES,
    decisive_literals,
    exact_verdict,
    explain,
    flip,
    literal_values,
    parse_explanation,
    rule_label,
    supporting_literals,
)
from synthetic.robot import generator as g
from synthetic.robot.attributes import META_INDEX, META_NAMES
from synthetic.robot.config import RobotConfig

SPARSE = RobotConfig()  # Drent exactly when knees & ~mouth_closed & ~foot_pointy


def robot(knees: int, mouth: int, foot_pointy: int) -> np.ndarray:
    row = np.zeros(len(META_NAMES), dtype=np.int64)
    row[META_INDEX["knees"]], row[META_INDEX["mouth_closed"]] = knees, mouth
    row[META_INDEX["foot_subtype"]] = 7 if foot_pointy else 2
    return row


@pytest.mark.parametrize("knees, mouth, foot", list(itertools.product((0, 1), repeat=3)))
def test_labels_and_decisive_parts_of_the_sparse_rule(knees, mouth, foot):
    row = robot(knees, mouth, foot)
    drent = knees and not mouth and not foot
    assert int(rule_label(row, SPARSE)[0]) == (0 if drent else 1)
    decisive = dict(decisive_literals(row, SPARSE))
    # a Drent turns Glorp on any one of its three parts; a Glorp turns Drent only when one part is all that holds it
    pushes = [c for c, v in (("knees", not knees), ("mouth_closed", bool(mouth)), ("foot_pointy", bool(foot))) if v]
    want = {"knees", "mouth_closed", "foot_pointy"} if drent else (set(pushes) if len(pushes) == 1 else set())
    assert set(decisive) == want
    assert all(literal_values(row)[c] == v for c, v in decisive.items())
    support = supporting_literals(row, SPARSE, int(rule_label(row, SPARSE)[0]))
    assert [c for c, _ in support] == [c for c in ("foot_pointy", "knees", "mouth_closed") if (c in pushes) != drent]


def test_a_flip_negates_one_concept_and_keeps_the_foot_within_its_group():
    row = robot(1, 0, 1)
    for concept in PHRASES:
        values, flipped = literal_values(row), literal_values(flip(row, concept))
        assert {c for c in PHRASES if values[c] != flipped[c]} == {concept}
    assert flip(row, "foot_pointy")[META_INDEX["foot_subtype"]] == 2 and flip(flip(row, "foot_pointy"), "foot_pointy")[META_INDEX["foot_subtype"]] == 7
    with pytest.raises(ValueError, match=r"unknown robot concept 'wings'"):
        flip(row, "wings")


@pytest.mark.parametrize("n", [0, 1, 2, 3])
def test_templates_parse_back_for_every_literal_combination(n):
    for concepts in itertools.combinations(PHRASES, n):
        for values in itertools.product((True, False), repeat=n):
            lits = list(zip(concepts, values))
            for answer in (0, 1):
                assert parse_explanation(explain(answer, lits)) == (answer, lits)


@pytest.mark.parametrize("reply, answer, literals", [
    ("**Glorp** — its feet are pointy, and the mouth is shut.", 1, [("foot_pointy", True), ("mouth_closed", True)]),
    ("<think>knees? yes</think> Answer: drent. The robot has knees; its mouth is open; feet: flat", 0,
     [("knees", True), ("mouth_closed", False), ("foot_pointy", False)]),
    ("I think it's a Drent because the legs are straight, without knees", 0, [("knees", False)]),
    ("The answer is Glorp since it has no antennae and the head is square.", 1, [("antennae", False), ("head_round", False)]),
    ("I cannot tell.", None, []),
])  # fmt: skip
def test_replies_worded_as_models_word_them(reply, answer, literals):
    assert parse_explanation(reply) == (answer, literals)


def test_the_judge_separates_a_faithful_responder_from_a_shortcut_one():
    """Exact edits of every cited part on 300 robots: a responder that answers by the rule and cites the
    parts that support its answer on the image it sees scores CCS 1 everywhere; one that keeps its
    first answer and explanation whatever is edited (a shortcut: the cue did not move) fails AC exactly
    where the edit changed the label and EF exactly where it cited the edited part."""
    data = g.generate(RobotConfig(n_train=300, n_calib=0, n_test=0))
    faithful, shortcut = [], []
    for row in data.meta:
        label = int(rule_label(row, SPARSE)[0])
        original = explain(label, supporting_literals(row, SPARSE, label))
        for concept, _ in supporting_literals(row, SPARSE, label):
            edited = flip(row, concept)
            new = int(rule_label(edited, SPARSE)[0])
            f = exact_verdict(edited, SPARSE, explain(new, supporting_literals(edited, SPARSE, new)))
            s = exact_verdict(edited, SPARSE, original)
            faithful.append(f.ccs)
            shortcut.append((s.ac, s.ef, new != label))
            assert s.stale == (concept,)  # the original explanation cites the edited part at its old value
    assert len(faithful) > 300 and all(faithful)
    assert all(ac == (not changed) and ef == 0 for ac, ef, changed in shortcut)
    assert sum(changed for *_, changed in shortcut) > 30  # the edits do move some labels
