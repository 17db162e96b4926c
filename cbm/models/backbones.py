"""Encoders ``x -> features [B, out_dim]`` selected by ``model.backbone.name``.

Every encoder is a :class:`Backbone`, whose two optional hooks are declared there with their
defaults: ``make_concept_layer(n_concepts)`` (a concept layer of the encoder's own, e.g. the Sudoku
board reader's group-validity layer; ``None``: a linear layer) and ``aux_loss(features, batch)`` (an
auxiliary loss weighted by ``backbone.aux_weight``; ``None``: none).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import torch
from torch import Tensor, nn

from cbm.models.config import BackboneConfig, DataInfo
from cbm.models.pooling import AdaptiveAvgPool2d

_REGISTRY: dict[str, Callable[[BackboneConfig, DataInfo], Backbone]] = {}
#: Backbones that live in their own module, imported on first use.
_LAZY = {"sudoku_cells": "cbm.models.backbones_sudoku"}
_AUTO = {"image": "cnn", "tabular": "mlp", "text": "text_bag"}


class Backbone(nn.Module):
    """An encoder ``x -> features [B, out_dim]`` and its optional hooks."""

    out_dim: int

    def make_concept_layer(self, n_concepts: int) -> nn.Module | None:
        """The encoder's own ``features -> concept logits`` layer, or ``None`` (a linear layer is used)."""
        return None

    def aux_loss(self, features: Tensor | None, batch: dict[str, Tensor]) -> Tensor | None:
        """An auxiliary training loss, or ``None``."""
        return None


def register_backbone(name: str):
    """Decorator adding a ``(cfg, info) -> nn.Module`` builder to the registry."""

    def deco(fn):
        _REGISTRY[name] = fn
        return fn

    return deco


def build_backbone(cfg: BackboneConfig, info: DataInfo) -> Backbone:
    """Instantiate the configured backbone (``auto``: by dataset and modality); it exposes ``out_dim``."""
    name = cfg.name
    if name == "auto":  # Sudoku boards get the per-cell digit reader, everything else goes by modality
        name = "sudoku_cells" if (info.dataset, info.modality) == ("sudoku", "image") else _AUTO[info.modality]
    if name not in _REGISTRY and name in _LAZY:
        importlib.import_module(_LAZY[name])
    if name not in _REGISTRY:
        raise ValueError(f"unknown backbone '{name}'")
    expected = {"cnn": "image", "plain_cnn": "image", "resnet18": "image", "resnet50": "image", "vit_b_16": "image", "hf": "image", "mlp": "tabular",
                "text_bag": "text"}.get(name)  # fmt: skip
    if expected and expected != info.modality:
        raise ValueError(f"backbone '{name}' needs {expected} data, but the dataset is {info.modality}")
    return _REGISTRY[name](cfg, info)


