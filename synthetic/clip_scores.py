"""Concepts annotated by CLIP: image-text scores, percentile calibration, cached per dataset.

Label-free CBMs (Oikarinen et al. 2023; concept-benchmark 0.4's ``machine_annotation``,
``llm_concepts`` and ``clip_concepts`` sources) take their concept labels from a CLIP model
instead of people: every image is scored against one text per concept (cosine similarity of the
two embeddings) and a concept counts as present where its score is above a percentile of its
scores on the training split. No concept label enters: the percentile is the only calibration.

The model is any ``transformers`` CLIP checkpoint directory (``CLIPModel`` + its tokenizer;
``preprocessor_config.json`` when present sets the input size and normalisation). Images are
resized and normalised in torch, a batch at a time, so a whole split is scored without PIL.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

#: CLIP's own normalisation (used when the checkpoint has no preprocessor config).
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


class ClipScorer:
    """Cosine scores of images against texts under one CLIP checkpoint (CPU or CUDA)."""

    def __init__(self, checkpoint: str | Path, device: str = "cpu", batch_size: int = 256):
        import torch
        from transformers import AutoTokenizer, CLIPModel

        path = Path(checkpoint)
        if not (path / "config.json").is_file():
            raise ValueError(f"concept_source.checkpoint: '{checkpoint}' is not a CLIP model directory (no config.json)")
        try:
            self.model = CLIPModel.from_pretrained(path).to(device).eval()
            self.tokenizer = AutoTokenizer.from_pretrained(path)
        except (OSError, ValueError, KeyError) as err:
            raise ValueError(f"concept_source.checkpoint: cannot load a CLIP model from '{checkpoint}': {err}") from None
        vision = self.model.config.vision_config
        self.size, self.mean, self.std = int(vision.image_size), CLIP_MEAN, CLIP_STD
        pre = path / "preprocessor_config.json"
        if pre.is_file():
            conf = json.loads(pre.read_text())
            crop = conf.get("crop_size")  # {"height": h, "width": w} or a side
            self.size = int(crop["height"] if isinstance(crop, dict) else crop or self.size)
            self.mean, self.std = tuple(conf.get("image_mean", self.mean)), tuple(conf.get("image_std", self.std))
        self.device, self.batch_size = torch.device(device), batch_size
        self.identity = checkpoint_identity(path)

    def texts(self, texts: Sequence[str]):
        """Unit text embeddings ``[M, D]``."""
        import torch

        with torch.no_grad():
            tok = self.tokenizer(list(texts), padding=True, return_tensors="pt").to(self.device)
            out = self.model.get_text_features(input_ids=tok["input_ids"], attention_mask=tok.get("attention_mask"))
            emb = getattr(out, "pooler_output", out)
        return torch.nn.functional.normalize(emb.float(), dim=-1)

    def images(self, x: np.ndarray):
        """Unit image embeddings ``[B, D]`` of ``uint8 [B, H, W, 3]`` images."""
        import torch
        import torch.nn.functional as F

        with torch.no_grad():
            t = torch.from_numpy(np.ascontiguousarray(x)).to(self.device).permute(0, 3, 1, 2).float() / 255.0
            if t.shape[-1] != self.size or t.shape[-2] != self.size:
                t = F.interpolate(t, size=(self.size, self.size), mode="bicubic", antialias=True, align_corners=False).clamp(0, 1)
            mean = torch.tensor(self.mean, device=self.device).view(1, 3, 1, 1)
            std = torch.tensor(self.std, device=self.device).view(1, 3, 1, 1)
            out = self.model.get_image_features(pixel_values=(t - mean) / std)
            emb = getattr(out, "pooler_output", out)
        return F.normalize(emb.float(), dim=-1)

    def scores(self, images: Any, texts: Sequence[str]) -> np.ndarray:
        """``float32 [N, M]``: cosine of every image (rows of ``images``, any array-like of
        ``uint8 [H, W, 3]``) with every text, ``batch_size`` images at a time."""
        txt = self.texts(texts)
        n = len(images)
        out = np.empty((n, len(texts)), dtype=np.float32)
        for start in range(0, n, self.batch_size):
            stop = min(n, start + self.batch_size)
            out[start:stop] = (self.images(np.asarray(images[start:stop])) @ txt.T).cpu().numpy()
        return out


def checkpoint_identity(path: Path) -> str:
    """A digest of the checkpoint's config and weight files (name, size, mtime): a changed model
    is a new cache entry, an unchanged one is not read again."""
    h = hashlib.sha256()
    for f in sorted(p for p in path.iterdir() if p.is_file()):
        st = f.stat()
        h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()[:16]


def percentile_thresholds(scores: np.ndarray, percentile: float) -> np.ndarray:
    """Per-concept thresholds ``[M]``: the ``percentile``-th percentile of each column."""
    return np.percentile(scores, percentile, axis=0).astype(np.float32)


def annotate(scores: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """``float32 0/1``: a concept is present where its score is above its threshold."""
    return (scores > thresholds[None, :]).astype(np.float32)


def load_free_concepts(path: str | Path) -> list[tuple[str, str]]:
    """``[(name, text)]`` from a ``.jsonl`` / ``.json`` / ``.yaml`` list of ``{name, text}`` (a
    missing name becomes the text in snake case). Bad files are one ``ValueError`` line."""
    import re

    p = Path(path)
    where = f"concept_source.concepts_file: {path}"
    if not p.is_file():
        raise ValueError(f"{where}: no such file")
    try:
        text = p.read_text(encoding="utf-8")
        if p.suffix == ".jsonl":
            items = [json.loads(line) for line in text.splitlines() if line.strip()]
        elif p.suffix == ".json":
            items = json.loads(text)
        elif p.suffix in (".yaml", ".yml"):
            import yaml

            items = yaml.safe_load(text)
            items = items.get("concepts", items) if isinstance(items, dict) else items
        else:
            raise ValueError("expected a .jsonl, .json or .yaml file")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, ValueError) as err:
        raise ValueError(f"{where}: {err}") from None
    except Exception as err:  # yaml.YAMLError without importing yaml up front
        raise ValueError(f"{where}: {type(err).__name__}: {err}") from None
    if not isinstance(items, list) or not items:
        raise ValueError(f"{where}: expected a non-empty list of {{name, text}}")
    out: list[tuple[str, str]] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("text"), str) or not item["text"].strip():
            raise ValueError(f"{where}: item {i} has no text: {item!r}")
        name = str(item.get("name") or re.sub(r"[^0-9a-z]+", "_", item["text"].lower()).strip("_"))
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"{where}: item {i}: name {name!r} is not an identifier")
        out.append((name, item["text"].strip()))
    names = [n for n, _ in out]
    if len(set(names)) != len(names):
        raise ValueError(f"{where}: duplicate concept names {sorted({n for n in names if names.count(n) > 1})}")
    return out
