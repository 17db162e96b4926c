"""Pretrained image encoders from local weights (nothing is downloaded), shared by the feature cache
(:mod:`synthetic.real.features`) and the models' pretrained backbones.

``hf``: a CLIP or SigLIP image encoder saved by ``transformers`` (``save_pretrained``) in a local folder
named by ``weights``: CLIP's projected image embedding (what concept-benchmark 0.4.1's CLIP features
are), SigLIP's pooled output; the images are resized to the model's side and normalised as it was
trained.

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


#: ``model_type`` of a ``transformers`` folder -> (the family, its normalisation mean and std).
HF_TYPES = {
    "clip": ("clip", (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)),
    "clip_vision_model": ("clip", (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)),
    "siglip": ("siglip", (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
    "siglip_vision_model": ("siglip", (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
}


class _HFImage(nn.Module):
    """A transformers CLIP / SigLIP image encoder on ``[0, 1]`` images of any side."""

    def __init__(self, model: nn.Module, family: str, side: int, mean: tuple, std: tuple):
        super().__init__()
        self.model, self.family, self.side = model, family, side
        self.register_buffer("mean", torch.tensor(mean).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std).view(1, 3, 1, 1), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1] != self.side or x.shape[-2] != self.side:
            x = nn.functional.interpolate(x, size=(self.side, self.side), mode="bilinear", align_corners=False)
        pixels = (x - self.mean) / self.std
        if self.family == "clip":
            out = self.model.get_image_features(pixel_values=pixels) if hasattr(self.model, "get_image_features") else self.model(pixel_values=pixels).image_embeds
            return out if isinstance(out, Tensor) else out.pooler_output
        return self.model(pixel_values=pixels).pooler_output


def _hf_folder(weights: str) -> tuple[Path, str]:
    """The folder ``weights`` names and its ``model_type`` (one line for anything else)."""
    import json

    folder = Path(weights).expanduser()
    cfg = folder / "config.json"
    if not cfg.is_file():
        raise ConfigError(f"hf: weights must be a local folder saved by transformers (config.json and the weights); {cfg} not found")
    try:
        model_type = json.loads(cfg.read_text()).get("model_type", "")
    except (OSError, ValueError):
        raise ConfigError(f"hf: {cfg} is not readable JSON") from None
    if model_type not in HF_TYPES:
        raise ConfigError(f"hf: {folder} holds a '{model_type}' model; an image encoder of {sorted(HF_TYPES)} is needed")
    return folder, model_type


def _build_hf(weights: str) -> Encoder:
    import transformers

    folder, model_type = _hf_folder(weights)
    family, mean, std = HF_TYPES[model_type]
    cls = {"clip": "CLIPModel", "clip_vision_model": "CLIPVisionModelWithProjection", "siglip": "SiglipModel",
           "siglip_vision_model": "SiglipVisionModel"}[model_type]  # fmt: skip
    try:
        model = getattr(transformers, cls).from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError) as err:
        raise ConfigError(f"hf: {folder} does not load as {cls} ({str(err).splitlines()[0][:120]})") from None
    if model_type == "siglip":
        model = model.vision_model
    vision = model.config.vision_config if hasattr(model.config, "vision_config") else model.config
    side = int(vision.image_size)
    with torch.no_grad():
        width = int(_HFImage(model, family, side, mean, std).eval()(torch.zeros(1, 3, side, side)).shape[-1])
    return Encoder(_HFImage(model, family, side, mean, std).eval(), width, f"hf:{_hf_hash(folder)}")


def _hf_hash(folder: Path) -> str:
    """Hash of a transformers folder's config and weights files."""
    h = hashlib.sha256()
    for p in sorted(folder.iterdir()):
        if p.is_file() and (p.name == "config.json" or p.suffix in (".safetensors", ".bin")):
            h.update(p.name.encode() + file_hash(p).encode())
    return h.hexdigest()[:16]


def fingerprint(name: str, weights: str = "random", seed: int = 0) -> str:
    """What identifies encoder ``name`` with ``weights`` (its weights file's hash, or the seed of a
    random initialisation), without building it: feature caches are keyed by it."""
    if name == "hf":
        return f"hf:{_hf_hash(_hf_folder(weights)[0])}"
    if name not in ENCODERS:
        raise ConfigError(f"unknown encoder '{name}' (choose from {sorted(ENCODERS)})")
    path = weights_file(name, weights)
    return f"{name}:{file_hash(path)}" if path is not None else f"{name}:random:{seed}"


def build_encoder(name: str, weights: str = "random", seed: int = 0, image_size: int | None = None) -> Encoder:
    """The headless encoder ``name`` (:data:`ENCODERS`) with ``weights``; ``ConfigError`` (one line) for an
    unknown name, a missing or unreadable weights file, or an image size the weights cannot take."""
    from torchvision.models import get_model

    if name == "hf":
        return _build_hf(weights)
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
