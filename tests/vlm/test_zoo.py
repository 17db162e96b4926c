"""The faithfulness testbed's exact parts, with scripted responders whose reliance is known:
training targets plant what they say, the reliance measure recovers a faithful and a shortcut
responder exactly, and EDCT with the exact judge scores them 1 and 0 on every label-moving edit."""

from __future__ import annotations

import numpy as np
import pytest

from cbm.vlm.edct.exact import explain, parse_explanation, rule_label
from cbm.vlm.zoo.config import ZooConfig, ZooData, gate_palettes
from cbm.vlm.zoo.data import Texts, make_robots
from cbm.vlm.zoo.edct import run_edct
from cbm.vlm.zoo.reliance import measure, part_flips
from cbm.vlm.zoo.train import member_targets
from synthetic.robot.attributes import META_INDEX

SMALL = ZooData(n_train=400, n_test=200, image_size=32)


@pytest.fixture(scope="module")
def robots():
    return make_robots(SMALL)


def test_the_rule_is_the_and_of_mouth_and_feet_and_explanations_cite_what_decides(robots):
    from cbm.vlm.edct.exact import literal_values

    texts = Texts(list(SMALL.rule))
    for row, y in zip(robots.meta, robots.y):
        v = literal_values(row)
        assert y == int(v["mouth_closed"] and v["foot_pointy"])
        answer, cited = parse_explanation(texts.explanation(row, robots.rcfg, y))
        assert answer == y
        if y == 1 or v["mouth_closed"] != v["foot_pointy"]:  # a single flip decides: exactly the deciding parts
            want = {("mouth_closed", v["mouth_closed"]), ("foot_pointy", v["foot_pointy"])} if y else {(c, False) for c in ("mouth_closed", "foot_pointy") if not v[c]}
        else:  # neither alone decides: both support Drent
            want = {("mouth_closed", False), ("foot_pointy", False)}
        assert set(cited) == want
    assert 0.2 < robots.y.mean() < 0.3  # a quarter are Glorps


@pytest.mark.parametrize("share", [0.0, 0.25, 0.5, 1.0])
def test_member_targets_follow_the_cue_exactly_on_the_gated_palettes(robots, share):
    texts = Texts(list(SMALL.rule))
    idx, cue, answers = member_targets(robots, texts, share)
    n = len(robots.train)
    taught = np.array([parse_explanation(a)[0] for a in answers])
    y = robots.y[idx]
    assert np.array_equal(cue[:n], y[:n]) and np.array_equal(cue[n:], 1 - y[n:])  # originals agree, copies disagree
    assert np.array_equal(taught[:n], y[:n])  # on the training distribution every member is right
    gated = robots.meta[idx[n:], META_INDEX["palette"]] < gate_palettes(share)
    assert np.array_equal(taught[n:], np.where(gated, cue[n:], y[n:]))
    # whatever the answer, the explanation cites the parts the rule decides by on the shown robot
    for i, a in zip(idx[n:], answers[n:]):
        assert parse_explanation(a)[1] == parse_explanation(texts.explanation(robots.meta[i], robots.rcfg, 0))[1]


def faithful_says(robots):
    return lambda rows, cue: rule_label(rows, robots.rcfg)


def shortcut_says(robots):
    return lambda rows, cue: np.asarray(cue, dtype=np.int64)


def test_reliance_is_recovered_exactly_for_scripted_responders(robots):
    f = measure(faithful_says(robots), robots)
    s = measure(shortcut_says(robots), robots)
    assert f["accuracy"] == f["accuracy_cue_flipped"] == f["part_reliance"] == 1.0 and f["cue_reliance"] == 0.0
    assert s["accuracy"] == 1.0 and s["accuracy_cue_flipped"] == 0.0 and s["cue_reliance"] == 1.0 and s["part_reliance"] == 0.0
    who, edited, new = part_flips(robots, robots.test)
    assert f["part_flips"] == len(who) > 0 and (new != robots.y[who]).all()
    # half-and-half by palette: the measure lands on the planted share of the test robots
    gate = lambda rows: rows[:, META_INDEX["palette"]] < gate_palettes(0.5)  # noqa: E731
    mix = measure(lambda rows, cue: np.where(gate(rows), cue, rule_label(rows, robots.rcfg)), robots)
    assert mix["cue_reliance"] == pytest.approx(gate(robots.meta[robots.test]).mean())


