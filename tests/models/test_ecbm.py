"""ECBM: energy inference, fixed interventions, propagation, determinism, soft global energy."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from cbm.core.validation import ConfigError
from cbm.models import build_model
from cbm.models.ecbm import ECBM

NAMES = ["head_round", "body_round", "knees", "antennae", "ears_triangle", "mouth_closed", "foot_pointy"]
INFO = {"dataset": "toy", "modality": "tabular", "in_shape": [12], "concept_names": NAMES, "class_names": ["Drent", "Glorp"]}


def make(**overrides) -> ECBM:
    torch.manual_seed(0)
    model = build_model({"name": "ecbm", "infer_steps": 30, **overrides}, INFO)
    assert isinstance(model, ECBM)
    return model.eval()


def all_mask(b: int) -> torch.Tensor:
    return torch.ones(b, 7, dtype=torch.bool)


def test_all_concepts_fixed_predicts_the_class_the_energy_prefers():
    model = make()
    values = (torch.rand(32, 7, generator=torch.Generator().manual_seed(1)) > 0.5).float()
    with torch.no_grad():
        state = model.encode(torch.randn(32, 12))
        new = model.intervene(state, all_mask(32), values)
        logits = model.predict(new)
        e_xy, e_cy = model.class_energies(state.extras["features"], values)
    w = model.cfg.intervene_weights
    joint = w.xy * e_xy + w.cy * e_cy
    assert torch.equal(new.probs, values)
    assert torch.allclose(logits, -joint)
    assert torch.equal(logits.argmax(1), joint.argmin(1))


def test_intervened_concepts_stay_fixed_through_inference():
    model = make(intervene_weights={"xy": 0.0, "xc": 1.0, "cy": 50.0})
    mask = torch.zeros(16, 7, dtype=torch.bool)
    mask[:, 1] = mask[::2, 4] = True
    values = torch.full((16, 7), 0.3)
    with torch.no_grad():
        state = model.encode(torch.randn(16, 12))
        new = model.intervene(state, mask, values)
        assert torch.equal(new.probs[mask], values[mask])
        assert torch.equal(new.intervened, mask)
        a, _ = model.minimise(new.extras["features"], new.logits, torch.zeros(16, 2), mask, new.probs)
    assert torch.equal(a[mask], new.logits[mask])  # masked gradients: the fixed logits never move
    assert not state.intervened.any()


def test_intervention_propagates_through_the_global_energy():
    """Re-minimisation moves the free concepts when the concept-class energy couples them, not otherwise."""
    x = torch.randn(16, 12)
    mask = torch.zeros(16, 7, dtype=torch.bool)
    mask[:, 0] = True
    deltas = {}
    for cy in (0.0, 5.0):
        weights = {"xy": 1.0, "xc": 1.0, "cy": cy}
        model = make(infer_weights={"xy": 1.0, "xc": 1.0, "cy": 0.0}, intervene_weights=weights, infer_tol=1e-2)
        with torch.no_grad():
            model.head_cy.weight.mul_(20)  # an untrained E_cy barely tells the classes apart
            state = model.encode(x)
            new = model.intervene(state, mask, 1 - state.probs.round())
        deltas[cy] = (new.probs - state.probs)[:, 1:].abs().max().item()
    assert deltas[0.0] == 0.0 and deltas[5.0] > 1e-2


def test_joint_energy_uses_the_class_normalised_global_energy():
    """In the joint energy E_cy enters as -log p(y|c): an offset that depends on c only (left free by
    the global loss, cross-entropy over y) must not pull the minimisation over c."""
    model = make()
    c = torch.rand(8, 7, generator=torch.Generator().manual_seed(3))
    y = torch.randint(0, 2, (8,), generator=torch.Generator().manual_seed(4))
    w = torch.tensor([[0.0, 0.0, 1.0]]).expand(8, 3)
    with torch.no_grad():
        h_xy, h_xc = model._hidden(torch.randn(8, model.backbone.out_dim))
        joint = model.joint_energy(h_xy, h_xc, model._global_affine(), c, F.one_hot(y, 2).float(), w)
        _, e_cy = model.class_energies(torch.zeros(8, model.backbone.out_dim), c)
    assert torch.allclose(joint, F.cross_entropy(-e_cy, y, reduction="none"), atol=1e-5)


def test_global_energy_sees_soft_concepts():
    model = make()
    c = torch.full((4, 7), 0.5, requires_grad=True)
    _, e_cy = model.class_energies(torch.randn(4, model.backbone.out_dim), c)
    (grad,) = torch.autograd.grad(e_cy.sum(), c)
    assert (grad.abs() > 0).any()
    hard = model.class_energies(torch.zeros(1, model.backbone.out_dim), torch.ones(1, 7))[1]
    almost = model.class_energies(torch.zeros(1, model.backbone.out_dim), torch.full((1, 7), 0.999))[1]
    assert not torch.equal(hard, almost)  # no threshold


def test_inference_is_deterministic_bounded_and_batch_independent():
    model = make()
    x = torch.randn(10, 12)
    with torch.no_grad():
        s1, s2 = model.encode(x), model.encode(x)
        assert torch.equal(s1.probs, s2.probs) and torch.equal(model.predict(s1), model.predict(s2))
        part = model.encode(x[3:6])
        assert torch.allclose(part.probs, s1.probs[3:6], atol=1e-5)
        assert torch.allclose(model.predict(part), model.predict(s1)[3:6], atol=1e-4)
    none = make(infer_steps=0)
    with torch.no_grad():
        state = none.encode(x)
        _, h_xc = none._hidden(state.extras["features"])
        assert torch.equal(state.logits, none.posterior_logits(h_xc))


def test_predict_from_a_minimum_changes_nothing():
    model = make(infer_steps=500, infer_tol=1e-3)
    with torch.no_grad():
        state = model.encode(torch.randn(8, 12))
        again = model._infer_state(state, state.extras["y_logits"])
    assert torch.equal(again.probs, state.probs)


def test_works_under_inference_mode():
    """Lightning evaluates under ``torch.inference_mode``; the minimisation still gets its gradients."""
    model = make()
    with torch.inference_mode():
        state = model.encode(torch.randn(4, 12))
        new = model.intervene(state, all_mask(4), torch.ones(4, 7))
        assert model.predict(new).shape == (4, 2)


def test_training_losses_are_the_three_energy_losses():
    model = make(perturb_sample_prob=0.0).train()
    batch = {"x": torch.randn(8, 12), "c": (torch.rand(8, 7) > 0.5).float(), "y": torch.randint(0, 2, (8,))}
    torch.manual_seed(0)
    losses, state, y_logits = model.compute_losses(batch)
    assert set(losses) == {"task_loss", "concept_loss", "global_loss", "loss"}
    expected = 3.0 * losses["task_loss"] + losses["concept_loss"] + losses["global_loss"]
    assert torch.allclose(losses["loss"], expected)
    assert not state.intervened.any() and y_logits.shape == (8, 2)
    e_cy = model.class_energies(state.extras["features"], batch["c"])[1]
    assert torch.allclose(losses["global_loss"], torch.nn.functional.cross_entropy(-e_cy, batch["y"]))


def test_zero_concepts_removes_the_concept_from_the_global_energy():
    model = make(zero_concepts=["knees"])
    k = NAMES.index("knees")
    c = torch.rand(5, 7)
    flipped = c.clone()
    flipped[:, k] = 1 - flipped[:, k]
    f = torch.randn(5, model.backbone.out_dim)
    assert torch.equal(model.class_energies(f, c)[1], model.class_energies(f, flipped)[1])


@pytest.mark.parametrize(
    "bad",
    [{"training": "independent"}, {"infer_weights": {"xy": 0.0, "cy": 0.0}}, {"infer_lr": 0.0}, {"perturb_sample_prob": 2.0}],
)
def test_bad_config_fails_with_one_line(bad):
    with pytest.raises(ConfigError) as err:
        build_model({"name": "ecbm", **bad}, INFO)
    assert "\n" not in str(err.value)


def test_one_bounded_descent_per_inference():
    """``predict`` reads a state that ``encode`` / ``intervene`` minimised as it is (``infer_steps``
    bounds the whole inference, not each call); an edited state is minimised again."""
    from cbm.models.base import replace_concepts

    model = make(infer_steps=5, infer_tol=0.0)  # never converged: every descent runs all 5 steps
    calls = []
    real = model.minimise
    model.minimise = lambda *a: calls.append(1) or real(*a)
    with torch.no_grad():
        state = model.encode(torch.randn(6, 12))
        model.predict(state)
        assert len(calls) == 1
        new = model.intervene(state, all_mask(6) & (torch.arange(7) < 2), torch.ones(6, 7))
        model.predict(new)
        assert len(calls) == 2
        edited = replace_concepts(state, all_mask(6) & (torch.arange(7) == 3), torch.zeros(6, 7))
        model.predict(edited)
        assert len(calls) == 3
