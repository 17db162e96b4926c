"""Typed settings of ``cbm-finetune`` (``conf/finetune.yaml`` + ``conf/finetune/{lora_cpu,qlora}.yaml``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cbm.vlm.finetune.data import ON_BAD
from cbm.vlm.finetune.model import QUANTS, LoraSettings

BUILD_KINDS = ("robot", "sudoku", "edct")
PRECISIONS = ("32", "bf16")


@dataclass
class ModelSettings:
    path: str = ""
    dtype: str = "auto"
    device: str = "auto"
    attn_implementation: str | None = "eager"  # eager: attention weights for localisation
    end_of_turn: str | None = None  # null: the tokenizer's eos token

    def __post_init__(self) -> None:
        if not self.path:
            raise ValueError("model.path: required (a local Hugging Face VLM directory; python -m cbm.vlm.tiny DIR writes a tiny one)")
        if not Path(self.path).expanduser().is_dir():
            raise ValueError(f"model.path: no model directory at '{self.path}' (no downloads: a local directory)")


@dataclass
class DataSettings:
    jsonl: str | None = None  # rows (image, question, answer, split, pair_id[, mask]); null: build a set
    build: str = "robot"  # robot | sudoku | edct (when jsonl is null)
    n: int = 24  # robots / boards to build pairs from
    parts: list[str] = field(default_factory=lambda: ["knees", "feet", "mouth"])  # robot questions
    questions: list[str] = field(default_factory=lambda: ["digit"])  # Sudoku questions: digit | row_valid
    cells_per_board: int = 2
    source: dict[str, Any] = field(default_factory=dict)  # generator config (robot / sudoku), edct: {run_dir: ...}
    cache_dir: str | None = None
    on_bad: str = "skip"
    eval_fraction: float = 0.25  # share of pairs held out for evaluation (split by pair_id)

    def __post_init__(self) -> None:
        if self.jsonl is None and self.build not in BUILD_KINDS:
            raise ValueError(f"data.build: '{self.build}' is not one of {', '.join(BUILD_KINDS)}")
        if self.on_bad not in ON_BAD:
            raise ValueError(f"data.on_bad: '{self.on_bad}' is not one of {', '.join(ON_BAD)}")
        if not 0 < self.eval_fraction < 1:
            raise ValueError(f"data.eval_fraction: must lie in (0, 1), got {self.eval_fraction}")
        if self.n < 1:
            raise ValueError(f"data.n: must be >= 1, got {self.n}")


@dataclass
class TrainSettings:
    epochs: int = 3
    max_steps: int = -1  # > 0 stops earlier
    batch_size: int = 4
    grad_accum: int = 1
    lr: float = 2e-4
    weight_decay: float = 0.0
    gradient_checkpointing: bool = True
    precision: str = "32"  # 32 | bf16 (autocast on CUDA)
    log_every: int = 1

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 1 or self.grad_accum < 1 or self.log_every < 1:
            raise ValueError("train: epochs, batch_size, grad_accum and log_every must be >= 1")
        if self.lr <= 0:
            raise ValueError(f"train.lr: must be > 0, got {self.lr}")
        if str(self.precision) not in PRECISIONS:
            raise ValueError(f"train.precision: '{self.precision}' is not one of {', '.join(PRECISIONS)}")


@dataclass
class EvalSettings:
    before: bool = True
    max_new_tokens: int = 8
    localise: bool = True
    pool_threshold: float = 0.0
    heatmaps: int = 4  # pairs drawn (original and counterfactual, before and after)

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1 or self.heatmaps < 0 or not 0 <= self.pool_threshold < 1:
            raise ValueError("eval: max_new_tokens >= 1, heatmaps >= 0 and pool_threshold in [0, 1)")


@dataclass
class FinetuneConfig:
    output_dir: str
    model: ModelSettings
    data: DataSettings = field(default_factory=DataSettings)
    quant: str = "none"
    lora: LoraSettings = field(default_factory=LoraSettings)
    train: TrainSettings = field(default_factory=TrainSettings)
    eval: EvalSettings = field(default_factory=EvalSettings)
    merge: bool = False  # also save the base model with the adapter merged in
    seed: int = 0
    logger: dict[str, Any] = field(default_factory=dict)
    progress: bool | None = None

    def __post_init__(self) -> None:
        for name, cls in (("model", ModelSettings), ("data", DataSettings), ("lora", LoraSettings), ("train", TrainSettings), ("eval", EvalSettings)):
            value = getattr(self, name)
            if isinstance(value, dict):
                try:
                    setattr(self, name, cls(**value))
                except TypeError as err:
                    raise ValueError(f"{name}: {err}") from None
        if self.quant not in QUANTS:
            raise ValueError(f"quant: '{self.quant}' is not one of {', '.join(QUANTS)}")
        if self.merge and self.quant != "none":
            raise ValueError("merge=true needs quant=none (merge into the full-precision base, then quantise if you want)")
