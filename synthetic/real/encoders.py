"""Pretrained image encoders from local weights (nothing is downloaded), shared by the feature cache
(:mod:`synthetic.real.features`) and the models' pretrained backbones.

``weights``: ``random`` (a fresh initialisation, seeded: tests, ablations), ``torchvision`` (the
torchvision ``DEFAULT`` weights file, which must already be in torch's hub cache,
``$TORCH_HOME/hub/checkpoints/``), or the path of a ``state_dict`` file (``.pth`` / ``.pt``, read
with ``weights_only=True``: a file that would run code is refused).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from cbm.core.validation import ConfigError

#: name -> (torchvision builder, feature width, the side the weights were trained at; None: any).
ENCODERS: dict[str, tuple[str, int, int | None]] = {
    "resnet18": ("resnet18", 512, None),
    "resnet50": ("resnet50", 2048, None),
    "vit_b_16": ("vit_b_16", 768, 224),
}
#: ImageNet normalisation of torchvision's weights.
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@dataclass
class Encoder:
    """A headless encoder: ``module(x [B,3,H,W] in [0, 1]) -> [B, out_dim]`` (normalisation inside)."""

    module: nn.Module
    out_dim: int
    #: What identifies the weights (the file's hash, or ``random:<seed>``): feature caches are keyed by it.
    fingerprint: str


class _Normalised(nn.Module):
    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net
        self.register_buffer("mean", torch.tensor(MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(STD).view(1, 3, 1, 1), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.net((x - self.mean) / self.std)


def weights_file(name: str, weights: str) -> Path | None:
    """The file ``weights`` names for encoder ``name`` (``None`` for ``random``); a missing file is one line."""
    if weights == "random":
        return None
    if weights == "torchvision":
        from torchvision.models import get_model_weights

        url = get_model_weights(ENCODERS[name][0]).DEFAULT.url
        path = Path(torch.hub.get_dir()) / "checkpoints" / url.rsplit("/", 1)[1]
        if not path.is_file():
            raise ConfigError(f"{name}: torchvision's weights are not in the hub cache ({path}); nothing is downloaded here: "
                              f"put the file there (from {url}) or give its path as weights=<file>")  # fmt: skip
        return path
    path = Path(weights).expanduser()
    if not path.is_file():
        raise ConfigError(f"{name}: weights file {path} not found (weights: random | torchvision | <state_dict file>)")
    return path


def file_hash(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def fingerprint(name: str, weights: str = "random", seed: int = 0) -> str:
    """What identifies encoder ``name`` with ``weights`` (its weights file's hash, or the seed of a
    random initialisation), without building it: feature caches are keyed by it."""
    if name not in ENCODERS:
        raise ConfigError(f"unknown encoder '{name}' (choose from {sorted(ENCODERS)})")
    path = weights_file(name, weights)
    return f"{name}:{file_hash(path)}" if path is not None else f"{name}:random:{seed}"


def build_encoder(name: str, weights: str = "random", seed: int = 0, image_size: int | None = None) -> Encoder:
    """The headless encoder ``name`` (:data:`ENCODERS`) with ``weights``; ``ConfigError`` (one line) for an
    unknown name, a missing or unreadable weights file, or an image size the weights cannot take."""
    from torchvision.models import get_model

    if name not in ENCODERS:
        raise ConfigError(f"unknown encoder '{name}' (choose from {sorted(ENCODERS)})")
    arch, width, side = ENCODERS[name]
    if side is not None and image_size is not None and image_size != side:
        raise ConfigError(f"{name} reads {side} px images; the data's are {image_size} px (set data.image_size={side})")
    path = weights_file(name, weights)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = get_model(arch, weights=None)
    if path is not None:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # a pickle that would run code, a truncated file, another format
            raise ConfigError(f"{name}: weights file {path} is not a readable state_dict ({type(err).__name__})") from None
        state = state.get("state_dict", state) if isinstance(state, dict) else state
        try:
            net.load_state_dict(state)
        except (RuntimeError, TypeError, AttributeError) as err:
            raise ConfigError(f"{name}: weights file {path} does not fit {arch} ({str(err).splitlines()[0][:120]})") from None
    if arch.startswith("resnet"):
        net.fc = nn.Identity()
    else:
        net.heads = nn.Identity()
    return Encoder(_Normalised(net).eval(), width, f"{name}:{file_hash(path)}" if path is not None else f"{name}:random:{seed}")
