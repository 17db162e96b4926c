"""The intervention engine: grid metrics, results files, plots, the cbm-train helper."""

from __future__ import annotations

import json

import pytest
import torch
from intervention_toys import ToyModel
from torch import nn

from cbm.interventions import (
    ExpertIntervener,
    OracleIntervener,
    RandomPolicy,
    ResponsivenessPolicy,
    UncertaintyPolicy,
    apply_intervention,
)
from cbm.interventions.engine import (
    ResultsGrid,
    model_accuracy,
    read_blackbox_metrics,
    run_grid,
)
from cbm.interventions.evaluate import intervention_accuracy, resolve_ks

W, B0 = [4.0, -2.0, 1.0, 0.5], -1.0


def rule_model() -> ToyModel:
    """Two classes, class 1 iff ``W.c + B0 > 0``: on the true concepts the head is the labelling rule."""
    head = nn.Linear(4, 2)
    with torch.no_grad():
        head.weight.copy_(torch.tensor([[0.0] * 4, W]))
        head.bias.copy_(torch.tensor([0.0, B0]))
    return ToyModel(head, 4, 2).eval()


def batches(n: int = 600, bs: int = 128, seed: int = 0) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    c = (torch.rand(n, 4, generator=g) < 0.5).float()
    y = ((c @ torch.tensor(W) + B0) > 0).long()
    x = (2 * c - 1) * 1.0 + torch.randn(n, 4, generator=g) * 1.2  # noisy concept logits
    idx = torch.arange(n)
    return [{"x": x[i : i + bs], "c": c[i : i + bs], "y": y[i : i + bs], "idx": idx[i : i + bs]} for i in range(0, n, bs)]


def test_grid_metrics():
    model, data = rule_model(), batches()
    policies = {
        "random": RandomPolicy(0),
        "uncertainty": UncertaintyPolicy(),
        "responsiveness": ResponsivenessPolicy(threshold=0.2),
    }
    grid = run_grid(model, data, {"oracle": OracleIntervener(), "expert": ExpertIntervener(0.8)}, policies, [0, 1, 2, 4], per_example=True)
    base = model_accuracy(model, data)
    assert 0.6 < base < 0.95
    for r in grid.rows:
        assert r["n_examples"] == 600 and r["gain"] is None
        assert r["mean_requested"] <= r["k"] + 1e-9
        if r["k"] == 0:
            assert r["accuracy"] == pytest.approx(base) and r["mean_requested"] == 0 and r["frac_requesting"] == 0
    for p in ("random", "uncertainty"):
        assert grid.row("oracle", p, 4)["accuracy"] == 1.0  # all concepts true -> the labelling rule
    # responsiveness asks only for the most responsive subset, and only above the threshold
    assert base < grid.row("oracle", "responsiveness", 4)["accuracy"] < 1.0
    assert grid.row("oracle", "random", 2)["mean_requested"] == 2.0
    assert grid.row("oracle", "random", 2)["frac_requesting"] == 1.0
    r = grid.row("oracle", "responsiveness", 2)
    assert 0 < r["frac_requesting"] < 1 and r["mean_requested"] < 2
    # responsiveness asks fewer questions and helps more per question than random at k=1
    rr, rnd = grid.row("oracle", "responsiveness", 1), grid.row("oracle", "random", 1)
    assert (rr["accuracy"] - base) / rr["mean_requested"] > (rnd["accuracy"] - base) / rnd["mean_requested"]
    # the expert is worse than the oracle once every concept is asked
    assert grid.row("expert", "random", 4)["accuracy"] < 1.0
    # per-example outputs: random masks are nested in k and match the policy's budget
    ex1, ex2 = grid.examples[("oracle", "random", 1)], grid.examples[("oracle", "random", 2)]
    assert ex1["mask"].shape == (600, 4) and torch.equal(ex1["idx"], torch.arange(600))
    assert bool((ex1["mask"] <= ex2["mask"]).all())
    ex = grid.examples[("oracle", "responsiveness", 2)]
    assert (ex["pred"] == ex["y"]).float().mean().item() == pytest.approx(grid.row("oracle", "responsiveness", 2)["accuracy"])
    # the curves, ks ascending
    ks, accs = grid.curves()[("oracle", "random")]
    assert ks == [0, 1, 2, 4] and accs[-1] == 1.0


