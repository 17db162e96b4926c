"""Adaptive average pooling with a deterministic backward pass on every device.

``torch.nn.AdaptiveAvgPool2d`` has no deterministic CUDA backward: with
``trainer.deterministic: true`` (our default) its first backward raises
``adaptive_avg_pool2d_backward_cuda does not have a deterministic implementation``.
The same windows (``[floor(i H / g), ceil((i + 1) H / g))``, PyTorch's definition) are
computed here from plain tensor ops whose backward is deterministic:

* output size == input size: the identity (the default robot CNN at 32 px);
* the size divides the input: a reshape and a mean (non-overlapping equal windows);
* otherwise: two small averaging matrices, ``out = P_h x P_w^T`` (a matmul, deterministic).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def pooling_matrix(n_in: int, n_out: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """``[n_out, n_in]`` row-stochastic matrix of PyTorch's adaptive average windows."""
    i = torch.arange(n_out, device=device)
    start = (i * n_in) // n_out
    end = -((-(i + 1) * n_in) // n_out)  # ceil((i + 1) * n_in / n_out)
    j = torch.arange(n_in, device=device)
    inside = (j.unsqueeze(0) >= start.unsqueeze(1)) & (j.unsqueeze(0) < end.unsqueeze(1))
    return inside.to(dtype) / (end - start).unsqueeze(1).to(dtype)


def adaptive_avg_pool2d(x: Tensor, size: int | tuple[int, int]) -> Tensor:
    """Same result as ``F.adaptive_avg_pool2d(x, size)`` for ``x [..., H, W]``, deterministic backward."""
    gh, gw = (size, size) if isinstance(size, int) else size
    h, w = x.shape[-2:]
    if (gh, gw) == (h, w):
        return x
    if h % gh == 0 and w % gw == 0:
        lead = x.shape[:-2]
        return x.reshape(*lead, gh, h // gh, gw, w // gw).mean(dim=(-3, -1))
    ph = pooling_matrix(h, gh, x.dtype, x.device)
    pw = pooling_matrix(w, gw, x.dtype, x.device)
    return ph @ x @ pw.T


class AdaptiveAvgPool2d(nn.Module):
    """Drop-in for ``nn.AdaptiveAvgPool2d`` (int or pair output size) built on :func:`adaptive_avg_pool2d`."""

    def __init__(self, output_size: int | tuple[int, int]):
        super().__init__()
        self.output_size = output_size

    def forward(self, x: Tensor) -> Tensor:
        return adaptive_avg_pool2d(x, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"
