"""Typed schema of ``conf/train.yaml`` (everything but the ``data`` and ``model`` groups,
which are validated by their own dataclasses)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class TrainerConfig:
    max_epochs: int = 10
    accelerator: str = "auto"
    devices: Any = 1
    strategy: str = "auto"
    precision: str = "32-true"
    deterministic: bool = True
    #: Stop when ``val/task_loss`` has not improved for this many epochs; 0 disables.
    early_stopping_patience: int = 0
    log_every_n_steps: int = 10
    enable_progress_bar: bool = True
    gradient_clip_val: float = 0.0

    def __post_init__(self) -> None:
        if self.max_epochs < 1:
            raise ValueError(f"trainer.max_epochs must be >= 1, got {self.max_epochs}")
        if self.accelerator not in ("auto", "cpu", "gpu", "cuda", "mps"):
            raise ValueError(f"trainer.accelerator must be auto, cpu, gpu, cuda or mps, got '{self.accelerator}'")
        if self.early_stopping_patience < 0:
            raise ValueError("trainer.early_stopping_patience must be >= 0")


@dataclass
class WandbConfig:
    enabled: bool = True
    #: ``offline`` needs no account or network; ``online`` needs an API key.
    mode: str = "offline"
    project: str = "cbm"
    entity: str | None = None
    name: str | None = None
    tags: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.mode not in ("offline", "online", "disabled"):
            raise ValueError(f"logger.wandb.mode must be offline, online or disabled, got '{self.mode}'")


@dataclass
class LoggerConfig:
    wandb: WandbConfig = field(default_factory=WandbConfig)


@dataclass
class OracleConfig:
    """Test-time oracle interventions reported by ``cbm-train`` (random concepts, true values)."""

    #: Budgets: integers or ``max`` (all concepts).
    ks: list[Any] = field(default_factory=lambda: [0, 1, 3, "max"])
    seed: int = 0

    def __post_init__(self) -> None:
        for k in self.ks:
            if not (k == "max" or (isinstance(k, int) and k >= 0)):
                raise ValueError(f"interventions.ks entries must be integers >= 0 or 'max', got {k!r}")


@dataclass
class TrainConfig:
    seed: int = 0
    batch_size: int = 64
    eval_batch_size: int = 1024
    cache_dir: str | None = ".cache/cbm"
    output_dir: str = "."
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    interventions: OracleConfig = field(default_factory=OracleConfig)

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.eval_batch_size < 1:
            raise ValueError("batch_size and eval_batch_size must be >= 1")
