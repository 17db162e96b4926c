"""The learned (``intcem``) policy: the greedy-oracle targets it imitates (exact, against a loop over
candidates), its sequential selection, its fit on validation rollouts (a model that hangs on one
concept: psi learns to ask it first), IntCEM's own psi, and the registry's prepare pass."""

from __future__ import annotations

import pytest
import torch

from cbm.interventions import OracleIntervener
from cbm.interventions.engine import run_grid
from cbm.interventions.policies.learned import LearnedPolicy
from cbm.interventions.policies.random import RandomPolicy
from cbm.interventions.registry import BuildContext, build
from cbm.models import build_model
from cbm.models.policy_net import PolicyNet, greedy_targets, random_start, sequential_select

M = 6
INFO = {"dataset": "toy", "modality": "tabular", "in_shape": [10], "concept_names": [f"c{i}" for i in range(M)], "class_names": ["a", "b", "c"]}


def toy(name: str = "cbm", n: int = 40, seed: int = 0, **cfg):
    torch.manual_seed(seed)
    model = build_model({"name": name, **cfg}, INFO).eval()
    g = torch.Generator().manual_seed(seed + 1)
    batch = {"x": torch.randn(n, 10, generator=g), "c": (torch.rand(n, M, generator=g) > 0.5).float(), "y": torch.randint(0, 3, (n,), generator=g)}
    return model, batch


@pytest.mark.parametrize("name", ["cbm", "cem", "hybrid_cbm"])
def test_greedy_targets_are_the_best_next_concept_by_brute_force(name):
    model, batch = toy(name, emb_size=3) if name == "cem" else toy(name)
    with torch.no_grad():
        state = model.encode(batch["x"])
    asked = random_start(torch.ones(40, M, dtype=torch.bool), torch.Generator().manual_seed(3))
    candidates = ~asked
    got, stakes = greedy_targets(model, state, asked, batch["c"], batch["y"], candidates)
    want = torch.full((40,), -1)
    want_stakes = torch.zeros(40)
    with torch.no_grad():
        for row in range(40):
            st = model.intervene(state.index(slice(row, row + 1)), asked[row : row + 1], batch["c"][row : row + 1])
            now = float(torch.log_softmax(model.predict(st).float(), 1)[0, batch["y"][row]])
            best, best_j = -float("inf"), -1
            for j in range(M):
                if not candidates[row, j]:
                    continue
                mask = asked[row : row + 1].clone()
                mask[0, j] = True
                st = model.intervene(state.index(slice(row, row + 1)), mask, batch["c"][row : row + 1])
                v = float(torch.log_softmax(model.predict(st).float(), 1)[0, batch["y"][row]])
                if v > best + 1e-6:
                    best, best_j = v, j
            want[row] = best_j
            want_stakes[row] = max(best - now, 0.0) if best_j >= 0 else 0.0
    assert (got >= 0).all() == bool(candidates.any(1).all())
    torch.testing.assert_close(stakes, want_stakes, atol=1e-5, rtol=0)
    # the same concept, or one the brute force scores within float noise of it
    assert (got == want).float().mean() >= 0.95, (got, want)


def test_random_start_draws_every_size_below_the_available_count():
    avail = torch.ones(4000, M, dtype=torch.bool)
    avail[:, 0] = False  # never requestable
    start = random_start(avail, torch.Generator().manual_seed(0))
    sizes = start.sum(1)
    assert not start[:, 0].any() and sizes.max() == M - 2 and sizes.min() == 0
    assert sorted(sizes.unique().tolist()) == list(range(M - 1))  # 0 .. n_avail - 1, each drawn
    assert torch.bincount(sizes).min() > 4000 / (M - 1) * 0.8  # uniform over sizes


def test_sequential_selection_is_nested_respects_the_state_and_the_budget():
    net = PolicyNet(M)
    probs = torch.rand(30, M, generator=torch.Generator().manual_seed(0))
    asked = torch.zeros(30, M, dtype=torch.bool)
    asked[:, 2] = True  # already intervened
    avail = ~asked
    avail[:, 5] = False  # not allowed
    prev = torch.zeros_like(avail)
    for k in range(M + 2):
        mask = sequential_select(net, probs, asked, avail, k)
        assert (mask.sum(1) == min(k, 4)).all() and not (mask & ~avail).any()
        assert (mask & prev).eq(prev).all()  # a larger budget asks for everything a smaller one did
        prev = mask


