"""CEM: mixing semantics, bit-exact interventions, per-sample RandInt, alignment constraint."""

from __future__ import annotations

import pytest
import torch

from cbm.core.validation import ConfigError
from cbm.models import build_model
from cbm.models.cem import CEM

NAMES = ["head_round", "body_round", "knees", "antennae", "ears_triangle", "mouth_closed", "foot_pointy"]
INFO = {"dataset": "toy", "modality": "tabular", "in_shape": [12], "concept_names": NAMES, "class_names": ["Drent", "Glorp"]}


def make(**overrides) -> CEM:
    torch.manual_seed(0)
    model = build_model({"name": "cem", **overrides}, INFO)
    assert isinstance(model, CEM)
    return model.eval()


def test_state_carries_embeddings_batch_first():
    model = make(emb_size=5)
    state = model.encode(torch.randn(4, 12))
    assert state.extras["c_pos"].shape == state.extras["c_neg"].shape == (4, 7, 5)
    assert torch.equal(state.probs, torch.sigmoid(state.logits))
    p = state.probs.unsqueeze(-1)
    expected = p * state.extras["c_pos"] + (1 - p) * state.extras["c_neg"]
    assert torch.equal(model.mixed_embeddings(state), expected)


@pytest.mark.parametrize("value, key", [(1.0, "c_pos"), (0.0, "c_neg")])
def test_full_intervention_gives_exact_embedding(value, key):
    """p = 1 (0) makes the head read the positive (negative) embedding, to the bit."""
    model = make()
    with torch.no_grad():
        state = model.encode(torch.randn(6, 12))
        new = model.intervene(state, torch.ones(6, 7, dtype=torch.bool), torch.full((6, 7), value))
        assert torch.equal(model.mixed_embeddings(new), new.extras[key])
        assert torch.equal(model.predict(new), model.head(new.extras[key].flatten(1)))


def test_partial_intervention_touches_only_masked_slices():
    model = make()
    with torch.no_grad():
        state = model.encode(torch.randn(5, 12))
        mask = torch.zeros(5, 7, dtype=torch.bool)
        mask[0, 2] = mask[3, 6] = True
        new = model.intervene(state, mask, torch.ones(5, 7))
        before, after = model.mixed_embeddings(state), model.mixed_embeddings(new)
    assert torch.equal(after[mask], new.extras["c_pos"][mask])
    assert torch.equal(after[~mask], before[~mask])
    assert torch.equal(new.intervened, mask)
    assert not state.intervened.any()  # input state untouched


def test_randint_mask_is_drawn_per_sample(monkeypatch):
    """Training-time interventions: an independent Bernoulli(p) mask per sample and concept."""
    model = make(randint_prob=0.5).train()
    masks = []
    original = model.intervene

    def spy(state, mask, values):
        masks.append(mask.clone())
        return original(state, mask, values)

    monkeypatch.setattr(model, "intervene", spy)
    batch = {"x": torch.randn(512, 12), "c": torch.ones(512, 7), "y": torch.zeros(512, dtype=torch.long)}
    model.compute_losses(batch)
    (mask,) = masks
    assert mask.shape == (512, 7)
    assert 0.4 < mask.float().mean() < 0.6
    assert len({tuple(row.tolist()) for row in mask}) > 50  # not one mask tiled across the batch
    model.eval()
    model.compute_losses(batch)  # no RandInt outside training
    assert len(masks) == 1


def test_randint_uses_annotated_values():
    """With p = 1 every concept is replaced by its label: the task logits are the positive embeddings'."""
    model = make(randint_prob=1.0).train()
    x = torch.randn(8, 12)
    state = model.encode(x)
    logits = model.task_logits_for_training({"x": x, "c": torch.ones(8, 7)}, state)
    assert torch.equal(logits, model.head(state.extras["c_pos"].flatten(1)))


def test_zero_concepts_removes_the_concept_from_the_head():
    model = make(zero_concepts=["knees"])
    k = NAMES.index("knees")
    with torch.no_grad():
        state = model.encode(torch.randn(8, 12))
        on = model.intervene(state, torch.ones(8, 7, dtype=torch.bool), torch.ones(8, 7))
        values = torch.ones(8, 7)
        values[:, k] = 0.0
        off = model.intervene(state, torch.ones(8, 7, dtype=torch.bool), values)
        assert torch.equal(model.predict(on), model.predict(off))
        assert not torch.equal(model.mixed_embeddings(on)[:, k + 1], torch.zeros_like(on.extras["c_pos"][:, 0]))
        assert torch.equal(model.mixed_embeddings(on)[:, k], torch.zeros_like(on.extras["c_pos"][:, k]))


@pytest.mark.parametrize("bad", [{"training": "sequential"}, {"emb_size": 0}, {"randint_prob": 1.5}, {"zero_concepts": ["nope"]}])
def test_bad_config_fails_with_one_line(bad):
    with pytest.raises(ConfigError) as err:
        build_model({"name": "cem", **bad}, INFO)
    assert "\n" not in str(err.value)
