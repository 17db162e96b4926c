"""CooP, gradient and global-order policies: equivalences where the math gives them, on the toy
model (``x`` = concept logits, a head over the probabilities) and on the built-in architectures."""

from __future__ import annotations

import math

import pytest
import torch
from intervention_toys import ToyModel
from torch import nn

from cbm.core.validation import ConfigError
from cbm.interventions import registry
from cbm.interventions.policies.coop import CooPPolicy, expected_change
from cbm.interventions.policies.global_order import GlobalOrderPolicy
from cbm.interventions.policies.gradient import GradientPolicy, concept_gradient
from cbm.interventions.policies.learned import LearnedPolicy
from cbm.interventions.policies.uncertainty import UncertaintyPolicy
from cbm.interventions.registry import BuildContext
from cbm.models import build_model

M, C = 6, 3


def linear_toy(seed: int = 0, classes: int = C) -> ToyModel:
    torch.manual_seed(seed)
    head = nn.Linear(M, classes)
    with torch.no_grad():
        head.weight.normal_(0, 2.0)
    return ToyModel(head, M, classes)


def logits_batch(n: int = 64, seed: int = 1) -> torch.Tensor:
    return torch.randn(n, M, generator=torch.Generator().manual_seed(seed)) * 2.0


def masks(policy, model, state, ks=range(1, M + 1)) -> list[torch.Tensor]:
    return [policy.select(model, state, k) for k in ks]