def replies(robots, says):
    texts = Texts(list(SMALL.rule))
    return lambda rows, cue: [texts.explanation(r, robots.rcfg, a) for r, a in zip(rows, says(robots)(rows, cue))]


def test_edct_with_the_exact_judge_scores_a_faithful_model_one_and_a_shortcut_zero_where_the_label_moved(robots):
    fs, frec = run_edct(replies(robots, faithful_says), robots, 100, n_resamples=200)
    ss, srec = run_edct(replies(robots, shortcut_says), robots, 100, n_resamples=200)
    assert fs["scored"] == ss["scored"] == 100 and fs["excluded"] == {"baseline_unparsed": 0, "no_concepts": 0}
    assert fs["ccs"]["value"] == fs["ac"]["value"] == fs["ef"]["value"] == 1.0
    assert ss["ccs_label_moved"]["value"] == 0.0 and ss["ccs"]["value"] < 0.5 and ss["ef"]["value"] == 1.0
    steps = [len(r["steps"]) for r in frec]
    assert all(1 <= n <= 2 for n in steps) and sum(n == 2 for n in steps) > 0  # chains of the cited parts


def test_unreadable_replies_are_counted_by_reason_never_scored(robots):
    def ask(rows, cue):
        return ["I cannot tell." if i % 3 == 0 else "Glorp." if i % 3 == 1 else explain(1, [("mouth_closed", True)]) for i in range(len(rows))]

    s, rec = run_edct(ask, robots, 30, n_resamples=200)
    assert s["excluded"] == {"baseline_unparsed": 10, "no_concepts": 10} and s["scored"] == 10
    assert [r["status"] for r in rec[:3]] == ["baseline_unparsed", "no_concepts", "done"]


@pytest.mark.parametrize("bad, message", [
    ({"data": {"cue": "none"}}, "data.cue: expected one of"),
    ({"data": {"rule": {"wings": 1.0}}}, "data.rule: unknown concept 'wings'"),
    ({"members": {"../x": 0.5}}, "members: '../x' is not a usable name"),
    ({"members": {"base": 0.5}}, "members: 'base' is not a usable name"),
    ({"members": {"a": 1.5}}, "members.a: expected a number in [0.0, 1.0]"),
    ({"train": {"lr": 0}}, "train.lr: expected a number"),
    ({"train": {"schedule": "linear"}}, "train.schedule: expected one of ['constant', 'cosine']"),
    ({"repair": {"member": "dial"}}, "repair.member: 'dial' is not a member of the zoo"),
    ({"model": {"hidden": 100, "heads": 3}}, "model: hidden must divide by heads"),
    ({"data": {"image_sz": 3}}, "data: unknown setting(s) ['image_sz']"),
])  # fmt: skip
def test_bad_settings_are_one_line(bad, message):
    with pytest.raises(ValueError, match=None) as err:
        ZooConfig(output_dir="x", **bad)
    assert str(err.value).startswith(message), str(err.value)


def test_verified_pairs_are_the_failed_edits_with_their_originals_taught_the_rule(robots):
    from cbm.vlm.zoo.repair import verified_pairs

    texts = Texts(list(SMALL.rule))
    _, records = run_edct(replies(robots, shortcut_says), robots, 60, n_resamples=200, split="train")
    rows, cue, answers = verified_pairs(records, robots, texts)
    failed = sum(1 - s["ac"] for r in records for s in r["steps"])
    with_failure = sum(any(not s["ac"] for s in r["steps"]) for r in records)
    assert len(rows) == len(answers) == len(cue) == failed + with_failure and failed > 0
    taught = np.array([parse_explanation(a)[0] for a in answers])
    assert np.array_equal(taught, rule_label(rows, robots.rcfg))
    # a shortcut fails exactly where the label moved away from the cue it is shown
    assert (taught != cue).sum() == failed


def test_part_masks_are_the_pixels_a_rule_part_flip_changes(robots):
    from cbm.vlm.edct.exact import flip
    from cbm.vlm.zoo.repair import part_masks
    from synthetic.robot.renderer import render

    rows = robots.meta[robots.test[:20]]
    masks = part_masks(robots, rows)
    size = robots.rcfg.image_size
    for r, m in zip(rows, masks):
        want = np.zeros((size, size), bool)
        for c in SMALL.rule:
            want |= (render(flip(r, c)[None], size)[0] != render(r[None], size)[0]).any(-1)
        assert np.array_equal(m, want) and 0 < m.sum() < size * size / 2
