"""Per-concept statistics of the engine (detector accuracy, requests, right answers) and the
``self`` intervener (the model's own thresholded answers)."""

from __future__ import annotations

import json

import pytest
import torch
from intervention_toys import FnHead, ToyModel
from torch import nn

from cbm.interventions import ExpertIntervener, OracleIntervener, RandomPolicy, UncertaintyPolicy, registry
from cbm.interventions.engine import ResultsGrid, concept_rows, run_grid
from cbm.interventions.interveners.self_ import SelfIntervener
from cbm.models.state import ConceptState

W, B0, N, M = [4.0, -2.0, 1.0, 0.5], -1.0, 600, 4
KS = [0, 1, 2, M]


def linear_head() -> nn.Linear:
    head = nn.Linear(M, 2)
    with torch.no_grad():
        head.weight.copy_(torch.tensor([[0.0] * M, W]))
        head.bias.copy_(torch.tensor([0.0, B0]))
    return head


def soft_model() -> ToyModel:
    """The head reads the probabilities (a soft CBM)."""
    return ToyModel(linear_head(), M, 2).eval()


def hard_model() -> ToyModel:
    """The head reads ``1[p > 0.5]`` (a hard CBM)."""
    head = linear_head()
    return ToyModel(FnHead(lambda p: head((p > 0.5).float())), M, 2).eval()


def batches(n: int = N, bs: int = 128, seed: int = 0, noisy: bool = False) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    c = (torch.rand(n, M, generator=g) < 0.5).float()
    y = ((c @ torch.tensor(W) + B0) > 0).long()
    x = (2 * c - 1) * torch.tensor([0.3, 1.0, 2.0, 3.0]) + torch.randn(n, M, generator=g)  # detectors of unequal quality
    out = {"x": x, "c": c, "y": y, "idx": torch.arange(n)}
    if noisy:  # annotations flipped on a fifth: the oracle (and the statistics) use c_clean
        out["c_clean"], out["c"] = c, torch.where(torch.rand(n, M, generator=g) < 0.2, 1 - c, c)
    return [{k: v[i : i + bs] for k, v in out.items()} for i in range(0, n, bs)]


def full(data: list[dict], key: str) -> torch.Tensor:
    return torch.cat([b[key] for b in data])


INTERVENERS = {"oracle": OracleIntervener(), "expert": ExpertIntervener(0.8), "self": SelfIntervener()}
POLICIES = {"random": RandomPolicy(0), "uncertainty": UncertaintyPolicy()}


@pytest.mark.parametrize("noisy", [False, True])
def test_concept_stats_count_requests_and_right_answers_exactly(noisy, tmp_path):
    model, data = soft_model(), batches(noisy=noisy)
    grid = run_grid(model, data, INTERVENERS, POLICIES, KS, per_example=True)
    st = grid.concept_stats
    truth = full(data, "c_clean" if noisy else "c") > 0.5
    detected = torch.sigmoid(full(data, "x")) > 0.5
    assert st["names"] == [f"c{j}" for j in range(M)] and st["n_examples"] == N
    assert st["detector_accuracy"] == pytest.approx((detected == truth).double().mean(0).tolist(), abs=1e-12)
    for r in st["rows"]:
        c = (r["intervener"], r["policy"], r["k"])
        mask = grid.examples[c]["mask"]
        row = grid.row(*c)
        assert r["requested"] == mask.sum(0).tolist()  # per concept, over examples
        assert sum(r["requested"]) == pytest.approx(row["mean_requested"] * row["n_examples"], abs=1e-3)
        if r["k"] == 0:
            assert r["requested"] == r["correct"] == [0] * M
        if r["intervener"] == "oracle":
            assert r["correct"] == r["requested"]  # the oracle is always right
        elif r["intervener"] == "self":  # right exactly where the detector is
            assert r["correct"] == (mask & (detected == truth)).sum(0).tolist()
    expert = [r for r in st["rows"] if r["intervener"] == "expert" and r["k"] == M]
    assert sum(sum(r["correct"]) for r in expert) / sum(sum(r["requested"]) for r in expert) == pytest.approx(0.8, abs=0.03)
    # long form, and the round trip through results.json
    long = grid.concept_rows()
    assert len(long) == len(st["rows"]) * M and set(long[0]) == {"intervener", "policy", "k", "concept", "requested",
                                                                   "correct", "detector_accuracy"}  # fmt: skip
    grid.save(tmp_path, plot=False)
    back = ResultsGrid.from_json(tmp_path / "results.json")
    assert back.concept_stats == json.loads(json.dumps(st)) and back.with_blackbox(0.5).concept_stats == back.concept_stats
    assert (tmp_path / "results.csv").read_text().splitlines()[0].split(",")[-1] == "seconds"  # columns unchanged


def test_results_without_concept_stats_still_load(tmp_path):
    (tmp_path / "results.json").write_text(json.dumps({"rows": [{"intervener": "oracle", "policy": "random", "k": 0,
                                                                 "accuracy": 0.9}], "meta": {}}))  # fmt: skip
    old = ResultsGrid.from_json(tmp_path / "results.json")
    assert old.concept_stats is None and old.concept_rows() == [] and concept_rows(None) == []


def test_no_statistics_when_the_true_concepts_do_not_match_the_model():
    data = batches(200)
    for b in data:
        b["c"] = b["c"][:, :3]  # another concept set's labels: no per-concept statistics, the grid still runs
    grid = run_grid(soft_model(), data, {"self": SelfIntervener()}, {"random": RandomPolicy(0)}, [0, 2])
    assert grid.concept_stats is None and grid.row("self", "random", 2)["n_examples"] == 200


def test_model_concept_names_label_the_statistics():
    model = soft_model()
    model.info = type("Info", (), {"concept_names": ["knees", "mouth", "feet", "head"]})()
    grid = run_grid(model, batches(100), {"oracle": OracleIntervener()}, {"random": RandomPolicy(0)}, [1])
    assert grid.concept_stats["names"] == ["knees", "mouth", "feet", "head"]


def test_self_intervener_changes_no_hard_cbm_prediction():
    model, data = hard_model(), batches()
    grid = run_grid(model, data, {"self": SelfIntervener(), "oracle": OracleIntervener()}, POLICIES, KS, per_example=True)
    base = grid.examples[("self", "random", 0)]["pred"]
    for pname in POLICIES:
        for k in KS:
            assert torch.equal(grid.examples[("self", pname, k)]["pred"], base), (pname, k)
            assert grid.row("self", pname, k)["accuracy"] == grid.row("self", pname, 0)["accuracy"]
    assert grid.row("oracle", "random", M)["accuracy"] == 1.0 > grid.row("self", "random", M)["accuracy"]


def test_self_intervener_values_and_registry():
    state = ConceptState(logits=torch.zeros(2, 3), probs=torch.tensor([[0.2, 0.5, 0.51], [0.9, 0.0, 1.0]]))
    mask = torch.tensor([[True, True, True], [False, True, False]])
    assert SelfIntervener()({}, state, mask).tolist() == [[0.0, 0.0, 1.0], [1.0, 0.0, 1.0]]
    assert "self" in registry.names("intervener")
    assert isinstance(registry.build("intervener", "self", {}, registry.BuildContext()), SelfIntervener)
    with pytest.raises(ValueError, match="self"):
        registry.validate("intervener", "self", {"accuracy": 0.9})  # it has no knobs
