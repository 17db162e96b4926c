"""The automate / intervene / defer flow on a hand-wired CBM (see conftest.py for the cases)."""

import numpy as np
import pytest
import torch
from selective_toys import MostUncertainPolicy, toy_batch

from cbm.interventions import OracleIntervener, RandomPolicy
from cbm.models import build_model
from cbm.selective import concept_costs, confidence, run_automation, score_confirmed, score_split

TAU = 0.99


def flow(model, batches, tau=TAU, ks=(0, 1, 2, 3), costs=None, policy=MostUncertainPolicy):
    return run_automation(model, batches, tau, list(ks), policy, OracleIntervener(), costs=costs)


def test_outcomes_per_example_match_the_hand_analysis(model, batch):
    out = flow(model, [batch])
    assert out[0].accepted_before.tolist() == [True, True, True, False, False, False, True, False]
    assert out[0].automated.tolist() == out[0].accepted_before.tolist()
    assert out[1].automated.tolist() == [True, True, True, True, True, False, True, True]
    # correct_final is about the final prediction, automated or not (6 is deferred yet right)
    assert out[1].correct_final.tolist() == [True, True, True, True, True, True, False, False]
    assert out[2].automated.tolist() == [True, True, True, True, True, True, True, False]
    assert out[3].automated.all() and out[3].correct_final.tolist() == [True] * 6 + [False, True]
    for k in (1, 2, 3):  # every abstained example pays for k concepts, rescued or not
        assert out[k].n_requested.tolist() == [0, 0, 0, k, k, k, 0, k]


def test_summary_numbers_by_hand(model, batch):
    costs = concept_costs(["c0", "c1", "c2"], {"c0": 2.0})  # c0 costs 2 units, the others 1 -> [2/3, 1/3, 1/3]
    s = {k: o.summary(0.8) for k, o in flow(model, [batch], costs=costs).items()}
    assert s[0]["coverage_before"] == s[0]["coverage"] == 0.5
    assert s[0]["selective_acc"] == 0.75 and s[0]["nwa"] == 0.5 and s[0]["nwa_cost"] == 0.5
    assert s[0]["rescued"] == 0.0 and s[0]["deferred"] == 0.5
    # k=1: 7/8 automated, 4 requests of 1/3 -> NWA = 7/8 - 1/6 = 17/24.
    assert s[1]["coverage"] == 7 / 8 and s[1]["rescued"] == 3 / 8 and s[1]["deferred"] == 1 / 8
    assert s[1]["selective_acc"] == pytest.approx(5 / 7) and s[1]["rescued_acc"] == pytest.approx(2 / 3)
    assert s[1]["nwa"] == pytest.approx(17 / 24) and s[1]["mean_requested"] == 0.5
    # cost-weighted: examples 4, 5 ask c1 (1/3), 6 and 8 ask c0 (2/3) -> mean 2/8.
    assert s[1]["mean_cost"] == pytest.approx(1 / 4) and s[1]["nwa_cost"] == pytest.approx(7 / 8 - 1 / 4)
    assert s[2]["nwa"] == pytest.approx(7 / 8 - 1 / 3) and s[2]["selective_acc"] == pytest.approx(6 / 7)
    # a full review costs 1 at unit costs, 4/3 with c0 at 2 units: 4 of 8 examples reviewed
    assert s[3]["nwa"] == pytest.approx(0.5) and s[3]["nwa_cost"] == pytest.approx(1 - 4 / 8 * 4 / 3)
    assert s[3]["coverage"] == 1.0 and s[3]["selective_acc"] == 7 / 8 and s[3]["meets_target"]
    assert s[0]["meets_target"] is False


