"""Evaluation of a (fine-tuned) VLM on counterfactual Q/A rows: per row the answer-token loss,
exact match of the greedy answer, and the attention localisation on the edited region.

**Localisation**: the attention of the positions that predict the answer tokens onto the image
tokens, averaged over layers, heads and those positions, and the share of it that falls on image
tokens whose patch lies in the changed-pixel mask (the mask pooled to the image-token grid: a cell
counts when more than ``pool_threshold`` of its pixels changed). 1.0 = all of the answer's image
attention is on the edited evidence. Needs eager attention (``attn_implementation=eager``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from cbm.vlm.finetune.collate import IGNORE, Collator
from cbm.vlm.finetune.data import SPLITS, QARow


def normalise(text: str) -> str:
    """First line, lower case, surrounding space and trailing punctuation removed."""
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line.strip().strip(".!").strip().lower()


def pool_mask(mask: np.ndarray, grid: tuple[int, int], threshold: float = 0.0) -> np.ndarray:
    """``bool [gh*gw]`` (row-major): the grid cells in which more than ``threshold`` of the mask's
    pixels are set (area pooling of the mask onto the image-token grid)."""
    gh, gw = grid
    m = np.asarray(mask, dtype=np.float32)
    frac = np.asarray(Image.fromarray(m).resize((gw, gh), Image.BOX), dtype=np.float32)
    return (frac > threshold).reshape(-1)


def localisation_share(attention: np.ndarray, cells: np.ndarray) -> float:
    """Share of ``attention`` (``[n]`` weights over image tokens) on the ``cells`` (``bool [n]``)."""
    a = np.asarray(attention, dtype=np.float64)
    total = a.sum()
    if total <= 0:
        return float("nan")
    return float(a[np.asarray(cells, bool)].sum() / total)


def image_grid(batch: dict[str, torch.Tensor], n_image_tokens: int, model: Any) -> tuple[int, int]:
    """``(rows, cols)`` of the image tokens: from ``image_grid_thw`` and the spatial merge (Qwen-VL
    families), else a square grid."""
    if "image_grid_thw" in batch:
        t, h, w = (int(v) for v in batch["image_grid_thw"][0])
        vision = getattr(getattr(model, "config", None), "vision_config", None)
        merge = int(getattr(vision, "spatial_merge_size", 1) or 1)
        return h // merge, w // merge
    side = int(round(n_image_tokens**0.5))
    if side * side != n_image_tokens:
        raise ValueError(f"cannot lay {n_image_tokens} image tokens on a grid; pass a model with image_grid_thw")
    return side, side


@dataclass
class RowResult:
    pair_id: str
    split: str
    loss: float
    correct: bool
    prediction: str
    localisation: float | None
    attention: np.ndarray | None  # [gh, gw] mean attention on the image tokens (for heatmaps)


class Evaluator:
    def __init__(self, model: Any, collator: Collator, max_new_tokens: int = 8, localise: bool = True, pool_threshold: float = 0.0):
        self.model = model
        self.collator = collator
        self.max_new_tokens = max_new_tokens
        self.localise = localise
        self.pool_threshold = pool_threshold
        cfg = getattr(model, "config", None)
        self.image_token_id = getattr(cfg, "image_token_id", None) or getattr(cfg, "image_token_index", None)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _to(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: v.to(self.device) for k, v in batch.items()}

    @torch.inference_mode()
    def row(self, row: QARow) -> RowResult:
        batch = self._to(self.collator([row]))
        out = self.model(**batch, output_attentions=self.localise and row.mask is not None)
        logits = out.logits[0, :-1].float()
        target = batch["labels"][0, 1:]
        keep = target != IGNORE
        loss = float(torch.nn.functional.cross_entropy(logits[keep], target[keep]))
        loc, grid_attn = None, None
        if self.localise and row.mask is not None and out.attentions:
            ids = batch["input_ids"][0]
            img = (ids == self.image_token_id).nonzero(as_tuple=True)[0]
            queries = keep.nonzero(as_tuple=True)[0]  # position t predicts token t + 1
            att = torch.stack([a[0].float().mean(0) for a in out.attentions]).mean(0)  # [T, T] over layers, heads
            a_img = att[queries][:, img].mean(0).cpu().numpy()
            grid = image_grid(batch, len(img), self.model)
            cells = pool_mask(np.asarray(Image.open(row.mask).convert("L")) > 0, grid, self.pool_threshold)
            loc = localisation_share(a_img, cells)
            grid_attn = a_img.reshape(grid)
        prompt = self._to(self.collator.prompt(row))
        gen = self.model.generate(**prompt, max_new_tokens=self.max_new_tokens, do_sample=False)
        text = self.collator.tok.decode(gen[0, prompt["input_ids"].shape[1] :], skip_special_tokens=True)
        return RowResult(row.pair_id, row.split, loss, normalise(text) == normalise(row.answer), text, loc, grid_attn)

    def run(self, rows: Sequence[QARow], progress: bool = False, desc: str = "eval") -> list[RowResult]:
        from tqdm.auto import tqdm

        was_training = self.model.training
        self.model.eval()
        try:
            return [self.row(r) for r in tqdm(rows, desc=desc, disable=not progress, leave=False)]
        finally:
            self.model.train(was_training)


def mcnemar(before: Sequence[bool], after: Sequence[bool]) -> dict[str, Any]:
    """Exact McNemar test on paired outcomes: ``b`` right before / wrong after, ``c`` the reverse,
    two-sided binomial p-value on the discordant pairs (1.0 when there are none)."""
    from scipy.stats import binomtest

    b = int(sum(x and not y for x, y in zip(before, after)))
    c = int(sum(y and not x for x, y in zip(before, after)))
    p = float(binomtest(min(b, c), b + c, 0.5).pvalue) if b + c else 1.0
    return {"worse": b, "better": c, "p_value": p}


def summarise(results: Sequence[RowResult]) -> dict[str, dict[str, Any]]:
    """Per split: rows, mean loss, accuracy, mean localisation (rows with a mask)."""
    out = {}
    for split in SPLITS:
        rs = [r for r in results if r.split == split]
        locs = [r.localisation for r in rs if r.localisation is not None and not np.isnan(r.localisation)]
        out[split] = {
            "rows": len(rs),
            "loss": float(np.mean([r.loss for r in rs])) if rs else float("nan"),
            "accuracy": float(np.mean([r.correct for r in rs])) if rs else float("nan"),
            "localisation": float(np.mean(locs)) if locs else float("nan"),
        }
    return out


def heatmap(row: QARow, attention: np.ndarray, path: str | Path, title: str = "") -> Path:
    """The image with the answer's attention on its image tokens overlaid and the mask outlined."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from synthetic.atomic import savefig_atomic

    img = np.asarray(Image.open(row.image).convert("RGB"))
    h, w = img.shape[:2]
    a = np.asarray(attention, dtype=np.float64)
    a = a / a.max() if a.max() > 0 else a
    up = np.asarray(Image.fromarray((a * 255).astype(np.uint8)).resize((w, h), Image.NEAREST), dtype=np.float64) / 255
    fig, ax = plt.subplots(figsize=(3, 3), dpi=100)
    ax.imshow(img)
    ax.imshow(up, cmap="inferno", alpha=0.5, vmin=0, vmax=1)
    if row.mask is not None:
        ax.contour(np.asarray(Image.open(row.mask).convert("L")) > 0, levels=[0.5], colors="cyan", linewidths=0.8)
    ax.set_title(title, fontsize=7)
    ax.axis("off")
    try:
        return savefig_atomic(fig, path, bbox_inches="tight")
    finally:
        plt.close(fig)
