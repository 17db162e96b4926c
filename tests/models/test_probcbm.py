"""ProbCBM: prototype interventions, deterministic sampling, uncertainties, losses."""

from __future__ import annotations

import pytest
import torch

from cbm.core.validation import ConfigError
from cbm.models import build_model
from cbm.models.probcbm import ProbCBM

NAMES = ["head_round", "body_round", "knees", "antennae", "ears_triangle", "mouth_closed", "foot_pointy"]
INFO = {"dataset": "toy", "modality": "tabular", "in_shape": [12], "concept_names": NAMES, "class_names": ["Drent", "Glorp"]}


def make(**overrides) -> ProbCBM:
    torch.manual_seed(0)
    model = build_model({"name": "probcbm", "n_samples_train": 4, "n_samples_infer": 6, **overrides}, INFO)
    assert isinstance(model, ProbCBM)
    return model.eval()


def test_state_shapes_and_uncertainty():
    model = make(emb_size=3)
    with torch.no_grad():
        state = model.encode(torch.randn(5, 12))
    assert state.extras["mean"].shape == state.extras["std"].shape == (5, 7, 3)
    assert state.uncertainty.shape == (5, 7) and (state.uncertainty > 0).all()
    assert "class_uncertainty" not in state.extras  # computed on demand (selective prediction only)
    u = model.state_class_uncertainty(state)
    assert u.shape == (5,) and (u > 0).all() and state.extras["class_uncertainty"] is u
    assert torch.allclose(state.extras["mean"].norm(dim=-1), torch.ones(5, 7))
    assert ((state.probs > 0) & (state.probs < 1)).all()


def test_intervention_yields_the_prototype():
    """Every Monte-Carlo sample of an intervened concept is its value's prototype, exactly."""
    model = make()
    with torch.no_grad():
        state = model.encode(torch.randn(4, 12))
        mask = torch.zeros(4, 7, dtype=torch.bool)
        mask[:, :3] = True
        values = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0]).expand(4, 7)
        new = model.intervene(state, mask, values)
        samples = model.sample(new.extras["mean"], new.extras["std"], model.eps_infer.unsqueeze(0))
        neg, pos = model.concept_prototypes()
    proto = torch.where(values.bool().unsqueeze(-1), pos, neg)  # [4,7,d]
    expected = proto.unsqueeze(1).expand_as(samples)
    assert torch.equal(samples[:, :, :3], expected[:, :, :3])
    assert torch.equal(samples[:, :, 3:], model.sample(state.extras["mean"], state.extras["std"], model.eps_infer[None])[:, :, 3:])
    assert torch.equal(new.probs[mask], values[mask])
    assert (new.uncertainty[mask] == 0).all() and torch.equal(new.uncertainty[~mask], state.uncertainty[~mask])
    assert "class_uncertainty" not in new.extras  # stale after an intervention: computed on demand
    assert (model.state_class_uncertainty(new) < model.state_class_uncertainty(state)).all()
    assert torch.equal(new.extras["class_uncertainty"], model.class_uncertainty(new.extras["std"]))
    assert torch.equal(new.intervened, mask) and not state.intervened.any()


def test_predict_is_deterministic_and_batch_independent():
    model = make()
    x = torch.randn(9, 12)
    with torch.no_grad():
        state = model.encode(x)
        again = model.encode(x)
        y = model.predict(state)
        assert torch.equal(state.probs, again.probs)
        assert torch.equal(y, model.predict(state))
        assert torch.allclose(model.predict(state.index(slice(2, 5))), y[2:5], atol=1e-6)
        assert torch.allclose(model.encode(x[2:5]).probs, state.probs[2:5], atol=1e-6)


def test_inference_noise_is_fixed_by_mc_seed():
    a, b, c = make(mc_seed=1), make(mc_seed=1), make(mc_seed=2)
    assert torch.equal(a.eps_infer, b.eps_infer) and not torch.equal(a.eps_infer, c.eps_infer)
    assert "eps_infer" not in a.state_dict()  # rebuilt from the config, not checkpointed


