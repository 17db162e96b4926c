"""Pretrain a zoo model's vision tower on per-token labels, as a real VLM's image encoder is
pretrained before the language model learns to use it.

Why: a tiny Qwen2-VL trained from random init only through its language model does not learn
to see a small glyph that sits in one of sixteen image tokens (a Sudoku board's wrong digit): the
answer depends on the board through a softmax average over every token, and the joint model
stays at chance (measured: three epochs of 12,000 boards, every rate tried). A linear head on
each merged image token, trained with the tower on the cell's digit, learns every digit in one
epoch; after it the language model learns the question in two. The head is thrown away: only the
tower (and its merger) keep what it taught.
"""

from __future__ import annotations

import numpy as np
import torch

from cbm.vlm.zoo.model import train_loop


def image_tokens(model: torch.nn.Module, pixel_values: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    """``[n_images, tokens, hidden]``: the merged image tokens the language model receives."""
    out = model.model.visual(pixel_values.reshape(-1, pixel_values.shape[-1]), grid_thw=grid)
    feats = getattr(out, "pooler_output", out)
    return feats.reshape(len(grid), -1, feats.shape[-1])


def pretrain_vision(model: torch.nn.Module, pixels: tuple[torch.Tensor, torch.Tensor], labels: np.ndarray, epochs: int, lr: float,
                    batch_size: int, seed: int, desc: str = "vision", schedule: str = "constant") -> list[float]:  # fmt: skip
    """Train the vision tower with a linear head on ``labels`` (``int [n_images, tokens]``, one
    class per merged image token) by AdamW for ``epochs`` (rate ``constant`` or on a half
    ``cosine``); the mean loss of each epoch.

    ``pixels`` is ``(pixel_values [n, patches, dim], image_grid_thw [n, 3])`` as the zoo's encoder
    makes them. Only the tower's parameters move; the head is discarded."""
    target = torch.as_tensor(labels, dtype=torch.long)
    pv, grid = pixels
    if target.ndim != 2 or len(target) != len(grid):
        raise ValueError(f"pretrain_vision: labels must be [n_images, tokens] for {len(grid)} images, got {tuple(target.shape)}")
    torch.manual_seed(seed)
    with torch.no_grad():
        tokens, hidden = image_tokens(model, pv[:1], grid[:1]).shape[1:]
    if tokens != target.shape[1]:
        raise ValueError(f"pretrain_vision: {tokens} image tokens per image, {target.shape[1]} labels")
    head = torch.nn.Linear(hidden, int(target.max()) + 1)

    def loss_of(idx: np.ndarray) -> torch.Tensor:
        rows = torch.as_tensor(idx)
        logits = head(image_tokens(model, pv[rows], grid[rows]))
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target[rows].reshape(-1))

    tower = [*model.model.visual.parameters(), *head.parameters()]
    return train_loop(model, tower, len(target), loss_of, epochs, lr, batch_size, seed, desc, schedule)