def test_gain_results_files_and_plot(tmp_path):
    model, data = rule_model(), batches(256)
    grid = run_grid(model, data, {"oracle": OracleIntervener()}, {"random": RandomPolicy(0)}, [0, 2, 4], blackbox_accuracy=0.5)
    for r in grid.rows:
        assert r["gain"] == pytest.approx(r["accuracy"] - 0.5)
    paths = grid.save(tmp_path)
    assert paths["plot"].stat().st_size > 5000
    header = (tmp_path / "results.csv").read_text().splitlines()[0]
    assert header.split(",")[:5] == ["intervener", "policy", "k", "accuracy", "gain"]
    back = ResultsGrid.from_json(tmp_path / "results.json")
    assert back.rows == json.loads(json.dumps(grid.rows)) and back.blackbox_accuracy == 0.5
    assert "| oracle | random | 4 | 100.00 | +50.00 |" in grid.table()
    # gain filled in afterwards
    assert grid.with_blackbox(0.25).row("oracle", "random", 4)["gain"] == pytest.approx(0.75)


def test_blackbox_metrics_file(tmp_path):
    (tmp_path / "metrics.json").write_text(json.dumps({"test/task_acc": 0.875, "dataset": "robot"}))
    assert read_blackbox_metrics(tmp_path / "metrics.json") == 0.875
    with pytest.raises(ValueError, match="no 'val/task_acc'"):
        read_blackbox_metrics(tmp_path / "metrics.json", split="val")
    with pytest.raises(ValueError, match="dataset 'robot', not 'sudoku'"):
        read_blackbox_metrics(tmp_path / "metrics.json", dataset="sudoku")


def test_intervention_accuracy_matches_the_plain_loop():
    model, data = rule_model(), batches(300)
    ks = [0, 1, 3]
    got = intervention_accuracy(model, data, ks, lambda: RandomPolicy(7))
    for k in ks:
        pol, correct, total = RandomPolicy(7), 0, 0
        for batch in data:
            state = model.encode(batch["x"])
            new, _ = apply_intervention(model, state, batch, pol, OracleIntervener(), k)
            correct += int((model.predict(new).argmax(1) == batch["y"]).sum())
            total += len(batch["y"])
        assert got[k] == pytest.approx(correct / total)


def test_grid_per_example_records():
    model, data = rule_model(), batches(200)
    grid = run_grid(model, data, {"o": OracleIntervener()}, {"r": ResponsivenessPolicy(0.0)}, [1, 2], per_example=True)
    acc = {k: grid.row("o", "r", k)["accuracy"] for k in (1, 2)}
    assert acc[2] >= acc[1] - 0.05
    ex = grid.examples[("o", "r", 1)]
    assert ex["n_requested"].max() <= 1 and len(ex["pred"]) == len(ex["y"]) == 200