def test_zero_samples_uses_the_mean():
    model = make(n_samples_infer=0)
    with torch.no_grad():
        state = model.encode(torch.randn(3, 12))
        assert torch.equal(model.predict(state), model.class_log_probs(state.extras["mean"].unsqueeze(1)))


def test_training_draws_fresh_noise_reproducibly():
    model = make().train()
    batch = {"x": torch.randn(16, 12), "c": (torch.rand(16, 7) > 0.5).float(), "y": torch.randint(0, 2, (16,))}
    torch.manual_seed(3)
    first, _, _ = model.compute_losses(batch)
    second, _, _ = model.compute_losses(batch)
    torch.manual_seed(3)
    replay, _, _ = model.compute_losses(batch)
    assert first["loss"] != second["loss"]
    assert first["loss"] == replay["loss"]
    assert set(first) == {"task_loss", "concept_loss", "kl_loss", "loss"}


def test_kl_term_matches_the_formula():
    model = make(kl_weight=0.5).train()
    batch = {"x": torch.randn(8, 12), "c": torch.ones(8, 7), "y": torch.ones(8, dtype=torch.long)}
    state = model.encode(batch["x"])
    mean, logvar = state.extras["mean"], 2 * state.extras["std"].log()
    kl = (-0.5 * (1 + logvar - mean**2 - logvar.exp())).sum(-1).mean()
    losses = model.extra_losses(batch, state, torch.zeros(8, 2))
    assert torch.allclose(losses["kl_loss"], 0.5 * kl)


@pytest.mark.parametrize("training, reaches_encoder", [("sequential", False), ("independent", False), ("joint", True)])
def test_training_modes_decide_whether_the_class_loss_reaches_the_encoder(training, reaches_encoder):
    model = make(training=training, train_intervention_prob=0.0).train()
    batch = {"x": torch.randn(8, 12), "c": torch.ones(8, 7), "y": torch.ones(8, dtype=torch.long)}
    state = model.encode(batch["x"])
    model.task_logits_for_training(batch, state).sum().backward()
    assert (model.mean_head.weight.grad is not None) == reaches_encoder
    assert model.class_map.weight.grad is not None


def test_zero_concepts_removes_the_concept_from_the_class_predictor():
    model = make(zero_concepts=["knees"])
    k = NAMES.index("knees")
    with torch.no_grad():
        state = model.encode(torch.randn(6, 12))
        one = model.intervene(state, torch.ones(6, 7, dtype=torch.bool), torch.ones(6, 7))
        values = torch.ones(6, 7)
        values[:, k] = 0.0
        other = model.intervene(state, torch.ones(6, 7, dtype=torch.bool), values)
    assert torch.equal(model.predict(one), model.predict(other))


@pytest.mark.parametrize("bad", [{"kl_weight": -1.0}, {"scale_init": 0.0}, {"n_samples_train": 0}, {"training": "bogus"}])
def test_bad_config_fails_with_one_line(bad):
    with pytest.raises(ConfigError) as err:
        build_model({"name": "probcbm", **bad}, INFO)
    assert "\n" not in str(err.value)


def test_concepts_start_tight_so_their_means_learn():
    """The log-variance head starts at logvar_init (sigma = exp(-2) ~ 0.14): the concept loss then
    reaches the mean head 8-10x more strongly than from sigma ~ 1, where a unit-norm mean is buried in
    noise of norm ~4 and concepts stalled (cbm/models/probcbm.py, "Initial variance")."""
    import torch.nn.functional as F

    grads = {}
    for lv in (0.0, -4.0):
        norms = []
        for seed in range(3):
            model = make(logvar_init=lv, n_samples_train=50).train()
            g = torch.Generator().manual_seed(seed)
            x, c = torch.randn(64, 12, generator=g), (torch.rand(64, 7, generator=g) > 0.5).float()
            torch.manual_seed(seed)
            state = model.encode(x)
            F.binary_cross_entropy(state.probs, c).backward()
            norms.append(float(model.mean_head.weight.grad.norm()))
            if lv == -4.0:
                assert float(state.extras["std"].detach().mean()) == pytest.approx(0.135, rel=0.1)
        grads[lv] = norms
    assert make().cfg.logvar_init == -4.0  # the default
    assert all(tight > 4 * loose for tight, loose in zip(grads[-4.0], grads[0.0])), grads


