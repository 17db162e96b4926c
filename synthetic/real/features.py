"""The feature cache (``data.features.kind=precompute``): a pretrained encoder's embeddings of every
image, computed once and stored atomically in ``cache_dir``, so the concept layers and heads train in
seconds on a CPU and every run of a sweep reuses them.

The cache is keyed by the dataset's own key and the encoder's fingerprint (its weights file's bytes):
a rerun computes no embedding, and another encoder or other weights never read these features. The
data then reach the models as ``tabular`` rows ``float32 [N, out_dim]`` (the backbone ``auto`` is an
MLP over them).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from synthetic.base import SyntheticData
from synthetic.cache import cached_arrays

FEATURE_KINDS = ("none", "precompute")
DEVICES = ("auto", "cpu", "cuda")


@dataclass
class FeaturesConfig:
    """``data.features``: what the models read, the images (``none``) or an encoder's embeddings."""

    #: ``none`` (the images) or ``precompute`` (the embeddings, cached).
    kind: str = "none"
    #: ``resnet18`` | ``resnet50`` | ``vit_b_16`` (:data:`synthetic.real.encoders.ENCODERS`) | ``hf`` (a CLIP or
    #: SigLIP image encoder saved by transformers; ``weights``: its folder).
    encoder: str = "resnet18"
    #: ``random`` | ``torchvision`` (torchvision's file, already in torch's hub cache) | a state_dict file.
    weights: str = "torchvision"
    #: Images per forward pass.
    batch_size: int = 128
    #: Where the embeddings are computed (``auto``: a GPU when there is one).
    device: str = "auto"
    #: Initialisation seed of ``weights=random``.
    seed: int = 0

    def __post_init__(self) -> None:
        from cbm.core.validation import integer, one_of
        from synthetic.real.encoders import ENCODERS

        one_of("data.features.kind", self.kind, FEATURE_KINDS)
        one_of("data.features.encoder", self.encoder, (*ENCODERS, "hf"))
        integer("data.features.batch_size", self.batch_size, 1)
        one_of("data.features.device", self.device, DEVICES)
        integer("data.features.seed", self.seed, 0)


def embed(x: np.ndarray, cfg: FeaturesConfig, image_size: int) -> np.ndarray:
    """``float32 [N, out_dim]``: the encoder's embeddings of ``uint8 [N, H, W, 3]`` images, batch by batch."""
    import torch

    from synthetic.real.encoders import build_encoder

    enc = build_encoder(cfg.encoder, cfg.weights, cfg.seed, image_size)
    device = torch.device("cuda" if cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available()) else "cpu")
    module = enc.module.to(device)
    out = np.empty((len(x), enc.out_dim), dtype=np.float32)
    with torch.inference_mode():
        for a in range(0, len(x), cfg.batch_size):
            batch = torch.from_numpy(np.ascontiguousarray(x[a : a + cfg.batch_size])).to(device)
            out[a : a + len(batch)] = module(batch.permute(0, 3, 1, 2).float() / 255.0).float().cpu().numpy()
    return out


def with_features(data: SyntheticData, cfg: FeaturesConfig, key: dict[str, Any], cache_dir: str | Path | None, image_size: int) -> SyntheticData:
    """``data`` with ``x`` replaced by the cached embeddings of its images (computed on a miss)."""
    from synthetic.real.encoders import fingerprint

    if cfg.kind == "none":
        return data
    fp = fingerprint(cfg.encoder, cfg.weights, cfg.seed)
    arrays = cached_arrays({**key, "features": fp}, lambda: {"x": embed(data.x, cfg, image_size)}, cache_dir, prefix="features", required=("x",))
    info = {**data.info, "features": {**asdict(cfg), "fingerprint": fp}}
    return replace(data, x=np.asarray(arrays["x"], dtype=np.float32), modality="tabular", extra=dict(data.extra), info=info)
