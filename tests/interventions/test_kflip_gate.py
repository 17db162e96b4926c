"""concept-benchmark 0.4.1's KFlip at ``k = max`` as options of the responsiveness policy
(``at_max: all``, ``inclusive: true``): the responsiveness of the whole set of requestable concepts
equals the per-subset loop, and the rows it corrects are exactly KFlip's (a numpy transcription of its
``experiments/kflip.py`` k = max path: non-intervened concepts read ``p >= 0.5``, the one subset of all
concepts, ``flip_prob >= threshold`` and a subset found)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from cbm.interventions import ResponsivenessPolicy
from cbm.interventions.responsiveness import (
    EmpiricalPrior,
    IndependentPrior,
    responsiveness_loop,
    whole_responsiveness,
)
from cbm.models import build_model
from cbm.models.state import ConceptState


def cbm(m: int, readout: str = "hard", head: str = "linear", seed: int = 0):
    info = {"dataset": "toy", "modality": "tabular", "in_shape": [4], "concept_names": [f"c{i}" for i in range(m)],
            "class_names": ["a", "b"]}  # fmt: skip
    torch.manual_seed(seed)
    over = {"concept_readout": readout, "head": {"kind": head, "hidden": 6}, "backbone": {"name": "mlp", "hidden": [4], "out_dim": 4}}
    return build_model({"name": "cbm", **over}, info).eval()


def margin_cbm(w: list[float], b: float):
    """A hard-readout CBM whose head's margin is ``w . c + b`` (class 1 iff > 0)."""
    model = cbm(len(w))
    with torch.no_grad():
        model.head.weight.copy_(torch.tensor([[0.0] * len(w), w]))
        model.head.bias.copy_(torch.tensor([0.0, b]))
    return model


def state_of(probs) -> ConceptState:
    p = torch.as_tensor(probs, dtype=torch.float32)
    return ConceptState(logits=torch.logit(p), probs=p)


