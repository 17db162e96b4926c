"""The cell reader of the two-stage Sudoku models: concept-benchmark 0.4.1's OCR stage.

0.4.1 (``concept_benchmark/synthetic/sudoku/ocr/``) cuts each 10 x 10 cell out of a 94 px board
(2 px margin), turns it grey, resizes it to 28 x 28 (cv2 ``INTER_LINEAR``: bilinear, half-pixel
centres) and inverts it (ink = 1); a ``TinyResNet`` (3x3 conv stem, two residual blocks each
followed by a 2x2 max pool, then 256 -> 10) reads it. It is trained on the cells of the
*training* boards only, 12% of them (at least 600) held out to keep the epoch with the best
held-out cell accuracy, with a cross-entropy weighted by inverse class frequency, Adam 1e-3,
batches of 256, at most 5 epochs, stopping after 3 without improvement. Its argmax digits are what
the check model and the DNN read. Here the same, vectorised: :func:`cell_crops` cuts every cell of
a batch of boards with one reshape, :func:`fit_ocr` trains from a seed (the split of the cells and
the batch order come from a generator of their own).
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from cbm.models.ocr_config import OCRConfig

log = logging.getLogger("cbm")

#: Classes the reader tells apart: 0 (an empty cell) and the digits 1..9.
N_CLASSES = 10


class TinyResBlock(nn.Module):
    def __init__(self, ch: int):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(ch, ch, 3, padding=1), nn.ReLU(True), nn.Conv2d(ch, ch, 3, padding=1))

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(self.conv(x) + x)


class TinyResNet(nn.Module):
    """0.4.1's ``TinyResNet`` with its widths as knobs: ``[N, 1, p, p]`` crops -> ``[N, 10]`` logits."""

    def __init__(self, width: int = 32, input_px: int = 28, hidden: int = 256):
        super().__init__()
        self.input_px = input_px
        self.stem = nn.Sequential(nn.Conv2d(1, width, 3, padding=1), nn.ReLU(True))
        self.block1, self.block2 = TinyResBlock(width), TinyResBlock(width)
        side = input_px // 4
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(width * side * side, hidden), nn.ReLU(True), nn.Linear(hidden, N_CLASSES))

    def forward(self, x: Tensor) -> Tensor:
        x = F.max_pool2d(self.block1(self.stem(x)), 2)
        return self.head(F.max_pool2d(self.block2(x), 2))


def cell_crops(x: Tensor, cell_size: int, margin: int) -> Tensor:
    """The 81 cells of each board, grey, inverted (ink = 1), ``float [B*81, 1, cs, cs]`` row-major.

    ``x``: ``uint8 [B, S, S]`` (stored boards) or float ``[B, C, S, S]`` in [0, 1] (batches)."""
    if x.dtype == torch.uint8:
        grey = x.float().div(255.0)
        grey = grey if grey.dim() == 3 else grey.mean(-1)
    else:
        grey = x.float().mean(1) if x.dim() == 4 else x.float()
    b, cs = len(grey), cell_size
    if grey.shape[-1] != 9 * cs + 2 * margin or grey.shape[-2] != grey.shape[-1]:
        raise ValueError(f"OCR: boards of {9 * cs + 2 * margin} px expected ({cs} px cells, {margin} px margins), got {tuple(grey.shape)}")
    g = grey[:, margin : margin + 9 * cs, margin : margin + 9 * cs].reshape(b, 9, cs, 9, cs)
    return 1.0 - g.permute(0, 1, 3, 2, 4).reshape(b * 81, 1, cs, cs)


def resize(crops: Tensor, px: int) -> Tensor:
    """Crops to ``px`` (bilinear, half-pixel centres, edges clamped: cv2's ``INTER_LINEAR``)."""
    if crops.shape[-1] == px:
        return crops
    return F.interpolate(crops, size=(px, px), mode="bilinear", align_corners=False)


@torch.no_grad()
def read_digits(net: TinyResNet, x: Tensor, cell_size: int, margin: int, chunk: int = 8192) -> Tensor:
    """The argmax digit of every cell, ``long [B, 81]`` (0..9)."""
    crops = cell_crops(x, cell_size, margin)
    out = [net(resize(crops[a : a + chunk].to(next(net.parameters()).dtype), net.input_px)).argmax(1) for a in range(0, len(crops), chunk)]
    return torch.cat(out).view(len(x), 81) if out else torch.zeros(len(x), 81, dtype=torch.long)


