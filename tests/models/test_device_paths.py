"""The GPU tests' code paths, run on the CPU (issue 45: 7 of tests/models/test_cuda.py's 132 failed
on an H200, none for a device reason):

* test_cuda.py's training-step comparison with both sides on the CPU, the second in float64: an
  eval-mode loss + backward of every architecture (SCBM raised ``KeyError: 'eta'`` there; IntCEM's
  policy has no gradient in that mode on either device and the comparison dereferenced it);
* an eval-mode loss draws no random numbers (SCBM drew its training interventions there, which the
  CPU and CUDA generators draw differently);
* no op that CUDA's autocast refuses (``binary_cross_entropy``: ProbCBM's concept loss) in a bf16
  autocast training step of any architecture.
"""

from __future__ import annotations

import pytest
import torch
from test_contract import ARCHS, IMAGE, TABULAR, batch_for, make
from test_cuda import assert_training_steps_match
from test_determinism import OpRecorder

#: aten ops CUDA's autocast refuses ("unsafe to autocast"; torch's autocast_mode.cpp, the ``banned``
#: list for CUDA). The CPU's autocast runs them, so the CPU tests record them instead.
UNSAFE_TO_AUTOCAST_ON_CUDA = {"binary_cross_entropy"}


@pytest.mark.parametrize("info", [TABULAR, IMAGE], ids=["tabular", "image"])
@pytest.mark.parametrize("name", ARCHS)
def test_training_step_comparison_on_cpu_in_float64(name, info, one_thread):
    """test_cuda.py's ``test_training_step_loss_and_gradients_match_cpu`` with the CPU in float64 as
    the second device: the same eval-mode step, the same loss, the same gradients (and the same
    parameters without one)."""
    assert_training_steps_match(name, info, "cpu", torch.float64)


@pytest.mark.parametrize("name", ARCHS)
def test_eval_mode_losses_draw_no_random_numbers(name):
    """The comparison above needs an eval-mode step free of random draws, else CPU and CUDA, whose
    generators differ, compare different losses: the global generator is where it was, and a second
    call gives the same loss bit for bit."""
    model = make(name, TABULAR).eval()
    batch = batch_for(TABULAR)
    torch.manual_seed(11)
    before = torch.get_rng_state()
    first = model.compute_losses(batch)[0]["loss"]
    assert torch.equal(torch.get_rng_state(), before), f"{name}: an eval-mode loss drew random numbers"
    torch.manual_seed(12)
    assert torch.equal(model.compute_losses(batch)[0]["loss"], first)


def test_intcem_policy_learns_in_training_mode_only():
    """Why IntCEM's ``psi`` has no gradient in the comparison: it learns from the rollout, which runs
    in training mode (and reaches it there)."""
    for train in (False, True):
        model = make("intcem", TABULAR).train(train)
        model.compute_losses(batch_for(TABULAR))[0]["loss"].backward()
        grads = [p.grad for p in model.policy_net.parameters()]
        assert all((g is not None) == train for g in grads), train


@pytest.mark.parametrize("name", ARCHS)
def test_bf16_autocast_step_has_no_op_cuda_refuses(name):
    """A training step under bf16 autocast: every op CUDA's autocast would run (ProbCBM's concept loss
    was ``binary_cross_entropy`` on probabilities: "unsafe to autocast" on CUDA); finite losses and
    gradients."""
    model = make(name, TABULAR).train()
    with OpRecorder() as rec, torch.autocast("cpu", dtype=torch.bfloat16):
        losses = model.compute_losses(batch_for(TABULAR))[0]
        losses["loss"].backward()
    assert not rec.ops & UNSAFE_TO_AUTOCAST_ON_CUDA, f"{name}: {sorted(rec.ops & UNSAFE_TO_AUTOCAST_ON_CUDA)}"
    assert all(torch.isfinite(v) for v in losses.values())
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_recorder_sees_binary_cross_entropy_under_cpu_autocast():
    """The check can fail: the CPU's autocast runs ``binary_cross_entropy`` and the recorder sees it."""
    p = torch.rand(4, 3, requires_grad=True)
    with OpRecorder() as rec, torch.autocast("cpu", dtype=torch.bfloat16):
        torch.nn.functional.binary_cross_entropy(p, torch.ones(4, 3)).backward()
    assert rec.ops & UNSAFE_TO_AUTOCAST_ON_CUDA == {"binary_cross_entropy"}