def test_negative_nwa_when_interventions_cost_more_than_they_rescue(model, batch):
    # At tau = 0.995 even two-on-one-off (0.9933) abstains and a full review cannot rescue anything.
    s = flow(model, [batch], tau=0.995, ks=(0, 3))
    assert s[0].summary()["nwa"] == pytest.approx(3 / 8)
    r = s[3].summary()
    assert r["rescued"] == 0.0 and r["deferred"] == 5 / 8 and r["mean_cost_uniform"] == 5 / 8
    assert r["nwa"] == pytest.approx(3 / 8 - 5 / 8) and r["nwa"] < 0


def test_rescue_is_rescored_with_the_same_tau(model, batch):
    # tau = example 3's own score (0.99330): a score equal to tau abstains; 4 and 5 become
    # two-on-one-off *exactly* after their intervention (0.99331 > tau) and are rescued.
    state = model.encode(batch["x"])
    tau = float(confidence(model, state, model.predict(state))[2])
    out = flow(model, [batch], tau=tau, ks=(1,))[1]
    assert not out.accepted_before[2] and out.accepted_before[[0, 1, 6]].all()
    assert out.automated[[3, 4]].all() and (out.score_final[[3, 4]] > tau).all()
    assert not out.automated[5] and out.score_final[5] <= tau


def test_batches_and_order_of_ks_do_not_change_results(model, batch):
    one = flow(model, [batch], ks=(0, 1, 3), policy=lambda: RandomPolicy(5))
    halves = [{k: v[:3] for k, v in batch.items()}, {k: v[3:] for k, v in batch.items()}]
    two = flow(model, halves, ks=(3, 1, 0), policy=lambda: RandomPolicy(5))
    for k in (0, 3):  # k=3 requests everything, so the random draw does not matter
        np.testing.assert_array_equal(one[k].automated, two[k].automated)
        np.testing.assert_array_equal(one[k].cost_uniform, two[k].cost_uniform)
    again = flow(model, [batch], ks=(1, 0, 3), policy=lambda: RandomPolicy(5))
    np.testing.assert_array_equal(one[1].automated, again[1].automated)  # a fresh policy per k


def test_all_abstained_reports_undefined_accuracy_not_zero(model, batch):
    out = flow(model, [batch], tau=1.0, ks=(0, 3))
    for k in (0, 3):
        r = out[k].summary(0.95)
        assert r["coverage"] == 0.0 and r["selective_acc"] is None and r["selective_acc_before"] is None
        assert "selective accuracy is undefined" in r["note"] and "meets_target" not in r


def test_budget_above_m_is_refused(model, batch):
    with pytest.raises(ValueError, match=r"intervention budget k=4 is outside \[0, 3\]"):
        flow(model, [batch], ks=(4,))


def test_empty_test_split_is_refused(model):
    with pytest.raises(ValueError, match="no test examples to automate"):
        flow(model, [], ks=(0,))


def test_score_split_collects_predictions(model, batch):
    sc = score_split(model, [batch])
    # 4 and 5 sit exactly on P(y=1) = 0.5, where the predicted class is a coin toss of rounding
    assert sc.correct[[0, 1, 2, 5, 6, 7]].tolist() == [True, True, True, False, False, False]
    assert len(sc) == 8 and np.all((sc.scores >= 0.5) & (sc.scores <= 1.0))


def test_score_confirmed_sets_every_concept_true(model, batch):
    # true concepts sum to 3, 0, 2, 2, 1, 2, 3, 2: P(y=1) = sigmoid(10 * sum - 15), so every score is
    # at least sigmoid(5) = 0.99331 and every prediction follows the concepts (7 is label noise)
    sc = score_confirmed(model, [batch])
    assert sc.preds.tolist() == [1, 0, 1, 1, 0, 1, 1, 1] and sc.y.tolist() == [1, 0, 1, 1, 0, 1, 0, 1]
    assert sc.scores == pytest.approx([1 / (1 + np.exp(-abs(10 * s - 15))) for s in (3, 0, 2, 2, 1, 2, 3, 2)], abs=1e-6)
    # the flow at k = m with the oracle scores each abstained example exactly as confirming it all
    out = flow(model, [batch], ks=(3,), policy=RandomPolicy)[3]
    held = ~out.accepted_before
    assert np.array_equal(out.score_final[held], sc.scores[held]) and out.asked[held].all()


