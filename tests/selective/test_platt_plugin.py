"""concept-benchmark 0.4.1's abstention protocol (cbm-automate platt=true method=plugin): Platt
scaling fitted on the calibration split, then the plug-in threshold (the widest coverage whose
calibration selective accuracy reaches the target, the threshold just below the last score kept),
each on a toy whose answer is known in closed form, and the threshold against 0.4.1's own rule."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from cbm.selective.calibration import TargetUnreachable, calibrate
from cbm.selective.platt import Platt, fit_platt, logit


def test_platt_interpolates_two_probability_levels():
    """Two distinct probabilities with empirical frequencies f1, f2: two parameters fit them exactly,
    a = (logit f1 - logit f2) / (logit p1 - logit p2), b = logit f1 - a logit p1 (C = 1e6: no shrinkage)."""
    p = np.array([0.8] * 100 + [0.3] * 100)
    y = np.array([1] * 90 + [0] * 10 + [1] * 20 + [0] * 80)  # f1 = 0.9, f2 = 0.2
    fit = fit_platt(p, y)
    lf1, lf2, lp1, lp2 = (math.log(v / (1 - v)) for v in (0.9, 0.2, 0.8, 0.3))
    a = (lf1 - lf2) / (lp1 - lp2)
    assert fit.a == pytest.approx(a, rel=1e-4) and fit.b == pytest.approx(lf1 - a * lp1, rel=1e-4, abs=1e-4)
    np.testing.assert_allclose(fit(np.array([0.8, 0.3])), [0.9, 0.2], atol=1e-4)


def test_platt_is_the_identity_on_one_class_and_clips_like_the_reference():
    assert fit_platt(np.array([0.2, 0.9]), np.array([1, 1])) == Platt(n=2)
    np.testing.assert_allclose(logit(np.array([0.0, 1.0])), [math.log(1e-6 / (1 - 1e-6)), math.log((1 - 1e-6) / 1e-6)])
    fit = Platt(a=2.0, b=-1.0)
    logits = torch.tensor([[0.0, 1.0], [2.0, -1.0]], dtype=torch.float32)
    p = torch.softmax(logits.double(), 1)[:, 1].numpy()
    np.testing.assert_allclose(torch.softmax(fit.logits(logits), 1)[:, 1].numpy(), fit(p), rtol=1e-12)
    assert fit.logits(logits).dtype == torch.float64


def reference_threshold(y, p, target):
    """0.4.1's abstention_threshold (concept_benchmark/evaluation/metrics.py), transcribed: abstain on min(p, 1-p) >= t."""
    m = np.minimum(p, 1 - p)
    cand = np.unique(np.concatenate(([0.0], m)))
    cand = np.sort(cand[(cand >= 0) & (cand <= 0.5)])
    for t in cand[::-1]:
        keep = m <= t
        if keep.any() and ((p[keep] >= 0.5).astype(int) == y[keep]).mean() >= target:
            dropped = cand[cand > t]
            return float(t) + min(1e-6, 0.5 * ((float(dropped.min()) if dropped.size else 0.5) - float(t)))
    return None


def test_plugin_threshold_on_a_toy():
    scores = np.array([0.99, 0.95, 0.9, 0.8, 0.7])
    correct = np.array([True, True, True, False, True])
    cal = calibrate(scores, correct, 0.9, method="plugin")  # the top three are right, four would be 75%
    assert cal.method == "plugin" and cal.n_accepted == 3 and cal.tau == pytest.approx(0.9 - 1e-6)
    assert calibrate(scores, correct, 0.75, method="plugin").tau == pytest.approx(0.7 - 1e-6)  # all kept (4/5)
    tight = calibrate(np.array([0.9, 0.9 - 1e-7, 0.6]), np.array([True, False, True]), 0.9, method="plugin")
    assert tight.tau == pytest.approx(0.9 - 0.5e-7, abs=1e-12)  # half the gap to the next score when it is under 2e-6
    with pytest.raises(TargetUnreachable, match="plugin calibration"):
        calibrate(scores, ~correct, 0.9, method="plugin")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_plugin_keeps_what_the_reference_keeps(seed):
    rng = np.random.default_rng(seed)
    p = np.round(rng.random(300), 3)  # ties, as Platt-scaled probabilities have
    y = (rng.random(300) < p).astype(int)
    pred = (p >= 0.5).astype(int)
    score = np.maximum(p, 1 - p)
    cal = calibrate(score, pred == y, 0.8, method="plugin")
    t = reference_threshold(y, p, 0.8)
    test = np.round(rng.random(2000), 4)
    np.testing.assert_array_equal(np.maximum(test, 1 - test) > cal.tau, np.minimum(test, 1 - test) < t)
