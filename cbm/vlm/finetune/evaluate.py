"""Evaluation of a (fine-tuned) VLM on counterfactual Q/A rows: per row the answer-token loss,
exact match of the greedy answer, and the attention localisation on the edited region.

**Localisation** (the paper's saliency map, :func:`saliency_map`): the attention of the positions
that predict the answer tokens onto the image's content tokens (:func:`image_layout`: image tokens
only, no special, separator, newline or register token), from the upper layers
(``eval.attention_layers``, the paper's 7 to 12, clipped to the model's depth); per layer the
layer's mean over the image tokens subtracted; heads weighted by the variance of their map; the
positive part squared; cells below the 25th percentile zeroed. The score is the share of that map's
mass on cells whose patch lies in the changed-pixel mask (the mask pooled to the image-token grid:
a cell counts when more than ``pool_threshold`` of its pixels changed): 1.0 = all of the answer's
image saliency is on the edited evidence. The drawn heatmap is the map upscaled bicubically. Needs
eager attention (``attn_implementation=eager``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from cbm.vlm.finetune.collate import IGNORE, Collator
from cbm.vlm.finetune.config import PAPER_LAYERS, PAPER_PERCENTILE, PAPER_SHARPEN
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


class LayoutError(ValueError):
    """The image tokens cannot be laid on a grid (one line)."""


@dataclass(frozen=True)
class ImageLayout:
    """The evaluated image's content tokens: their sequence positions, row-major on ``grid``."""

    positions: torch.Tensor
    grid: tuple[int, int]


def _square(n: int, what: str) -> int:
    side = math.isqrt(n)
    if side * side != n:
        raise LayoutError(f"localisation: {what}: {n} image tokens are not a square grid")
    return side


def _vision_side(config: Any) -> int:
    """Patches per side of the vision tower's input (``image_size // patch_size``)."""
    v = config.vision_config
    return int(v.image_size) // int(v.patch_size)