def test_probcbm_uncertainty_score_drops_after_intervention():
    info = {
        "dataset": "toy",
        "modality": "tabular",
        "in_shape": [3],
        "concept_names": ["a", "b", "c"],
        "class_names": ["n", "y"],
    }
    torch.manual_seed(0)
    model = build_model(
        {
            "name": "probcbm",
            "n_samples_infer": 8,
            "emb_size": 4,
            "class_emb_size": 6,
            "backbone": {"name": "mlp", "hidden": [8], "out_dim": 8},
        },
        info,
    ).eval()
    b = toy_batch()
    with torch.no_grad():
        state = model.encode(b["x"])
        before = confidence(model, state, model.predict(state), "uncertainty")
        full = model.intervene(state, torch.ones_like(state.probs, dtype=torch.bool), b["c"])
        after = confidence(model, full, model.predict(full), "uncertainty")
    assert before.shape == (8,) and ((before > 0) & (before <= 1)).all()
    assert (after >= before).all()  # every concept known: no class uncertainty left
    out = run_automation(
        model, [b], 0.5, [0, 3], MostUncertainPolicy, OracleIntervener(), score="uncertainty"
    )
    assert out[3].automated.sum() >= out[0].automated.sum()


def test_uncertainty_score_needs_an_architecture_with_uncertainty(model, batch):
    state = model.encode(batch["x"])
    with pytest.raises(ValueError, match="score=uncertainty needs class uncertainties, but model 'cbm'"):
        confidence(model, state, model.predict(state), "uncertainty")


def by_name(kind: str, name: str, seed: int = 0, **settings):
    """A component built through the registry, as cbm-automate builds it."""
    from cbm.interventions import registry

    ctx = registry.BuildContext(seed=seed, concept_names=("c0", "c1", "c2"))
    return registry.build(kind, name, settings, ctx)


def policy_factory(name: str, seed: int = 0, **settings):
    return lambda: by_name("policy", name, seed, **settings)


def make_intervener(name: str, **settings):
    return by_name("intervener", name, **settings)


def test_flow_with_the_policies_and_interveners_by_name(model, batch):
    out = run_automation(
        model, [batch], TAU, [0, 1], policy_factory("random", seed=3), make_intervener("oracle")
    )
    assert out[1].n_requested.sum() == 4
    with pytest.raises(ValueError, match="unknown policy 'clever'"):
        policy_factory("clever")()


def test_shipped_policies_and_expert_by_name(model, batch):
    hand = flow(model, [batch])
    by_name = run_automation(
        model, [batch], TAU, [0, 1, 2, 3], policy_factory("uncertainty"), OracleIntervener()
    )
    for k in (1, 2, 3):  # most uncertain first, as the hand-written policy
        np.testing.assert_array_equal(by_name[k].automated, hand[k].automated)
    perfect = run_automation(
        model, [batch], TAU, [1], MostUncertainPolicy, make_intervener("expert", accuracy=1.0)
    )
    np.testing.assert_array_equal(perfect[1].automated, hand[1].automated)
    # An expert who is always wrong flips 4's concept (rescued, wrong) and 5's (rescued, wrong).
    liar = run_automation(
        model, [batch], TAU, [1], MostUncertainPolicy, make_intervener("expert", accuracy=0.0)
    )
    assert liar[1].automated[[3, 4]].all() and not liar[1].correct_final[[3, 4]].any()
    resp = run_automation(model, [batch], TAU, [0, 1], policy_factory("responsiveness"), OracleIntervener())
    assert resp[1].n_requested[resp[0].accepted_before].sum() == 0  # confident cases are never asked about
    assert resp[1].automated.sum() >= resp[0].automated.sum()
