"""Typed schemas of ``conf/model/*.yaml`` shared by all architectures."""

from __future__ import annotations

from dataclasses import dataclass, field

BACKBONES = ("auto", "cnn", "resnet18", "mlp", "text_bag", "sudoku_cells")
TRAINING_MODES = ("independent", "sequential", "joint")


@dataclass
class BackboneConfig:
    """Encoder ``x -> features``; ``auto`` picks by modality (cnn / mlp / text_bag)."""

    name: str = "auto"
    channels: list[int] = field(default_factory=lambda: [16, 32, 64])
    #: CNN: side of the pooled feature map that is flattened (1 = global average pooling).
    grid: int = 4
    hidden: list[int] = field(default_factory=lambda: [128, 128])
    out_dim: int = 128
    embed_dim: int = 64
    dropout: float = 0.0
    #: Auxiliary supervision weight for backbones that define ``aux_loss`` (Sudoku digits).
    aux_weight: float = 0.0

    def __post_init__(self) -> None:
        if self.name not in BACKBONES:
            raise ValueError(f"backbone.name must be one of {BACKBONES}, got '{self.name}'")
        if self.out_dim <= 0 or self.embed_dim <= 0 or self.grid <= 0 or any(h <= 0 for h in [*self.channels, *self.hidden]):
            raise ValueError("backbone sizes must be positive")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"backbone.dropout must be in [0, 1), got {self.dropout}")


@dataclass
class HeadConfig:
    """Label predictor over concepts: ``linear`` or ``mlp``."""

    kind: str = "linear"
    hidden: int = 64
    layers: int = 2

    def __post_init__(self) -> None:
        if self.kind not in ("linear", "mlp"):
            raise ValueError(f"head.kind must be 'linear' or 'mlp', got '{self.kind}'")
        if self.hidden <= 0 or self.layers < 1:
            raise ValueError("head.hidden must be > 0 and head.layers >= 1")


@dataclass
class OptimConfig:
    name: str = "adam"
    lr: float = 1e-3
    #: Learning rate of the label predictor (``head``); ``None`` uses ``lr``. The head of an
    #: independent CBM is a small convex problem that converges far faster at a higher rate.
    head_lr: float | None = None
    weight_decay: float = 0.0
    scheduler: str = "none"

    def __post_init__(self) -> None:
        if self.name not in ("adam", "adamw", "sgd"):
            raise ValueError(f"optim.name must be adam, adamw or sgd, got '{self.name}'")
        if self.lr <= 0 or (self.head_lr is not None and self.head_lr <= 0):
            raise ValueError(f"optim.lr and optim.head_lr must be > 0, got {self.lr}, {self.head_lr}")
        if self.scheduler not in ("none", "cosine"):
            raise ValueError(f"optim.scheduler must be 'none' or 'cosine', got '{self.scheduler}'")


@dataclass
class ModelConfig:
    """Fields every architecture has; architectures subclass it with their own knobs."""

    name: str = "cbm"
    #: CBM training scheme (independent / sequential / joint); other architectures train jointly.
    training: str = "joint"
    concept_loss_weight: float = 1.0
    task_loss_weight: float = 1.0
    #: Sequential training: fraction of epochs spent on the concept encoder before the head.
    sequential_concept_fraction: float = 0.5
    #: Alignment constraint: these concepts' contribution to the head is forced to zero.
    zero_concepts: list[str] = field(default_factory=list)
    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    head: HeadConfig = field(default_factory=HeadConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)

    def __post_init__(self) -> None:
        if self.training not in TRAINING_MODES:
            raise ValueError(f"model.training must be one of {TRAINING_MODES}, got '{self.training}'")
        if self.concept_loss_weight < 0 or self.task_loss_weight < 0:
            raise ValueError("loss weights must be >= 0")
        if not 0.0 < self.sequential_concept_fraction < 1.0:
            raise ValueError("model.sequential_concept_fraction must be in (0, 1)")


@dataclass
class DataInfo:
    """What a model needs to know about its dataset (stored in checkpoints)."""

    dataset: str
    modality: str
    in_shape: list[int]
    concept_names: list[str]
    class_names: list[str]
    vocab_size: int = 0
    #: Fingerprint of the data config, so a checkpoint of another dataset is refused.
    data_hash: str = ""

    @property
    def n_concepts(self) -> int:
        return len(self.concept_names)

    @property
    def n_classes(self) -> int:
        return len(self.class_names)