def one_concept_model(j: int = 3):
    """A CBM whose head reads concept ``j`` alone (label = that concept's value) and whose detector
    for ``j`` says 0.5: only the true value of ``j`` helps, and it always does."""
    info = {**INFO, "class_names": ["no", "yes"]}
    torch.manual_seed(0)
    model = build_model({"name": "cbm", "head": {"kind": "linear"}}, info).eval()
    with torch.no_grad():
        last = [mod for mod in model.concept_layer.modules() if isinstance(mod, torch.nn.Linear)][-1]
        last.weight[j] = 0.0
        last.bias[j] = 0.0
        model.head.weight.zero_()
        model.head.weight[:, j] = torch.tensor([-6.0, 6.0])
        model.head.bias.copy_(torch.tensor([3.0, -3.0]))
    g = torch.Generator().manual_seed(5)
    n = 400
    c = (torch.rand(n, M, generator=g) > 0.5).float()
    return model, {"x": torch.randn(n, 10, generator=g), "c": c, "y": c[:, j].long()}


def test_the_fitted_policy_asks_the_one_concept_that_decides_first():
    model, batch = one_concept_model(3)
    policy = LearnedPolicy(LearnedPolicy.Config(epochs=30), seed=0)
    policy.prepare(model, batch)
    with torch.no_grad():
        state = model.encode(batch["x"])
    first = policy.select(model, state, 1)
    assert first[:, 3].float().mean() >= 0.99 and (first.sum(1) == 1).all()
    # through the engine: one question answered by the oracle fixes every example; a random one ~1/m of them
    loader = [batch]
    grid = run_grid(model, loader, {"oracle": OracleIntervener()}, {"intcem": lambda: policy, "random": lambda: RandomPolicy(0)}, [0, 1])
    acc = {(r["policy"], r["k"]): r["accuracy"] for r in grid.rows}
    assert acc[("intcem", 0)] == pytest.approx(0.5, abs=0.08)  # the detector says 0.5: the head guesses
    assert acc[("intcem", 1)] >= 0.99 > acc[("random", 1)] + 0.2


def test_stakes_weight_the_imitation_and_zero_stakes_teach_nothing():
    from cbm.models.policy_net import imitation_loss

    net = PolicyNet(M)
    probs, asked = torch.rand(8, M), torch.zeros(8, M, dtype=torch.bool)
    candidates, target = torch.ones(8, M, dtype=torch.bool), torch.arange(8) % M
    with torch.no_grad():
        plain = float(imitation_loss(net, probs, asked, candidates, target))
        assert float(imitation_loss(net, probs, asked, candidates, target, torch.ones(8))) == pytest.approx(plain)
        assert float(imitation_loss(net, probs, asked, candidates, target, torch.zeros(8))) == 0.0
        only_first = float(imitation_loss(net, probs, asked, candidates, target, torch.tensor([3.0, 0, 0, 0, 0, 0, 0, 0])))
        assert only_first == pytest.approx(float(imitation_loss(net, probs[:1], asked[:1], candidates[:1], target[:1])))


def test_sources_intcem_brings_its_own_psi_others_get_one_fit():
    intcem, batch = toy("intcem", emb_size=3)
    auto = LearnedPolicy()
    auto.prepare(intcem, batch)
    assert auto.net is intcem.policy_net
    fit = LearnedPolicy(LearnedPolicy.Config(source="fit", epochs=1))
    fit.prepare(intcem, batch)
    assert isinstance(fit.net, PolicyNet) and fit.net is not intcem.policy_net
    cbm, batch = toy("cbm")
    with pytest.raises(ValueError, match=r"intcem policy: source=model, but CBM trained no policy"):
        LearnedPolicy(LearnedPolicy.Config(source="model")).prepare(cbm, batch)
    with pytest.raises(ValueError, match=r"call prepare"):
        LearnedPolicy().select(cbm, cbm.encode(batch["x"]), 1)


def test_the_registry_prepares_it_on_the_validation_split_and_respects_allowed_concepts():
    model, batch = toy("cbm")
    ctx = BuildContext(seed=0, concept_names=tuple(INFO["concept_names"]), allowed=[0, 1, 4], model=model, validation=lambda: batch)
    policy = build("policy", "intcem", {"epochs": 2}, ctx)
    with torch.no_grad():
        mask = policy.select(model, model.encode(batch["x"]), 5)
    assert (mask.sum(1) == 3).all() and mask[:, [0, 1, 4]].all()


def test_intcem_rollouts_train_psi_without_touching_the_encoder_through_it():
    from cbm.models.intcem import IntCEM

    model, batch = toy("intcem", emb_size=3, max_horizon=3)
    assert isinstance(model, IntCEM)
    model.train()
    torch.manual_seed(0)
    losses, _, _ = model.compute_losses(batch)
    assert {"task_loss", "concept_loss", "rollout_task_loss", "policy_loss", "loss"} <= set(losses)
    losses["policy_loss"].backward(retain_graph=True)
    assert model.policy_net.net[0].weight.grad.abs().sum() > 0
    assert all(p.grad is None or not p.grad.any() for p in model.backbone.parameters())  # psi's input is detached
    model.zero_grad()
    losses["rollout_task_loss"].backward()
    assert any(p.grad is not None and p.grad.any() for p in model.backbone.parameters())
    assert model.policy_net.net[0].weight.grad is None or not model.policy_net.net[0].weight.grad.any()