def test_bad_requests_fail_clearly():
    model, data = rule_model(), batches(64)
    with pytest.raises(ValueError, match=r"k=5 is outside \[0, 4\]"):
        resolve_ks([1, 5], 4)
    assert resolve_ks([0, "max"], 4) == [0, 4]
    assert resolve_ks([0, 1, 3, "max"], 3) == [0, 1, 3]  # max is 3 here: one budget
    assert resolve_ks([0, "max", 1, 3], 3) == [0, 3, 1]
    with pytest.raises(ValueError, match=r"k=2 is listed twice in \[2, 2\]"):
        resolve_ks([2, 2], 4)

    class Greedy:
        def select(self, model, state, k):
            return torch.ones_like(state.probs, dtype=torch.bool)

    with pytest.raises(ValueError, match="more than k=1"):
        run_grid(model, data, {"o": OracleIntervener()}, {"bad": Greedy()}, [1])
    model.has_concepts = False
    with pytest.raises(ValueError, match="black-box"):
        run_grid(model, data, {"o": OracleIntervener()}, {"r": RandomPolicy()}, [1])
    from cbm.interventions import registry

    with pytest.raises(ValueError, match="unknown policy 'psychic'"):
        registry.build("policy", "psychic", {}, registry.BuildContext())
    with pytest.raises(ValueError, match="prior"):
        ResponsivenessPolicy(prior="empirical")
    with pytest.raises(ValueError, match="no examples"):
        run_grid(rule_model(), [], {"o": OracleIntervener()}, {"r": RandomPolicy()}, [1])


def test_uncertainty_policy_sources():
    from cbm.models.state import ConceptState

    st = ConceptState(logits=torch.zeros(1, 3), probs=torch.tensor([[0.1, 0.45, 0.8]]))
    assert UncertaintyPolicy().select(None, st, 1).tolist() == [[False, True, False]]
    st.uncertainty = torch.tensor([[5.0, 0.0, 1.0]])  # the architecture's own uncertainty wins
    assert UncertaintyPolicy().select(None, st, 1).tolist() == [[True, False, False]]
    assert UncertaintyPolicy("probs").select(None, st, 1).tolist() == [[False, True, False]]
    st.uncertainty = None
    with pytest.raises(ValueError, match="no uncertainty"):
        UncertaintyPolicy("state").select(None, st, 1)
    assert UncertaintyPolicy(allowed=[0, 2]).select(None, st, 3).tolist() == [[True, False, True]]


@pytest.mark.parametrize("kind", ["policy", "intervener"])
def test_every_component_config_file_lists_its_schema_defaults(kind):
    """conf/<kind>/<name>.yaml and the class's typed Config hold the same defaults (one knob, one value)."""
    from dataclasses import asdict

    from cbm.interventions import registry

    # built-in components only: another test may be registering a user's component meanwhile
    names = [n for n in registry.names(kind) if str(registry.defaults(kind, n).get("_target_")).startswith("cbm.")]
    assert names and set(names) >= ({"random", "uncertainty", "responsiveness"} if kind == "policy" else {"oracle", "expert", "llm"})
    for name in names:
        settings = registry.defaults(kind, name)
        cls = registry.component_class(kind, name)
        assert settings.pop("_target_").endswith(cls.__name__)
        if name == "llm":  # its client is required, so its Config has no complete default
            assert set(settings) == set(cls.Config.__dataclass_fields__)
            continue
        assert settings == asdict(cls.Config()), name


class Liar:
    """Answers every asked concept wrong (the true value flipped)."""

    def __call__(self, batch, state, mask):
        return 1.0 - batch["c"].to(state.probs)