def test_warmup_epochs_train_on_the_means_without_kl():
    """``warmup_epochs``: the first epochs sample the means themselves (no noise, no KL term), so the
    means learn as a deterministic CBM's before the variances do; afterwards training samples again."""
    from types import SimpleNamespace

    model = make(warmup_epochs=2).train()
    x, c = torch.randn(8, 12), (torch.rand(8, 7) > 0.5).float()
    batch = {"x": x, "c": c, "y": torch.zeros(8, dtype=torch.long)}
    for epoch, warm in ((0, True), (1, True), (2, False)):
        model._trainer = SimpleNamespace(current_epoch=epoch)
        state = model.encode(x)
        samples, mean = state.extras["samples"], state.extras["mean"]
        assert model.warming_up() is warm
        if warm:
            assert samples.shape[1] == 1 and torch.equal(samples[:, 0], mean)
            assert model.extra_losses(batch, state, model.predict(state)) == {}
        else:
            assert samples.shape[1] == 4 and not torch.equal(samples[:, 0], mean)
            assert set(model.extra_losses(batch, state, model.predict(state))) == {"kl_loss"}
    model._trainer = None
    assert make().cfg.warmup_epochs == 0 and not make().train().warming_up()  # off by default


def test_on_demand_class_uncertainty_survives_concatenation():
    """States where only some computed the class uncertainty concatenate; it is recomputed, the same."""
    from cbm.models.state import ConceptState

    model = make()
    with torch.no_grad():
        a, b = model.encode(torch.randn(3, 12)), model.encode(torch.randn(2, 12))
        model.state_class_uncertainty(a)
        both = ConceptState.cat([a, b])
        assert "class_uncertainty" not in both.extras
        expected = torch.cat([model.class_uncertainty(a.extras["std"]), model.class_uncertainty(b.extras["std"])])
        assert torch.equal(model.state_class_uncertainty(both), expected)


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_concept_loss_is_the_bce_of_the_mc_mean_probability(train):
    """The logits form of the concept loss (what CUDA's autocast accepts) is ``F.binary_cross_entropy``
    on the MC-mean probabilities: equal in float64 to round-off, with and without missing annotations
    (soft targets included: a missing entry's target is the model's own probability)."""
    model = make().double().train(train)
    g = torch.Generator().manual_seed(4)
    x = torch.randn(6, 12, generator=g, dtype=torch.float64)
    c = (torch.rand(6, 7, generator=g) > 0.5).double()
    c[0, :3] = torch.tensor([0.3, 0.9, 0.5], dtype=torch.float64)
    observed = (torch.rand(6, 7, generator=g) > 0.3).double()
    state = model.encode(x)
    assert state.probs.dtype == torch.float64
    bce = torch.nn.functional.binary_cross_entropy(state.probs, c, reduction="none")
    torch.testing.assert_close(model.concept_loss(state, c), bce.mean(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(model.concept_loss(state, c, observed), (bce * observed).sum() / observed.sum(), rtol=1e-12, atol=1e-12)


def test_concept_loss_under_bf16_autocast_is_the_float32_loss():
    """Under bf16 autocast the loss is taken in float32 from the samples' logits: within bf16's
    rounding of the encoder (rel. 2e-2) of the float32 loss, and a float32 scalar."""
    model = make().train()
    x, c = torch.randn(8, 12, generator=torch.Generator().manual_seed(5)), (torch.rand(8, 7) > 0.5).float()
    torch.manual_seed(0)
    want = model.concept_loss(model.encode(x), c)
    torch.manual_seed(0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = model.concept_loss(model.encode(x), c)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=2e-2, atol=0)
