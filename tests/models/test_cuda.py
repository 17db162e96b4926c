"""The GPU path of every architecture (run by ``benchmarks/gpu_check.sh`` on a CUDA machine; skipped
without CUDA): CPU/GPU equivalence of ``encode`` / ``intervene`` / ``predict`` and of a training
step's loss and gradients, short deterministic GPU trainings that reach the CPU thresholds,
same-seed repeats that are bit-identical, data that stays on the GPU, and bf16 mixed precision."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from test_contract import (
    ARCHS,
    CONCEPT_ARCHS,
    IMAGE,
    TABULAR,
    batch_for,
    evaluate,
    inputs,
    make,
    robot_rule_data,
    short_run_model,
)

from synthetic.datamodule import SyntheticDataModule

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

#: Randomness-free training variants (the CPU and CUDA generators draw different numbers).
NO_RANDOMNESS = {"cem": {"randint_prob": 0.0}, "ecbm": {"dropout": 0.0}, "probcbm": {"train_intervention_prob": 0.0}}


@pytest.fixture(autouse=True)
def exact_fp32():
    """Compare CPU and GPU in true fp32: cuDNN convolutions default to TF32 on Ampere and later."""
    old = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = old


def to(batch: dict[str, torch.Tensor], device: str, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """``batch`` on ``device``; its floating tensors also in ``dtype`` when given (labels stay long)."""
    return {k: v.to(device, dtype) if dtype is not None and v.is_floating_point() else v.to(device) for k, v in batch.items()}


def training_step(
    name: str, info: dict, device: str, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, dict[str, torch.Tensor | None]]:
    """An eval-mode (BatchNorm frozen, no dropout, no training draws) loss + backward of a fresh
    ``make(name, info)`` on ``device`` in ``dtype``: the loss and every parameter's gradient, on the
    CPU in float32 (``None`` where no gradient reaches a parameter in this mode)."""
    model = make(name, info, **NO_RANDOMNESS.get(name, {})).eval().to(device, dtype)
    loss = model.compute_losses(to(batch_for(info), device, dtype))[0]["loss"]
    loss.backward()
    grads = {n: None if p.grad is None else p.grad.detach().float().cpu() for n, p in model.named_parameters()}
    return loss.detach().float().cpu(), grads


def assert_training_steps_match(name: str, info: dict, device: str, dtype: torch.dtype = torch.float32) -> None:
    """The float32 CPU step and the step on ``device`` in ``dtype`` give the same loss and the same
    gradients; a parameter without a gradient must have none on both sides (IntCEM's policy ``psi``
    learns in the rollout, which an eval-mode step does not run)."""
    loss, grads = training_step(name, info, "cpu")
    loss_dev, grads_dev = training_step(name, info, device, dtype)
    torch.testing.assert_close(loss_dev, loss, atol=1e-4, rtol=1e-4)
    assert grads_dev.keys() == grads.keys()
    for pname, g in grads.items():
        g_dev = grads_dev[pname]
        assert (g is None) == (g_dev is None), f"{name}: gradient of {pname} on one side only"
        if g is not None:
            torch.testing.assert_close(g_dev, g, atol=1e-4, rtol=1e-3, msg=pname)


@pytest.mark.parametrize("info", [TABULAR, IMAGE], ids=["tabular", "image"])
@pytest.mark.parametrize("name", ARCHS)
def test_encode_intervene_predict_match_cpu(name, info):
    model = make(name, info).eval()
    x = inputs(info)
    with torch.no_grad():
        state, y = model(x)
        gpu = make(name, info).eval().cuda()
        state_gpu, y_gpu = gpu(x.cuda())
        assert state_gpu.probs.device.type == "cuda" and y_gpu.device.type == "cuda"
        torch.testing.assert_close(y_gpu.cpu(), y, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(state_gpu.probs.cpu(), state.probs, atol=1e-4, rtol=1e-4)
        if model.has_concepts:
            g = torch.Generator().manual_seed(3)
            mask = torch.rand(state.probs.shape, generator=g) > 0.5
            values = (torch.rand(state.probs.shape, generator=g) > 0.5).float()
            y_int = model.predict(model.intervene(state, mask, values))
            y_int_gpu = gpu.predict(gpu.intervene(state_gpu, mask.cuda(), values.cuda()))
            assert y_int_gpu.device.type == "cuda"
            torch.testing.assert_close(y_int_gpu.cpu(), y_int, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("info", [TABULAR, IMAGE], ids=["tabular", "image"])
@pytest.mark.parametrize("name", ARCHS)
def test_training_step_loss_and_gradients_match_cpu(name, info):
    """One loss + backward on each device (BatchNorm in eval mode, no random draws): same numbers.
    The same comparison runs on the CPU alone in tests/models/test_device_paths.py."""
    assert_training_steps_match(name, info, "cuda")


@pytest.mark.parametrize("name", ARCHS)
def test_training_mode_step_runs_deterministically_on_gpu(name):
    """A train-mode step with every random draw (RandInt, MC samples, dropout) under
    ``torch.use_deterministic_algorithms(True)``: finite gradients on every parameter."""
    torch.use_deterministic_algorithms(True)
    try:
        model = make(name, IMAGE).train().cuda()
        model.compute_losses(to(batch_for(IMAGE), "cuda"))[0]["loss"].backward()
    finally:
        torch.use_deterministic_algorithms(False)
    for pname, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), pname


def gpu_fit(model, dm: SyntheticDataModule, epochs: int, precision: str = "32-true") -> L.Trainer:
    trainer = L.Trainer(
        max_epochs=epochs, accelerator="gpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0, deterministic=True,
        precision=precision, use_distributed_sampler=False,
    )  # fmt: skip
    trainer.fit(model, dm)
    return trainer


@pytest.mark.parametrize("name", ARCHS)
def test_short_gpu_run_reaches_the_cpu_thresholds(name):
    """tests/models/test_contract.py::test_short_run_beats_majority_and_true_interventions_reach_99 on the GPU."""
    data = robot_rule_data()
    L.seed_everything(0, verbose=False)
    dm = SyntheticDataModule(lambda: data, batch_size=100)
    model = short_run_model(name)  # the CPU test's model and optimiser, nothing else
    gpu_fit(model, dm, epochs=12)
    assert dm.split("train").tensors["x"].device.type == "cuda"  # the data stayed on the GPU
    model.cuda()
    majority, k0, accs = evaluate(model, dm)
    assert k0 > majority + 0.05, (name, k0, majority)
    if model.has_concepts:
        assert accs[0] == pytest.approx(k0)
        assert accs[model.n_concepts] >= 0.99, (name, accs)


@pytest.mark.parametrize("name", ARCHS)
def test_same_seed_gpu_runs_are_identical(name):
    """Deterministic kernels on robot images at 40 px (the CNN's 5x5 map is pooled to 4x4 by the
    averaging-matrix path, the case that used to fail): two runs, bit-identical weights."""
    robot = pytest.importorskip("synthetic.robot")
    from synthetic.registry import data_info

    data_cfg = robot.RobotConfig(image_size=40, n_train=400, n_calib=0, n_test=100)
    data = robot.load(data_cfg)

    def weights() -> dict[str, torch.Tensor]:
        L.seed_everything(0, verbose=False)
        model = make(name, data_info(data, data_cfg))
        gpu_fit(model, SyntheticDataModule(lambda: data, batch_size=64), epochs=2)
        return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}

    a, b = weights(), weights()
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


@pytest.mark.parametrize("name", CONCEPT_ARCHS)
def test_bf16_mixed_trains_on_gpu(name):
    data = robot_rule_data()
    L.seed_everything(0, verbose=False)
    dm = SyntheticDataModule(lambda: data, batch_size=100)
    model = short_run_model(name)
    gpu_fit(model, dm, epochs=12, precision="bf16-mixed")
    model.cuda()
    majority, k0, accs = evaluate(model, dm)
    assert k0 > majority + 0.05 and accs[model.n_concepts] >= 0.98, (name, k0, accs)