def test_answer_exchange_rows_equal_the_replay_by_hand():
    """0.4.1's answer exchange: ``oracle+liar`` is the oracle's answers with the liar's on concept 0 (the
    rule's heaviest); replayed by hand on the same masks, and exact at k = max from the rule itself."""
    model, data = rule_model(), batches()
    ivs = {"oracle": OracleIntervener(), "liar": Liar()}
    grid = run_grid(model, data, ivs, {"random": RandomPolicy(0)}, [0, 1, 2, 4], per_example=True, exchange=("oracle", "liar", [0]))
    assert grid.meta["exchange"] == {"oracle+liar": {"answers": "oracle", "with": "liar", "columns": [0]},
                                     "liar+oracle": {"answers": "liar", "with": "oracle", "columns": [0]}}  # fmt: skip
    x, c, y = (torch.cat([b[key] for b in data]) for key in ("x", "c", "y"))
    w = torch.tensor(W)
    for k in (1, 2, 4):
        mask = grid.examples[("oracle", "random", k)]["mask"]
        for name, flip in (("oracle+liar", torch.tensor([1.0, 0, 0, 0])), ("liar+oracle", torch.tensor([0.0, 1, 1, 1]))):
            answers = (c - flip).abs()  # the flipped columns answered wrong, the others right
            probs = torch.where(mask, answers, torch.sigmoid(x))
            by_hand = ((probs @ w + B0 > 0).long() == y).float().mean().item()
            row = grid.row(name, "random", k)
            assert row["accuracy"] == pytest.approx(by_hand, abs=1e-6)
            assert row["mean_requested"] == grid.row("oracle", "random", k)["mean_requested"] == k
    # every concept asked: the rule on the answers themselves
    assert grid.row("oracle+liar", "random", 4)["accuracy"] == pytest.approx(
        (((c - torch.tensor([1.0, 0, 0, 0])).abs() @ w + B0 > 0).long() == y).float().mean().item())
    assert grid.row("oracle", "random", 4)["accuracy"] == 1.0 > grid.row("oracle+liar", "random", 4)["accuracy"]
    for name in ("oracle+liar", "liar+oracle"):  # no answers at k = 0: the model's own prediction
        assert grid.row(name, "random", 0)["accuracy"] == grid.row("oracle", "random", 0)["accuracy"]
    with pytest.raises(ValueError, match="two different interveners"):
        run_grid(model, data, ivs, {"random": RandomPolicy(0)}, [0, 1], exchange=("oracle", "oracle", [0]))
    with pytest.raises(ValueError, match="two different interveners"):
        run_grid(model, data, ivs, {"random": RandomPolicy(0)}, [0, 1], exchange=("oracle", "expert", [0]))


def test_edits_and_changed_predictions_count_what_the_answers_did():
    """0.4.1's intervention_metrics: an answer unlike the model's own 1[p > 0.5] is an edit; a prediction
    differing from k = 0 is changed. The model's own answers edit nothing and change nothing; the liar
    edits every answer the detector reads right; counted by hand on the same masks. The toy reads soft
    probabilities, so the own answers (hardened) still change predictions, as 0.4.1's own-answers table measures."""
    from cbm.interventions.interveners.self_ import SelfIntervener

    model, data = rule_model(), batches()
    grid = run_grid(model, data, {"self": SelfIntervener(), "liar": Liar(), "oracle": OracleIntervener()}, {"random": RandomPolicy(0)},
                    [0, 2, 4], per_example=True)  # fmt: skip
    x, c, y = (torch.cat([b[key] for b in data]) for key in ("x", "c", "y"))
    own = x > 0  # sigmoid(x) > 0.5
    base = (torch.sigmoid(x) @ torch.tensor(W) + B0 > 0).long()
    for k in (0, 2, 4):
        assert grid.row("self", "random", k)["mean_edits"] == 0.0
        mask = grid.examples[("liar", "random", k)]["mask"]
        for iv, answers in (("liar", 1 - c), ("oracle", c), ("self", own.float())):
            row, ex = grid.row(iv, "random", k), grid.examples[(iv, "random", k)]
            assert row["mean_edits"] == pytest.approx((mask & ((answers > 0.5) != own)).sum(1).float().mean().item(), abs=1e-6)
            assert row["frac_changed"] == pytest.approx((ex["pred"] != base).float().mean().item(), abs=1e-6)
    assert grid.row("oracle", "random", 4)["mean_edits"] == pytest.approx(((c > 0.5) != own).sum(1).float().mean().item(), abs=1e-6)
    assert grid.row("liar", "random", 4)["mean_edits"] + grid.row("oracle", "random", 4)["mean_edits"] == pytest.approx(4.0)
    assert grid.row("self", "random", 0)["frac_changed"] == 0.0 < grid.row("self", "random", 4)["frac_changed"]
