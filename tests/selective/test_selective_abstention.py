"""Band semantics of the abstention rule (boundaries checked exactly with dyadic values)."""

import numpy as np
import pytest
import torch

from cbm.models.state import ConceptState
from cbm.selective import (
    abstain,
    accept,
    class_uncertainty,
    predictions,
    probability_score,
    uncertainty_threshold,
    uncertainty_to_score,
)


def in_band(p: torch.Tensor, tau: float) -> torch.Tensor:
    """The specification of binary abstention: ``p = P(y=1)`` in the closed band ``[1-tau, tau]``,
    written through ``max(p, 1-p) <= tau`` (the lower edge resolves as finely as ``1 - p``)."""
    return torch.maximum(p, 1.0 - p) <= tau


def test_binary_band_is_closed():
    # tau = 0.75: abstain iff 0.25 <= p <= 0.75 (both ends included).
    p = torch.tensor([0.25, 0.2, 0.75, 0.8, 0.5, 0.3, 0.0, 1.0])
    assert in_band(p, 0.75).tolist() == [True, False, True, False, True, True, False, False]
    # Just outside either end decides. The upper end is exact to one float32 step; at the lower
    # end the band is read through 1 - p, which float32 rounds, so we step out by 2**-20 there.
    assert not in_band(torch.tensor([np.nextafter(np.float32(0.75), np.float32(1))]), 0.75).any()
    assert not in_band(torch.tensor([0.25 - 2**-20]), 0.75).any()


def test_score_rule_matches_the_band():
    scores = torch.tensor([0.75, 0.875, 0.5, 1.0])
    assert abstain(scores, 0.75).tolist() == [True, False, True, False]
    assert accept(scores, 0.75).tolist() == [False, True, False, True]
    p = torch.rand(10_000, generator=torch.Generator().manual_seed(0))
    logits = torch.stack([torch.zeros_like(p), torch.logit(p)], dim=1)
    score = probability_score(logits)
    far = (score - 0.8).abs() > 1e-5  # float rounding aside, softmax max == max(p, 1-p)
    assert torch.equal(abstain(score, 0.8)[far], in_band(p, 0.8)[far])
    single = probability_score(torch.logit(p))  # a single-logit head gives the same scores
    torch.testing.assert_close(single, score)


def test_band_extremes():
    saturated = probability_score(torch.tensor([[0.0, 200.0], [200.0, 0.0]]))
    assert saturated.tolist() == [1.0, 1.0]
    assert abstain(saturated, 1.0).all()  # tau = 1 abstains on everything, even on saturated probabilities
    assert not abstain(torch.tensor([0.5 + 2**-20]), 0.5).any()  # tau = 0.5: only exact ties abstain
    assert abstain(torch.tensor([0.5]), 0.5).all()
    assert not in_band(torch.tensor([0.45, 0.55]), 0.4).any()  # tau < 0.5: empty band


def test_multiclass_rule():
    probs = torch.tensor([[0.5, 0.25, 0.25], [0.375, 0.375, 0.25], [0.625, 0.25, 0.125]])
    score = probability_score(probs.log())
    torch.testing.assert_close(score, torch.tensor([0.5, 0.375, 0.625]))
    assert abstain(torch.tensor([0.5, 0.375, 0.625]), 0.5).tolist() == [True, True, False]  # max prob <= tau
    assert predictions(probs.log()).tolist() == [0, 0, 0]
    assert predictions(torch.tensor([-1.0, 2.0])).tolist() == [0, 1]


def test_uncertainty_scores():
    u = torch.tensor([0.0, 1.0, 3.0])
    assert uncertainty_to_score(u).tolist() == [1.0, 0.5, 0.25]
    assert uncertainty_threshold(0.5) == 1.0 and uncertainty_threshold(0.25) == 3.0
    assert abstain(uncertainty_to_score(u), 0.5).tolist() == [False, True, True]  # accept iff u < 1
    with pytest.raises(ValueError, match="finite and >= 0"):
        uncertainty_to_score(torch.tensor([-1.0]))


def test_class_uncertainty_sources():
    probs = torch.full((2, 3), 0.5)
    st = ConceptState(logits=probs, probs=probs, extras={"class_uncertainty": torch.tensor([0.5, 2.0])})
    assert class_uncertainty(None, st).tolist() == [0.5, 2.0]
    st = ConceptState(logits=probs, probs=probs, uncertainty=torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]))
    assert class_uncertainty(None, st).tolist() == [2.0, 0.0]  # mean of the per-concept uncertainties
    with pytest.raises(ValueError, match="score=uncertainty needs class uncertainties"):
        class_uncertainty(None, ConceptState(logits=probs, probs=probs))