def kflip_at_max(p: np.ndarray, w: np.ndarray, b: float, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """KFlip (0.4.1) with ``use_exact_k`` at ``k = m``, its logistic-regression fast path: ``(flip_prob,
    candidate)`` per row."""
    p = np.clip(p.astype(np.float64), 1e-9, 1 - 1e-9)
    base_lbl = ((p >= 0.5).astype(np.float64) @ w + b > 0).astype(int)
    assign = np.array(list(itertools.product([0.0, 1.0], repeat=p.shape[1])))  # [A, m]
    weights = np.prod(np.where(assign[None] == 1.0, p[:, None, :], 1.0 - p[:, None, :]), axis=2)  # [N, A]
    flips = ((assign @ w + b > 0).astype(int)[None, :] != base_lbl[:, None]).astype(float)
    flip_prob = (weights * flips).sum(1)
    return flip_prob, (flip_prob > 0) & (flip_prob >= threshold)


@pytest.mark.parametrize("m", [7, 12])
def test_the_gate_corrects_exactly_kflips_rows(m):
    """At ``k = max`` the policy asks for every concept of exactly the rows KFlip corrects (threshold
    0.2, ``>=``), and their responsiveness is KFlip's flip probability."""
    g = torch.Generator().manual_seed(m)
    w = (torch.randn(m, generator=g) * 3).tolist()
    b = float(-0.5 * sum(w))
    model = margin_cbm(w, b)
    n = 2000 if m == 7 else 400
    probs = torch.rand(n, m, generator=g) ** 3  # many confident calls, some near 0.5
    probs = torch.where(torch.rand(n, m, generator=g) < 0.5, probs, 1 - probs)
    state = state_of(probs)
    flip_prob, candidate = kflip_at_max(probs.numpy(), np.array(w), b, 0.2)
    assert 0.05 < candidate.mean() < 0.95 and np.abs(flip_prob - 0.2).min() > 1e-5  # a real gate, no row at the edge
    policy = ResponsivenessPolicy(0.2, inclusive=True, at_max="all")
    mask = policy.select(model, state, m)
    assert policy.last.method == "whole"
    np.testing.assert_allclose(policy.last.resp.numpy(), flip_prob, atol=1e-5)
    assert torch.equal(mask, torch.from_numpy(candidate)[:, None].expand(-1, m))
    if m == 7:  # the default asks for the most responsive subset instead (> T)
        rows = slice(0, 100)
        assert not torch.equal(ResponsivenessPolicy(0.2).select(model, state.index(rows), m), mask[rows])


def test_inclusive_keeps_rows_at_the_threshold_and_never_a_row_that_cannot_flip():
    """The label is concept 0's hard call: ``resp`` of the whole set is ``min(p0, 1 - p0)`` (0.25 exactly at
    p0 = 0.75). ``inclusive`` keeps ``resp >= T`` with ``resp > 0``; the default keeps ``resp > T``."""
    model = margin_cbm([4.0, 0.0, 0.0], -2.0)
    state = state_of([[0.75, 0.5, 0.5], [0.5, 0.25, 0.75], [0.875, 0.5, 0.5], [1.0, 0.5, 0.5], [0.25, 0.5, 0.125]])
    expected = {True: [True, True, False, False, True], False: [False, True, False, False, False]}
    for inclusive, rows in expected.items():
        policy = ResponsivenessPolicy(0.25, inclusive=inclusive, at_max="all")
        mask = policy.select(model, state, 3)
        assert policy.last.resp.tolist() == [0.25, 0.5, 0.125, 0.0, 0.25]
        assert mask.tolist() == [[r] * 3 for r in rows], inclusive
    zero = ResponsivenessPolicy(0.0, inclusive=True, at_max="all").select(model, state, 3)
    assert zero.any(1).tolist() == [True, True, True, False, True]  # resp 0: nothing to ask, as KFlip's row without a subset
    small = ResponsivenessPolicy(0.25, inclusive=True, at_max="all").select(model, state, 2)  # k < max: the best subset
    assert small.tolist()[0] == [True, False, False]


@pytest.mark.parametrize(("readout", "head"), [("hard", "linear"), ("hard", "mlp"), ("soft", "linear"), ("soft", "mlp")])
def test_whole_set_responsiveness_equals_the_loop(readout, head):
    """Every prior and head: the whole-set ``resp`` (one shared block through ``pair_logits``, chunked)
    is the per-subset loop's (``intervene`` + ``predict`` on all ``2^m`` assignments)."""
    m = 6
    g = torch.Generator().manual_seed(2)
    state = state_of(torch.rand(40, m, generator=g))
    labels = (torch.rand(300, m, generator=g) < 0.4).float()
    avail = torch.ones(40, m, dtype=torch.bool)
    for seed in range(20):  # the first random head that some answer flips
        model = cbm(m, readout, head, seed=seed)
        with torch.no_grad():
            for p in model.head.parameters():
                p.mul_(4.0)
        if float(responsiveness_loop(model, state, [tuple(range(m))])[:, 0].max()) > 0:
            break
    for prior in (IndependentPrior(), EmpiricalPrior(labels)):
        loop = responsiveness_loop(model, state, [tuple(range(m))], prior)[:, 0]
        assert float(loop.max()) > 0
        for chunk in (256.0, 0.001):
            whole = whole_responsiveness(model, state, list(range(m)), prior, avail, chunk)
            torch.testing.assert_close(whole, loop, atol=1e-6, rtol=0)
    avail[3, 2] = False  # a row where a concept was given already: not the whole set
    assert whole_responsiveness(model, state, list(range(m)), IndependentPrior(), avail, 256.0)[3] == float("-inf")


def test_at_max_is_validated():
    with pytest.raises(ValueError, match="at_max must be one of"):
        ResponsivenessPolicy(0.2, at_max="every")
