"""Typed schema of ``conf/train.yaml`` (everything but the ``data`` and ``model`` groups,
which are validated by their own dataclasses)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cbm.config.budgets import check_budgets

PRECISIONS = ("32-true", "32", "bf16-mixed", "bf16-true", "16-mixed", "16-true", "64-true", "64")
#: More epochs than any run here could finish (a typo such as 1e23 is refused, not started).
MAX_EPOCHS = 1_000_000
STRATEGIES = ("auto", "ddp", "ddp_spawn", "ddp_find_unused_parameters_true", "fsdp", "deepspeed")


#: ``trainer.checkpoint_monitor`` -> (logged metric, mode); ``last`` keeps the final epoch.
CHECKPOINT_MONITORS: dict[str, tuple[str | None, str]] = {
    "task_loss": ("val/task_loss", "min"),
    "task_acc": ("val/task_acc", "max"),
    "concept_auroc": ("val/concept_auroc", "max"),
    #: concept-benchmark 0.4.1's early-stopping score: the mean over concepts of each one's F1 at 0.5
    "concept_f1": ("val/concept_f1", "max"),
    "last": (None, "min"),
}


@dataclass
class TrainerConfig:
    max_epochs: int = 10
    #: auto | cpu | gpu | cuda | mps
    accelerator: str = "auto"
    #: Devices per node: a count (>= 1), a list of indices, or ``auto``.
    devices: Any = 1
    #: Machines in a multi-node run (Lightning ``num_nodes``); total processes = devices x num_nodes.
    num_nodes: int = 1
    strategy: str = "auto"
    precision: str = "32-true"
    #: Deterministic kernels everywhere (every model here has a deterministic CUDA backward).
    deterministic: bool = True
    #: Keep the in-memory splits on the training device (no host-to-device copy per step).
    data_on_device: bool = True
    #: Synchronise BatchNorm statistics across processes (DDP).
    sync_batchnorm: bool = False
    #: Compile the encoder with ``torch.compile`` (``nn.Module.compile``: checkpoints keep their keys).
    compile: bool = False
    #: Which epoch ``checkpoints/best.ckpt`` keeps (and early stopping watches): ``task_loss`` (lowest
    #: ``val/task_loss``), ``task_acc`` / ``concept_auroc`` / ``concept_f1`` (highest; ``concept_f1`` is
    #: the mean of the per-concept F1 at 0.5, concept-benchmark 0.4.1's), or ``last`` (the final epoch).
    #: An independent CBM's head is fit on annotated concepts, so its validation task loss may be
    #: lowest at an early epoch whose concept detectors are still poor: ``concept_auroc`` or ``last``.
    checkpoint_monitor: str = "task_loss"
    #: Stop when the monitored metric has not improved for this many epochs; 0 disables.
    early_stopping_patience: int = 0
    #: An epoch counts as an improvement for early stopping only when it beats the best by more
    #: than this (in the monitored metric's units: a loss, or an accuracy / AUROC in [0, 1]).
    early_stopping_min_delta: float = 0.0
    #: Optimiser steps between W&B step rows (training loss, learning rates); the CSV log is per epoch.
    log_every_n_steps: int = 10
    #: ``auto``: only when the output is a terminal (else one log line per epoch); or true / false.
    enable_progress_bar: Any = "auto"
    gradient_clip_val: float = 0.0
    #: Training / validation batches per epoch: a fraction of the split (1.0 = all) or a count
    #: (smoke runs over datasets too large for a whole epoch).
    limit_train_batches: Any = 1.0
    #: Validation batches per epoch: a fraction of the split (1.0 = all) or a batch count.
    limit_val_batches: Any = 1.0

    def __post_init__(self) -> None:
        for name in ("limit_train_batches", "limit_val_batches"):
            v = getattr(self, name)
            fraction = isinstance(v, float) and 0.0 < v <= 1.0
            count = isinstance(v, int) and not isinstance(v, bool) and v >= 1
            if not (fraction or count):
                raise ValueError(f"trainer.{name} must be a fraction in (0, 1] or a batch count >= 1, got {v!r}")
        if self.max_epochs < 1:
            raise ValueError(f"trainer.max_epochs must be >= 1, got {self.max_epochs}")
        if self.max_epochs > MAX_EPOCHS:
            raise ValueError(f"trainer.max_epochs must be <= {MAX_EPOCHS:,} (more than any run could finish), got {self.max_epochs:,}")
        if self.accelerator not in ("auto", "cpu", "gpu", "cuda", "mps"):
            raise ValueError(f"trainer.accelerator must be auto, cpu, gpu, cuda or mps, got '{self.accelerator}'")
        d = self.devices
        ok = (
            d == "auto"
            or (isinstance(d, int) and not isinstance(d, bool) and d >= 1)
            or (isinstance(d, list) and d and all(isinstance(i, int) and i >= 0 for i in d))
        )
        if not ok:
            raise ValueError(f"trainer.devices must be a count >= 1, a list of device indices or 'auto', got {d!r}")
        if self.num_nodes < 1:
            raise ValueError(f"trainer.num_nodes must be >= 1, got {self.num_nodes}")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"trainer.strategy must be one of {STRATEGIES}, got '{self.strategy}'")
        if str(self.precision) not in PRECISIONS:
            raise ValueError(f"trainer.precision must be one of {PRECISIONS}, got '{self.precision}'")
        if self.early_stopping_patience < 0:
            raise ValueError("trainer.early_stopping_patience must be >= 0")
        if not 0.0 <= self.early_stopping_min_delta < 1.0:
            raise ValueError(f"trainer.early_stopping_min_delta must be in [0, 1), got {self.early_stopping_min_delta}")
        if self.checkpoint_monitor not in CHECKPOINT_MONITORS:
            raise ValueError(f"trainer.checkpoint_monitor must be one of {tuple(CHECKPOINT_MONITORS)}, got '{self.checkpoint_monitor}'")
        if self.checkpoint_monitor == "last" and self.early_stopping_patience > 0:
            raise ValueError("trainer.early_stopping_patience needs a metric to watch: not with checkpoint_monitor=last")
        if self.log_every_n_steps < 1:
            raise ValueError(f"trainer.log_every_n_steps must be >= 1, got {self.log_every_n_steps}")
        if self.enable_progress_bar not in (True, False, "auto"):
            raise ValueError(f"trainer.enable_progress_bar must be true, false or auto, got {self.enable_progress_bar!r}")
        if self.gradient_clip_val < 0:
            raise ValueError(f"trainer.gradient_clip_val must be >= 0 (0 disables clipping), got {self.gradient_clip_val}")


#: What W&B refuses in a project name (``wandb.Settings.validate_project``); an entity is held to the same.
NAME_FORBIDS = "/\\#?%:"
MAX_NAME_CHARS = 128
#: The longest tag W&B takes (``wandb.Settings.validate_run_tags``: 1 to 64 characters).
MAX_TAG_CHARS = 64

#: W&B job types, one per command.
JOB_TYPES = ("train", "intervene", "automate", "report", "finetune", "edct", "icl")


@dataclass
class WandbSettings:
    """What every W&B run of a command or an experiment shares (``cbm.tracking.wandb_run``)."""

    #: ``offline`` needs no account or network; ``online`` needs an API key.
    mode: str = "offline"
    project: str = "cbm"
    entity: str | None = None
    tags: list[str] = field(default_factory=list)
    notes: str | None = None
    #: Log the best and last checkpoints as a ``model`` artifact (cbm-train; adapters for cbm-finetune).
    log_model: bool = False
    #: Log the dataset as a ``dataset`` artifact named by its cache key (its generator config).
    log_dataset: bool = False

    def __post_init__(self) -> None:
        if self.mode not in ("offline", "online", "disabled"):
            raise ValueError(f"logger.wandb.mode must be offline, online or disabled, got '{self.mode}'")
        for key in ("project", "entity"):
            name = getattr(self, key)
            if name is not None and (not str(name).strip() or len(str(name)) > MAX_NAME_CHARS or any(ch in str(name) for ch in NAME_FORBIDS)):
                raise ValueError(f"logger.wandb.{key} must be a plain name of at most {MAX_NAME_CHARS} characters (no / \\ # ? % :), got '{name}'")
        for tag in map(str, self.tags):
            if not 1 <= len(tag) <= MAX_TAG_CHARS:
                shown = tag if len(tag) <= 24 else tag[:20] + "..."
                raise ValueError(f"logger.wandb.tags: a tag must be 1 to {MAX_TAG_CHARS} characters (W&B's limit), got {len(tag)}: '{shown}'")


@dataclass
class WandbConfig(WandbSettings):
    #: ``null``: as the training run the command reads (cbm-intervene, cbm-automate); cbm-train: on.
    enabled: bool | None = True
    #: Default: the run directory's Hydra-job name (with the swept settings of a multirun).
    name: str | None = None
    #: Default: a multirun sweep or an experiment is one group (its directory); a cbm-intervene /
    #: cbm-automate run joins the group of the training run it reads.
    group: str | None = None
    #: Default: the command's (train, intervene, automate, report, finetune, edct, icl).
    job_type: str | None = None


@dataclass
class LoggerConfig:
    wandb: WandbConfig = field(default_factory=WandbConfig)


def follow_logger() -> LoggerConfig:
    """The logger of a command that reads a training run: W&B when that run logged to W&B."""
    return LoggerConfig(wandb=WandbConfig(enabled=None))


@dataclass
class OracleConfig:
    """Test-time oracle interventions reported by ``cbm-train`` (random concepts, true values)."""

    #: Budgets: integers or ``max`` (all concepts).
    ks: list[Any] = field(default_factory=lambda: [0, 1, 3, "max"])
    seed: int = 0

    def __post_init__(self) -> None:
        if self.seed < 0:
            raise ValueError(f"interventions.seed must be >= 0, got {self.seed}")
        check_budgets(self.ks, "interventions.ks", allow_empty=True)


#: Metrics a sweeper can optimise: the kept checkpoint's on the validation or the test split.
OBJECTIVES = tuple(f"{split}/{m}" for split in ("val", "test") for m in ("task_acc", "task_loss", "concept_acc", "concept_auroc", "concept_f1"))


@dataclass
class TrainConfig:
    seed: int = 0
    batch_size: int = 64
    eval_batch_size: int = 1024
    cache_dir: str | None = ".cache/cbm"
    #: memory | disk | render: disk renders the images in chunks into a file in cache_dir and reads
    #: them batch by batch (datasets larger than memory); render draws each batch's images when it
    #: is read (nothing stored); the same bytes every way.
    data_storage: str = "memory"
    #: batches read ahead by background threads when the images are on disk or rendered per batch
    data_prefetch: int = 2
    output_dir: str = "."
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    interventions: OracleConfig = field(default_factory=OracleConfig)
    #: What the run returns to a Hydra sweeper that optimises (``hydra/sweeper=optuna``): a metric of
    #: the kept checkpoint (``val/task_acc`` ...); ``null``: the metrics (the basic sweeper's table).
    objective: str | None = None

    def __post_init__(self) -> None:
        if self.objective is not None and self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {list(OBJECTIVES)} or null, got '{self.objective}'")
        if not 0 <= self.seed < 2**32:
            raise ValueError(f"seed must be in [0, 2**32), got {self.seed}")
        if self.batch_size < 1 or self.eval_batch_size < 1:
            raise ValueError("batch_size and eval_batch_size must be >= 1")
        if self.data_storage not in ("memory", "disk", "render"):
            raise ValueError(f"data_storage must be 'memory', 'disk' or 'render', got '{self.data_storage}'")
        if not isinstance(self.data_prefetch, int) or self.data_prefetch < 0:
            raise ValueError(f"data_prefetch must be a non-negative integer, got {self.data_prefetch!r}")
        if self.data_storage == "disk" and self.cache_dir is None:
            raise ValueError("data_storage=disk needs a cache_dir (the memory-mapped images live there)")