def _qwen_layout(img: torch.Tensor, batch: dict[str, torch.Tensor], config: Any) -> ImageLayout:
    """Qwen-VL families: ``image_grid_thw`` (patches) over the spatial merge."""
    if "image_grid_thw" not in batch:
        raise LayoutError("localisation: no image_grid_thw in the processor's output")
    _, h, w = (int(v) for v in batch["image_grid_thw"][0])
    merge = int(getattr(config.vision_config, "spatial_merge_size", 1) or 1)
    return ImageLayout(img, (h // merge, w // merge))


def _llava_layout(img: torch.Tensor, batch: dict[str, torch.Tensor], config: Any) -> ImageLayout:
    """LLaVA: patches per side from the vision config; with ``vision_feature_select_strategy=full``
    the first image token is the CLS register, left out."""
    side = _vision_side(config)
    extra = len(img) - side * side
    if extra not in (0, 1):
        raise LayoutError(f"localisation: llava: {len(img)} image tokens for a {side} x {side} patch grid")
    return ImageLayout(img[extra:], (side, side))


def _llava_next_layout(img: torch.Tensor, batch: dict[str, torch.Tensor], config: Any) -> ImageLayout:
    """LLaVA-Next: the base (global) image's grid, the first ``side^2`` image tokens (the tiles and
    their newline tokens follow it and are left out)."""
    side = _vision_side(config)
    if len(img) < side * side:
        raise LayoutError(f"localisation: llava_next: {len(img)} image tokens, fewer than the base image's {side} x {side}")
    return ImageLayout(img[: side * side], (side, side))


def _idefics_layout(img: torch.Tensor, batch: dict[str, torch.Tensor], config: Any) -> ImageLayout:
    """Idefics3 / SmolVLM: the image is tiled, then the global image comes last; the global image's
    grid (its ``(side / scale_factor)^2`` tokens after the pixel shuffle, the last image tokens)."""
    per = _vision_side(config) // int(config.scale_factor)
    if len(img) % (per * per):
        raise LayoutError(f"localisation: {config.model_type}: {len(img)} image tokens are not whole images of {per} x {per}")
    return ImageLayout(img[-per * per :], (per, per))


def _square_layout(img: torch.Tensor, batch: dict[str, torch.Tensor], config: Any) -> ImageLayout:
    """Gemma 3, PaliGemma (and unknown families): one square grid of all the image tokens."""
    side = _square(len(img), getattr(config, "model_type", "model"))
    return ImageLayout(img, (side, side))


#: model_type -> the image-token layout of its processor's output.
LAYOUTS: dict[str, Callable[[torch.Tensor, dict[str, torch.Tensor], Any], ImageLayout]] = {
    "qwen2_vl": _qwen_layout, "qwen2_5_vl": _qwen_layout, "qwen3_vl": _qwen_layout, "llava": _llava_layout,
    "llava_next": _llava_next_layout, "idefics3": _idefics_layout, "smolvlm": _idefics_layout,
    "gemma3": _square_layout, "paligemma": _square_layout,
}  # fmt: skip


def image_layout(batch: dict[str, torch.Tensor], config: Any, image_token_id: int | None) -> ImageLayout:
    """The layout of the first row's image tokens in ``batch``; :class:`LayoutError` (one line) when
    it cannot be determined. The grid spans the image as the vision tower saw it: the mask is pooled
    onto it whole, exact for images the processor resizes (every built set is square); an image it
    center-crops (LLaVA's CLIP) or pads (Idefics3's global image of a non-square photo) is mapped
    onto the crop / the padded canvas as if it filled it."""
    if image_token_id is None:
        raise LayoutError(f"localisation: the model config ({getattr(config, 'model_type', '?')}) names no image token id")
    img = (batch["input_ids"][0] == image_token_id).nonzero(as_tuple=True)[0]
    if len(img) == 0:
        raise LayoutError("localisation: the prompt holds no image token")
    layout = LAYOUTS.get(getattr(config, "model_type", ""), _square_layout)(img, batch, config)
    gh, gw = layout.grid
    if gh * gw != len(layout.positions) or gh * gw == 0:
        raise LayoutError(f"localisation: {len(layout.positions)} image tokens for a {gh} x {gw} grid")
    return layout


def layer_range(layers: Sequence[int], depth: int) -> range:
    """0-based indices of the 1-based inclusive ``[first, last]`` layers, both clipped to ``depth``."""
    first, last = (min(max(int(v), 1), depth) for v in layers)
    return range(first - 1, last)


def saliency_map(attention: np.ndarray, percentile: float = PAPER_PERCENTILE, power: float = PAPER_SHARPEN) -> np.ndarray:
    """The paper's heatmap from ``attention`` ``[layers, heads, n]`` (the answer's attention onto
    the ``n`` content tokens): per layer the layer's mean (over heads and tokens) subtracted, heads
    weighted by the variance of their map (all equal when none varies), the positive part raised to
    ``power``, values below the ``percentile`` -th percentile zeroed. Returns ``[n]``."""
    a = np.asarray(attention, dtype=np.float64)
    d = a - a.mean(axis=(1, 2), keepdims=True)
    w = d.var(axis=2)
    w = w / w.sum() if w.sum() > 0 else np.full_like(w, 1.0 / w.size)
    m = np.clip(np.einsum("lh,lhn->n", w, d), 0, None) ** power
    m[m < np.percentile(m, percentile)] = 0.0
    return m


@dataclass
class RowResult:
    pair_id: str
    split: str
    loss: float
    correct: bool
    prediction: str
    localisation: float | None
    attention: np.ndarray | None  # [gh, gw] the saliency map on the image's grid (for heatmaps)


class Evaluator:
    def __init__(self, model: Any, collator: Collator, max_new_tokens: int = 8, localise: bool = True, pool_threshold: float = 0.0,
                 attention_layers: Sequence[int] = PAPER_LAYERS, percentile: float = PAPER_PERCENTILE, power: float = PAPER_SHARPEN):  # fmt: skip
        self.model = model
        self.collator = collator
        self.max_new_tokens = max_new_tokens
        self.localise = localise
        self.pool_threshold = pool_threshold
        self.attention_layers = tuple(attention_layers)
        self.percentile = percentile
        self.power = power
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
            layout = image_layout(batch, self.model.config, self.image_token_id)
            queries = keep.nonzero(as_tuple=True)[0]  # position t predicts token t + 1
            layers = layer_range(self.attention_layers, len(out.attentions))
            att = torch.stack([out.attentions[i][0][:, queries][:, :, layout.positions].float().mean(1) for i in layers])  # [L, H, n]
            heat = saliency_map(att.cpu().numpy(), self.percentile, self.power)
            cells = pool_mask(np.asarray(Image.open(row.mask).convert("L")) > 0, layout.grid, self.pool_threshold)
            loc = localisation_share(heat, cells)
            grid_attn = heat.reshape(layout.grid)
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
    """The image with the answer's saliency map (bicubically upscaled) overlaid and the mask outlined."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from cbm.core.atomic import savefig_atomic

    img = np.asarray(Image.open(row.image).convert("RGB"))
    h, w = img.shape[:2]
    a = np.asarray(attention, dtype=np.float64)
    a = a / a.max() if a.max() > 0 else a
    up = np.asarray(Image.fromarray(a.astype(np.float32)).resize((w, h), Image.BICUBIC), dtype=np.float64).clip(0, 1)
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