def class_weights(labels: Tensor, cfg: OCRConfig) -> Tensor | None:
    """0.4.1's ``compute_class_weights``: counts over the first ``weight_sample`` training cells,
    an absent class counted once, inverse counts normalised to sum to 10."""
    if cfg.class_weights == "none":
        return None
    counts = torch.bincount(labels[: cfg.weight_sample], minlength=N_CLASSES).double().clamp_min(1.0)
    inv = 1.0 / counts
    return (inv / inv.sum() * N_CLASSES).float()


def fit_ocr(net: TinyResNet, images: Tensor, boards: Tensor, cell_size: int, margin: int, cfg: OCRConfig, seed: int) -> dict[str, Any]:
    """Train ``net`` in place on every cell of ``images`` (``uint8 [N, S, S]``, the training boards)
    labelled by ``boards`` (``[N, 9, 9]``), keep its best held-out epoch; a report of what it did."""
    crops = cell_crops(images, cell_size, margin)  # [N*81, 1, cs, cs] at the stored size: resized per batch
    labels = boards.reshape(-1).long().to(crops.device)
    n = len(labels)
    if n < 2:
        raise ValueError("OCR: the training split holds no cells to learn from")
    gen = torch.Generator().manual_seed(int(seed))
    n_val = min(max(cfg.min_held_out, int(cfg.held_out * n)), n // 2)
    perm = torch.randperm(n, generator=gen).to(crops.device)
    train_idx, val_idx = perm[n_val:], perm[:n_val]
    weights = class_weights(labels[train_idx], cfg)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    best, best_epoch, best_state, history = -1.0, 0, None, []
    for epoch in range(1, cfg.epochs + 1):
        net.train()
        order = train_idx[torch.randperm(len(train_idx), generator=gen).to(crops.device)]
        for a in range(0, len(order), cfg.batch_size):
            idx = order[a : a + cfg.batch_size]
            loss = F.cross_entropy(net(resize(crops[idx], net.input_px)), labels[idx], weight=None if weights is None else weights.to(crops.device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        acc = held_out_accuracy(net, crops[val_idx], labels[val_idx])
        history.append(round(acc, 6))
        log.info("OCR epoch %d: held-out cell accuracy %.4f", epoch, acc)
        if acc > best:
            best, best_epoch = acc, epoch
            best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
        elif epoch - best_epoch >= cfg.patience:
            break
    if best_state is not None:
        net.load_state_dict(best_state)
    net.eval()
    return {"cells": n, "train_cells": len(train_idx), "held_out_cells": n_val, "best_epoch": best_epoch,
            "held_out_acc": best, "held_out_acc_by_epoch": history,
            "class_weights": None if weights is None else [round(float(w), 6) for w in weights]}  # fmt: skip


@torch.no_grad()
def held_out_accuracy(net: TinyResNet, crops: Tensor, labels: Tensor, chunk: int = 8192) -> float:
    net.eval()
    hits = sum(int((net(resize(crops[a : a + chunk], net.input_px)).argmax(1) == labels[a : a + chunk]).sum()) for a in range(0, len(labels), chunk))
    return hits / max(len(labels), 1)


def cell_accuracy(read: Tensor, boards: Tensor) -> tuple[float, float]:
    """Share of cells read right and share of boards with at least one misread cell."""
    wrong = read.reshape(len(read), -1) != boards.reshape(len(boards), -1).to(read)
    return float(1.0 - wrong.double().mean()), float(wrong.any(1).double().mean())


def layout(data_cfg: dict | None) -> tuple[int, int]:
    """``(cell_size, margin)`` of the boards a two-stage model reads (the 0.4 renderer's layout)."""
    d = dict(data_cfg or {})
    if d.get("renderer") != "v04":
        raise ValueError("the OCR models read boards drawn by data.renderer=v04 (data=sudoku_v04): 9 cells of cell_size "
                         f"px between margins of v04.margin_px; this data has renderer={d.get('renderer', 'bank')!r}")  # fmt: skip
    return int(d["cell_size"]), int(dict(d.get("v04") or {}).get("margin_px", 2))