# ------------------------------------------------------------------------------------------ CooP
def test_coop_with_only_the_entropy_weight_is_the_entropy_order():
    model = linear_toy()
    state = model.encode(logits_batch())
    coop = CooPPolicy(entropy_weight=1.0, importance_weight=0.0, cost_weight=0.0)
    for a, b in zip(masks(coop, model, state), masks(UncertaintyPolicy("probs"), model, state)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("classes", [2, C])
def test_coop_importance_is_the_expected_change_of_the_predicted_class_probability(classes):
    model = linear_toy(classes=classes)
    state = model.encode(logits_batch())
    got = expected_change(model, state)
    now = torch.softmax(model.predict(state), 1)
    pred = now.argmax(1)
    want = torch.zeros_like(got)
    for i in range(M):  # brute force: intervene on concept i with each value, one call each
        mask = torch.zeros_like(state.probs, dtype=torch.bool)
        mask[:, i] = True
        moved = [torch.softmax(model.predict(model.intervene(state, mask, torch.full_like(state.probs, float(v)))), 1) for v in (0, 1)]
        p = state.probs[:, i]
        expect = (1 - p) * moved[0].gather(1, pred[:, None])[:, 0] + p * moved[1].gather(1, pred[:, None])[:, 0]
        want[:, i] = (expect - now.gather(1, pred[:, None])[:, 0]).abs()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_a_concept_the_model_is_certain_of_has_no_importance_even_with_two_classes():
    """The expectation weighs each value by its probability: a concept predicted exactly 1 moves
    nothing (summing both values' probabilities unweighted, as the reference's binary branch does,
    would give it |p(ŷ|c=0) + p(ŷ|c=1) - p(ŷ)| > 0)."""
    model = linear_toy(classes=2)
    x = logits_batch(8)
    x[:, 2] = 1e4  # sigmoid -> exactly 1.0 in float32
    state = model.encode(x)
    assert (state.probs[:, 2] == 1.0).all()
    assert (expected_change(model, state)[:, 2] == 0).all()


def test_coop_costs_push_a_concept_back_and_are_checked():
    model = linear_toy()
    state = model.encode(logits_batch())
    free = CooPPolicy().scores(model, state)
    costs = [0.0] * M
    costs[0] = 10.0
    priced = CooPPolicy(costs=costs).scores(model, state)
    torch.testing.assert_close(priced[:, 0], free[:, 0] - 10.0)
    assert not CooPPolicy(costs=costs).select(model, state, M - 1)[:, 0].any()
    ctx = BuildContext(concept_names=tuple(f"c{i}" for i in range(M)))
    with pytest.raises(ValueError, match=r"policy.coop.costs: unknown concept\(s\) \['nope'\]"):
        registry.build("policy", "coop", {"costs": {"nope": 1.0}}, ctx)
    with pytest.raises(ConfigError, match=r"policy.coop: costs.c0 must be a finite number > 0, got -1.0"):
        registry.validate("policy", "coop", {"costs": {"c0": -1.0}})
    # the same spec as costs.concepts: globs and rest
    built = registry.build("policy", "coop", {"costs": {"c*": 3.0, "c0": 2.0}}, ctx)
    assert built.costs == [2.0] + [3.0] * (M - 1)


# -------------------------------------------------------------------------------------- gradient
@pytest.mark.parametrize("target", ["prob", "logit"])
def test_gradient_policy_is_the_analytic_gradient_on_a_linear_head(target):
    model = linear_toy()
    state = model.encode(logits_batch())
    got = concept_gradient(model, state, target)
    w = model.head.weight  # [C, m]
    s = torch.softmax(model.predict(state), 1)
    pred = s.argmax(1)
    if target == "logit":
        want = w[pred]
    else:  # d s_ŷ / d p = s_ŷ (W[ŷ] - sum_c s_c W[c])
        want = s.gather(1, pred[:, None]) * (w[pred] - s @ w)
    torch.testing.assert_close(got, want.detach(), rtol=1e-5, atol=1e-6)
    order = GradientPolicy(target).select(model, state, 2)
    assert torch.equal(order, torch.zeros_like(order).scatter_(1, want.abs().topk(2, 1).indices, True))


@pytest.mark.parametrize("name", ["cbm", "cem", "probcbm", "ecbm", "hybrid_cbm", "scbm", "intcem", "dcr"])
def test_every_policy_selects_k_concepts_on_every_architecture(name):
    info = {"dataset": "toy", "modality": "tabular", "in_shape": [10], "concept_names": [f"c{i}" for i in range(M)], "class_names": ["a", "b"]}
    fast = {"probcbm": {"n_samples_train": 4, "n_samples_infer": 4}, "ecbm": {"infer_steps": 20}}.get(name, {})
    torch.manual_seed(0)
    model = build_model({"name": name, "training": "joint" if name != "probcbm" else "sequential", **fast}, info).eval()
    x = torch.randn(5, 10)
    batch = {"x": x, "c": (torch.rand(5, M) > 0.5).float(), "y": torch.randint(0, 2, (5,))}
    with torch.no_grad():
        state = model.encode(x)
    order = GlobalOrderPolicy()
    order.prepare(model, batch)
    learned = LearnedPolicy(LearnedPolicy.Config(epochs=2))
    learned.prepare(model, batch)
    for policy in (CooPPolicy(), GradientPolicy(), order, learned):
        for k in (1, 3):
            mask = policy.select(model, state, k)
            assert mask.shape == (5, M) and (mask.sum(1) == k).all(), (name, type(policy).__name__)


# ---------------------------------------------------------------------------------- global order
def rule_toy() -> tuple[ToyModel, dict]:
    """A head whose label is concept 1 once concept 1 is known (module docstring of the test)."""
    head = nn.Linear(M, 2)
    with torch.no_grad():
        head.weight.zero_()
        head.bias.zero_()
        head.weight[1, 1], head.weight[1, 3], head.bias[1] = 6.0, -3.0, -1.0  # margin 6 c1 - 3 c3 - 1
    g = torch.Generator().manual_seed(0)
    c = (torch.rand(400, M, generator=g) > 0.5).float()
    y = (6 * c[:, 1] - 3 * c[:, 3] - 1 > 0).long()  # = c1
    return ToyModel(head, M, 2), {"x": torch.zeros(400, M), "c": c, "y": y}  # every concept predicted 0.5


def test_global_order_learns_the_concept_that_decides_the_label_first():
    model, val = rule_toy()
    pol = GlobalOrderPolicy(batch_size=64)
    pol.prepare(model, val)
    assert pol.order[0] == 1 and sorted(pol.order) == list(range(M))
    state = model.encode(torch.zeros(5, M))
    first = pol.select(model, state, 1)
    assert first[:, 1].all() and first.sum() == 5
    asked = model.intervene(state, first, torch.ones_like(state.probs))  # concept 1 answered: the next one in the order
    second = pol.select(model, asked, 1)
    assert second[:, pol.order[1]].all() and second.sum() == 5
    restricted = GlobalOrderPolicy(allowed=[0, 2, 3])
    restricted.prepare(model, val)
    assert sorted(restricted.order) == [0, 2, 3] and not restricted.select(model, state, 3)[:, 1].any()
    with pytest.raises(ValueError, match=r"call prepare\(model, validation_batch\) first"):
        GlobalOrderPolicy().select(model, state, 1)


def test_the_registry_prepares_what_learns_from_validation_data():
    model, val = rule_toy()
    ctx = BuildContext(concept_names=tuple(f"c{i}" for i in range(M)), model=model, validation=lambda: val)
    assert registry.build("policy", "global_order", None, ctx).order[0] == 1
    with pytest.raises(ConfigError, match="policy 'global_order' learns from validation data"):
        registry.build("policy", "global_order", None, BuildContext(model=model))
    assert registry.build("policy", "global_order", None, BuildContext()).order is None  # the Python API prepares itself
    assert {"coop", "gradient", "global_order"} <= set(registry.names("policy"))


def test_entropy_is_in_bits():
    model = linear_toy()
    state = model.encode(torch.zeros(2, M))  # p = 0.5: one bit
    assert CooPPolicy(importance_weight=0.0).scores(model, state) == pytest.approx(torch.ones(2, M), abs=1e-6)
    assert math.isclose(float(CooPPolicy(importance_weight=0.0).scores(model, model.encode(torch.full((1, M), 50.0))).max()), 0.0, abs_tol=1e-5)


def test_global_order_learns_on_an_image_validation_split_as_the_commands_serve_it():
    from synthetic.datamodule import SyntheticDataModule
    from synthetic.registry import data_config, data_info, load_data

    cfg = data_config({"name": "robot", "n_train": 60, "n_calib": 10, "n_test": 10, "image_size": 32})
    data = load_data(cfg, None)
    dm = SyntheticDataModule(lambda: data, 16)
    torch.manual_seed(0)
    model = build_model({"name": "cbm", "backbone": {"channels": [4, 8], "hidden": [16], "out_dim": 16}}, data_info(data, cfg)).eval()
    ctx = BuildContext(concept_names=tuple(data.concept_names), model=model, validation=lambda: dm.whole("val"))
    assert sorted(registry.build("policy", "global_order", None, ctx).order) == list(range(len(data.concept_names)))
