"""Stochastic CBM: the batched conditioning is the Gaussian conditional, row by row, and an
intervention moves the concepts correlated with the intervened one."""

from __future__ import annotations

import math

import pytest
import torch

from cbm.core.validation import ConfigError
from cbm.models import build_model, validate_model
from cbm.models.scbm import condition

M = 5
INFO = {"dataset": "toy", "modality": "tabular", "in_shape": [4], "concept_names": [f"c{i}" for i in range(M)], "class_names": ["a", "b"]}


def random_gaussian(b: int = 6, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    mu = torch.randn(b, M, generator=g, dtype=torch.float64) * 2
    chol = torch.randn(b, M, M, generator=g, dtype=torch.float64).tril(-1) + torch.diag_embed(torch.rand(b, M, generator=g, dtype=torch.float64) + 0.5)
    return mu, chol


def test_batched_conditioning_is_the_gaussian_conditional_of_every_row():
    mu, chol = random_gaussian()
    g = torch.Generator().manual_seed(1)
    mask = torch.rand(6, M, generator=g) > 0.5
    mask[0] = False  # nothing intervened: unchanged
    mask[1] = True  # everything intervened
    values = (torch.rand(6, M, generator=g) > 0.5).double()
    q = 0.99
    new_mu, new_chol = condition(mu, chol, mask, values, q, jitter=1e-12)
    for b in range(6):
        s, r = mask[b].nonzero()[:, 0], (~mask[b]).nonzero()[:, 0]
        sigma = chol[b] @ chol[b].T
        v = values[b, s]
        bound = torch.logit(v.clamp(1 - q, q))
        target = torch.where(v > 0.5, torch.maximum(mu[b, s], bound), torch.minimum(mu[b, s], bound))
        gain = sigma[r][:, s] @ torch.linalg.inv(sigma[s][:, s]) if len(s) else torch.zeros(len(r), 0, dtype=torch.float64)
        want_mu = mu[b].clone()
        want_mu[s] = target
        want_mu[r] = mu[b, r] + gain @ (target - mu[b, s])
        want_sigma = torch.zeros(M, M, dtype=torch.float64)
        want_sigma[r[:, None], r] = sigma[r][:, r] - gain @ sigma[s][:, r]
        torch.testing.assert_close(new_mu[b], want_mu, rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(new_chol[b] @ new_chol[b].T, want_sigma, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(new_mu[0], mu[0])


def test_an_intervention_moves_a_correlated_concept_and_not_an_independent_one():
    torch.manual_seed(0)
    model = build_model({"name": "scbm", "covariance": "global"}, INFO).eval()
    with torch.no_grad():  # concepts 0 and 1 strongly correlated (L[1,0] large), 2 independent
        model.cov_param.zero_()
        rows, cols = model.tril_rows.tolist(), model.tril_cols.tolist()
        model.cov_param[[i for i, (a, b) in enumerate(zip(rows, cols)) if (a, b) == (1, 0)][0]] = 3.0
        state = model.encode(torch.zeros(1, 4))
        mask = torch.zeros(1, M, dtype=torch.bool)
        mask[0, 0] = True
        up = model.intervene(state, mask, torch.ones(1, M))
        down = model.intervene(state, mask, torch.zeros(1, M))
    assert up.probs[0, 0] == 1.0 and down.probs[0, 0] == 0.0
    assert up.probs[0, 1] > state.probs[0, 1] + 0.2 and down.probs[0, 1] < state.probs[0, 1] - 0.2
    assert up.probs[0, 2] == pytest.approx(float(state.probs[0, 2]), abs=1e-5)
    # the moved logit: no further than to where the probability reaches the confidence
    assert float(up.extras["mu"][0, 0]) == pytest.approx(max(float(state.extras["mu"][0, 0]), math.log(0.99 / 0.01)), abs=1e-5)


def test_bad_settings_are_one_line():
    for over, msg in (({"covariance": "full"}, "model.covariance must be one of"), ({"intervention_confidence": 1.0}, "intervention_confidence must be in"),
                      ({"training": "independent"}, "a stochastic CBM trains jointly"), ({"n_samples_infer": 0}, "n_samples_train and n_samples_infer")):  # fmt: skip
        with pytest.raises(ConfigError, match=msg):
            validate_model({"name": "scbm", **over})
