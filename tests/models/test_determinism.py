"""Deterministic on every device, checked on the CPU: every aten op a training step (forward +
backward) and an evaluation (encode, intervene, predict) of each architecture dispatches, on
every encoder, is recorded and compared with the ops that have no deterministic CUDA kernel
(``torch.use_deterministic_algorithms`` raises on them there). Also bf16 mixed precision for
every architecture on the CPU."""

from __future__ import annotations

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from test_contract import (
    ARCHS,
    CONCEPT_ARCHS,
    NAMES,
    TABULAR,
    evaluate,
    make,
    robot_rule_data,
    short_run_model,
)
from torch.utils._python_dispatch import TorchDispatchMode

from cbm.models.pooling import AdaptiveAvgPool2d, adaptive_avg_pool2d
from synthetic.datamodule import SyntheticDataModule

#: aten ops that raise under ``use_deterministic_algorithms(True)`` on CUDA (torch 2.x docs of
#: ``torch.use_deterministic_algorithms``: the list of ops that "will throw a RuntimeError").
NONDETERMINISTIC_ON_CUDA = {
    "_adaptive_avg_pool2d_backward", "_adaptive_avg_pool3d_backward", "adaptive_max_pool2d_backward",
    "avg_pool3d_backward", "fractional_max_pool2d_backward", "fractional_max_pool3d_backward",
    "max_unpool2d", "max_unpool3d", "upsample_linear1d_backward", "upsample_bilinear2d_backward",
    "upsample_bicubic2d_backward", "upsample_trilinear3d_backward", "_upsample_bilinear2d_aa_backward",
    "_upsample_bicubic2d_aa_backward", "reflection_pad1d_backward", "reflection_pad2d_backward",
    "reflection_pad3d_backward", "nll_loss2d_forward", "nll_loss2d_backward", "_ctc_loss_backward",
    "_embedding_bag_backward", "_embedding_bag_dense_backward", "put_", "put", "histc", "bincount",
    "median", "nanmedian", "grid_sampler_2d_backward", "grid_sampler_3d_backward",
}  # fmt: skip


class OpRecorder(TorchDispatchMode):
    """Records the name of every aten op dispatched (forward and autograd backward)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in ("scatter_reduce", "scatter_reduce_") and "prod" in map(str, [*args, *(kwargs or {}).values()]):
            name += "(prod)"
            NONDETERMINISTIC_ON_CUDA.add(name)
        self.ops.add(name)
        return func(*args, **(kwargs or {}))


def test_recorder_catches_torch_adaptive_pooling():
    """The check can fail: torch's own adaptive pooling (what the CNN used before) is caught."""
    x = torch.rand(2, 3, 10, 10, requires_grad=True)
    with OpRecorder() as rec:
        torch.nn.AdaptiveAvgPool2d(4)(x).sum().backward()
    assert rec.ops & NONDETERMINISTIC_ON_CUDA == {"_adaptive_avg_pool2d_backward"}


@pytest.mark.parametrize("size", [(32, 4), (10, 4), (7, 3), (5, 4), (9, (3, 2)), (224, 1), (4, 6)])
def test_deterministic_pooling_equals_torch(size):
    side, out = size
    x = torch.randn(3, 5, side, side + 1, dtype=torch.float64, requires_grad=True)
    ours, ref = adaptive_avg_pool2d(x, out), F.adaptive_avg_pool2d(x, out)
    torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-12)
    g = torch.randn_like(ref)
    (ga,) = torch.autograd.grad(ours, x, g)
    (gb,) = torch.autograd.grad(ref, x, g)
    torch.testing.assert_close(ga, gb, rtol=1e-12, atol=1e-12)
    assert "output_size" in repr(AdaptiveAvgPool2d(out))


def encoders() -> dict[str, tuple[dict, dict, dict[str, torch.Tensor]]]:
    """``name -> (data info, backbone overrides, extra batch tensors)`` covering every backbone."""
    from synthetic.sudoku.render import image_size

    sudoku_side = image_size(6)
    g = torch.Generator().manual_seed(0)
    return {
        "tabular-mlp": (TABULAR, {}, {}),
        "image-cnn-20px": ({**TABULAR, "modality": "image", "in_shape": [3, 20, 20]}, {}, {}),  # 5x5 -> 4x4 pooling
        "image-resnet18": ({**TABULAR, "modality": "image", "in_shape": [3, 32, 32]}, {"name": "resnet18"}, {}),  # needs torchvision
        "text": ({**TABULAR, "modality": "text", "in_shape": [12], "vocab_size": 30}, {"name": "text_bag"}, {}),
        "sudoku-cells": (
            {"dataset": "sudoku", "modality": "image", "in_shape": [3, sudoku_side, sudoku_side],
             "concept_names": [f"g{i}" for i in range(27)], "class_names": ["invalid", "valid"]},
            {"name": "sudoku_cells", "channels": [8], "hidden": [16], "aux_weight": 1.0},
            {"board": torch.randint(1, 10, (4, 9, 9), generator=g)},
        ),
    }  # fmt: skip


def batch(info: dict, extra: dict[str, torch.Tensor], b: int = 4) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    if info["modality"] == "text":
        x = torch.randint(0, info["vocab_size"], (b, *info["in_shape"]), generator=g)
    else:
        x = torch.rand(b, *info["in_shape"], generator=g)
    m = len(info["concept_names"])
    return {"x": x, "c": (torch.rand(b, m, generator=g) > 0.5).float(), "y": torch.randint(0, 2, (b,), generator=g), **extra}


@pytest.mark.parametrize("encoder", list(encoders()))
@pytest.mark.parametrize("name", ARCHS)
def test_no_op_without_a_deterministic_cuda_kernel(name, encoder):
    info, backbone, extra = encoders()[encoder]
    if backbone.get("name") == "resnet18":
        pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = make(name, info, backbone={"channels": [8, 16], "hidden": [32], "out_dim": 32, **backbone})
    b = batch(info, extra)
    with OpRecorder() as rec:
        model.train()
        model.compute_losses(b)[0]["loss"].backward()
        model.eval()
        with torch.no_grad():
            state = model.encode(b["x"])
            if model.has_concepts:
                mask = torch.zeros_like(state.probs, dtype=torch.bool)
                mask[:, 0] = True
                state = model.intervene(state, mask, torch.ones_like(state.probs))
            model.predict(state)
    assert "convolution_backward" in rec.ops or encoder in ("tabular-mlp", "sudoku-cells")  # the recorder saw backward
    assert not rec.ops & NONDETERMINISTIC_ON_CUDA, f"{name}/{encoder}: {sorted(rec.ops & NONDETERMINISTIC_ON_CUDA)}"


@pytest.mark.parametrize("name", CONCEPT_ARCHS)
def test_bf16_mixed_precision_trains_every_architecture_on_cpu(name, one_thread):
    """The fp32 short-run test's data and thresholds (test_contract.py), under bf16 autocast."""
    data = robot_rule_data()
    L.seed_everything(0, verbose=False)
    dm = SyntheticDataModule(lambda: data, batch_size=100)
    model = short_run_model(name)
    trainer = L.Trainer(
        max_epochs=12, accelerator="cpu", precision="bf16-mixed", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0, deterministic=True,
    )  # fmt: skip
    trainer.fit(model, dm)
    majority, k0, accs = evaluate(model, dm)
    assert k0 > majority + 0.05, (name, k0, majority)
    assert accs[len(NAMES)] >= 0.99, (name, accs)