def mlp(sizes: list[int], dropout: float = 0.0, last_act: bool = False) -> nn.Sequential:
    """Linear/ReLU stack through ``sizes``."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2 or last_act:
            layers.append(nn.ReLU())
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
    return nn.Sequential(*layers)


class SmallCNN(Backbone):
    """Conv-BN-ReLU-pool blocks, pooled to a fixed ``grid x grid`` map and flattened.

    Keeping a coarse spatial grid (rather than a global average) tells the projection
    *where* a part is: knees and elbows are both round joints, told apart by height.
    """

    def __init__(self, cfg: BackboneConfig, in_channels: int):
        super().__init__()
        blocks: list[nn.Module] = []
        c = in_channels
        for width in cfg.channels:
            # pool before ReLU: max and ReLU commute (both monotone), so the output and the gradients are
            # the same as conv-BN-ReLU-pool, bit for bit, with the ReLU on a quarter of the elements
            blocks += [nn.Conv2d(c, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.MaxPool2d(2, ceil_mode=True), nn.ReLU()]
            c = width
        self.features = nn.Sequential(*blocks, AdaptiveAvgPool2d(cfg.grid))  # deterministic on CUDA
        self.proj = nn.Sequential(nn.Flatten(), nn.Dropout(cfg.dropout), nn.Linear(c * cfg.grid**2, cfg.out_dim), nn.ReLU())
        self.out_dim = cfg.out_dim

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(self.features(x))


@register_backbone("cnn")
def _cnn(cfg: BackboneConfig, info: DataInfo) -> nn.Module:
    return SmallCNN(cfg, in_channels=info.in_shape[0])


class PlainCNN(Backbone):
    """concept-benchmark 0.4.1's robot CNNs: ``3x3`` conv + ReLU blocks (``channels``), no batch norm,
    each followed by a ``2x2`` max pool when ``maxpool`` is set, flattened as they are (no
    projection): ``out_dim = channels[-1] * H' * W'``.

    * ``maxpool: false`` is its concept encoder below 128 px (``RobotConceptClassifier``: "no pooling,
      keep all spatial information"); at 32 px the features are 64 x 32 x 32 = 65,536 wide, and the
      CBM's linear concept layer over them is its one ``Linear(65536, 1)`` per concept.
    * ``maxpool: true`` is its DNN's feature extractor (``RobotClassifierCNN``): 64 x 4 x 4 = 1,024
      features, read by an MLP head (``head.hidden: 128``, ``head.dropout: 0.5``).
    """

    def __init__(self, cfg: BackboneConfig, in_shape: list[int]):
        super().__init__()
        if len(in_shape) != 3:
            raise ValueError(f"backbone 'plain_cnn' needs [C, H, W] images, got input shape {in_shape}")
        c, h, w = in_shape
        blocks: list[nn.Module] = []
        for width in cfg.channels:
            blocks += [nn.Conv2d(c, width, 3, padding=1), nn.ReLU()]
            if cfg.maxpool:
                blocks.append(nn.MaxPool2d(2, 2))
                h, w = h // 2, w // 2
            c = width
        if h < 1 or w < 1:
            raise ValueError(f"backbone 'plain_cnn': {len(cfg.channels)} max pools leave no pixel of a {in_shape[1]}x{in_shape[2]} image")
        self.features = nn.Sequential(*blocks, nn.Flatten())
        self.out_dim = c * h * w

    def forward(self, x: Tensor) -> Tensor:
        return self.features(x)


@register_backbone("plain_cnn")
def _plain_cnn(cfg: BackboneConfig, info: DataInfo) -> nn.Module:
    return PlainCNN(cfg, list(info.in_shape))


class ResNet18(Backbone):
    """torchvision ResNet-18 with random init (no weights are downloaded); its global average
    pooling is the deterministic :class:`~cbm.models.pooling.AdaptiveAvgPool2d`."""

    def __init__(self, cfg: BackboneConfig):
        super().__init__()
        from torchvision.models import resnet18

        net = resnet18(weights=None)
        net.fc = nn.Linear(net.fc.in_features, cfg.out_dim)
        net.avgpool = AdaptiveAvgPool2d(1)
        self.net = net
        self.out_dim = cfg.out_dim

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(self.net(x))


class PretrainedEncoder(Backbone):
    """A torchvision encoder with local weights (:func:`synthetic.real.encoders.build_encoder`: the
    same encoders as the feature cache), then ``Linear(width, out_dim)`` + ReLU; ``freeze`` keeps the
    encoder's weights fixed and its batch norm in eval mode."""

    def __init__(self, cfg: BackboneConfig, info: DataInfo):
        super().__init__()
        from synthetic.real.encoders import build_encoder

        side = int(info.in_shape[1]) if len(info.in_shape) == 3 else None
        enc = build_encoder(cfg.name, str(cfg.weights), image_size=side)
        self.encoder = enc.module
        self.freeze = cfg.freeze
        if cfg.freeze:
            self.encoder.requires_grad_(False)
        self.proj = nn.Sequential(nn.Dropout(cfg.dropout), nn.Linear(enc.out_dim, cfg.out_dim), nn.ReLU())
        self.out_dim = cfg.out_dim

    def train(self, mode: bool = True) -> PretrainedEncoder:
        super().train(mode)
        if self.freeze:
            self.encoder.eval()
        return self

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(self.encoder(x))


@register_backbone("resnet18")
def _resnet(cfg: BackboneConfig, info: DataInfo) -> nn.Module:
    return ResNet18(cfg) if cfg.weights is None else PretrainedEncoder(cfg, info)


@register_backbone("resnet50")
def _resnet50(cfg: BackboneConfig, info: DataInfo) -> nn.Module:
    return PretrainedEncoder(cfg, info)


@register_backbone("vit_b_16")
def _vit(cfg: BackboneConfig, info: DataInfo) -> nn.Module:
    return PretrainedEncoder(cfg, info)


@register_backbone("hf")
def _hf(cfg: BackboneConfig, info: DataInfo) -> nn.Module:
    return PretrainedEncoder(cfg, info)


class TabularMLP(Backbone):
    def __init__(self, cfg: BackboneConfig, in_dim: int):
        super().__init__()
        self.net = mlp([in_dim, *cfg.hidden, cfg.out_dim], cfg.dropout, last_act=True)
        self.out_dim = cfg.out_dim

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x.to(next(self.net.parameters()).dtype))  # the weights' dtype: a float64 model reads float64


@register_backbone("mlp")
def _mlp(cfg: BackboneConfig, info: DataInfo) -> nn.Module:
    return TabularMLP(cfg, in_dim=info.in_shape[0])


class TextBag(Backbone):
    """Token embeddings, a width-3 convolution (so "round head" and "square body" bind
    adjective to noun, which a plain bag of words cannot), max-pool over positions, MLP.
    Token id 0 is padding."""

    def __init__(self, cfg: BackboneConfig, vocab_size: int):
        super().__init__()
        if vocab_size <= 0:
            raise ValueError("text backbone needs the dataset's vocab_size")
        self.embed = nn.Embedding(vocab_size, cfg.embed_dim, padding_idx=0)
        self.conv = nn.Conv1d(cfg.embed_dim, cfg.embed_dim, kernel_size=3, padding=1)
        self.net = mlp([cfg.embed_dim, *cfg.hidden, cfg.out_dim], cfg.dropout, last_act=True)
        self.out_dim = cfg.out_dim

    def forward(self, x: Tensor) -> Tensor:
        ids = x.long()
        h = torch.relu(self.conv(self.embed(ids).transpose(1, 2)))  # [B, E, L]
        h = h.masked_fill((ids == 0).unsqueeze(1), float("-inf")).amax(dim=2)
        return self.net(torch.nan_to_num(h, neginf=0.0))


@register_backbone("text_bag")
def _text(cfg: BackboneConfig, info: DataInfo) -> nn.Module:
    return TextBag(cfg, info.vocab_size)
