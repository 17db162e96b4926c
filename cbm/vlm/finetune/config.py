"""Typed settings of ``cbm-finetune`` (``conf/finetune.yaml`` + ``conf/finetune/{lora_cpu,qlora}.yaml``).

Torch-free, so the command line refuses a bad value in a fraction of a second: every field is
type-checked (an integer is not a float, ``nan`` is not a learning rate) and range-checked, and a
failure is one line naming the field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from cbm.core.validation import check_fields, in_range, nested
from cbm.vlm.finetune.questions import ROBOT_QUESTIONS, SUDOKU_QUESTIONS
from cbm.vlm.images import MAX_IMAGE_PIXELS, check_pixel_limit

BUILD_KINDS = ("robot", "sudoku", "edct")
PRECISIONS = ("32", "bf16")
QUANTS = ("none", "4bit", "8bit")
DTYPES = ("auto", "float32", "bfloat16", "float16")
ATTN_IMPLEMENTATIONS = ("eager", "sdpa", "flash_attention_2", "flex_attention")
ON_BAD = ("skip", "error")
_DEVICE = re.compile(r"^(auto|cpu|cuda|cuda:\d+)$")
#: The paper's saliency map: layers 7 to 12 (1-based, inclusive), 25th-percentile threshold, squared.
PAPER_LAYERS = (7, 12)
PAPER_PERCENTILE = 25.0
PAPER_SHARPEN = 2.0


def check_device_name(device: str, where: str) -> None:
    """``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (whether it exists is the command's check)."""
    if not _DEVICE.match(device):
        raise ValueError(f"{where}: '{device}' is not one of auto, cpu, cuda, cuda:N")


@dataclass
class ModelSettings:
    WHERE: ClassVar[str] = "model."
    path: str = ""
    #: Weight dtype (float32 | bfloat16 | float16); ``auto``: the checkpoint's own. quant 4bit / 8bit: bf16.
    dtype: str = "auto"
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    attn_implementation: str | None = "eager"  # eager: attention weights for localisation
    end_of_turn: str | None = None  # null: the tokenizer's eos token

    def __post_init__(self) -> None:
        check_fields(self, self.WHERE)
        if not self.path:
            raise ValueError("model.path: required (a local Hugging Face VLM directory; python -m cbm.vlm.tiny DIR writes a tiny one)")
        if self.dtype not in DTYPES:
            raise ValueError(f"model.dtype: '{self.dtype}' is not one of {', '.join(DTYPES)}")
        check_device_name(self.device, "model.device")
        if self.attn_implementation is not None and self.attn_implementation not in ATTN_IMPLEMENTATIONS:
            raise ValueError(f"model.attn_implementation: '{self.attn_implementation}' is not one of {', '.join(ATTN_IMPLEMENTATIONS)} or null")
        if self.end_of_turn is not None and not self.end_of_turn:
            raise ValueError("model.end_of_turn: an empty token; null means the tokenizer's eos token")


@dataclass
class DataSettings:
    WHERE: ClassVar[str] = "data."
    jsonl: str | None = None  # rows (image, question, answer, split, pair_id[, mask, meta]); null: build a set
    build: str = "robot"  # robot | sudoku | edct (when jsonl is null)
    n: int = 24  # robots / boards to build pairs from
    parts: list[str] = field(default_factory=lambda: ["knees", "feet", "mouth"])  # robot questions
    questions: list[str] = field(default_factory=lambda: ["digit"])  # Sudoku questions: digit | row_valid
    cells_per_board: int = 2
    #: Generator settings over the build's defaults (robot: ``{image_size: 64}``); edct: ``{run_dir: ...}``.
    source: dict[str, Any] | None = None
    cache_dir: str | None = None
    on_bad: str = "skip"
    eval_fraction: float = 0.25  # share of pairs held out for evaluation (split by pair_id)
    max_image_pixels: int = MAX_IMAGE_PIXELS  # larger images are bad rows (read from the header, never decoded)

    def __post_init__(self) -> None:
        check_fields(self, self.WHERE)
        if self.jsonl is None and self.build not in BUILD_KINDS:
            raise ValueError(f"data.build: '{self.build}' is not one of {', '.join(BUILD_KINDS)}")
        if self.jsonl is not None and not self.jsonl:
            raise ValueError("data.jsonl: an empty path; null builds a set (data.build)")
        if self.on_bad not in ON_BAD:
            raise ValueError(f"data.on_bad: '{self.on_bad}' is not one of {', '.join(ON_BAD)}")
        in_range("data.eval_fraction", self.eval_fraction, 0, 1, lo_open=True, hi_open=True)
        in_range("data.n", self.n, 1, 1_000_000)
        in_range("data.cells_per_board", self.cells_per_board, 1, 81)
        check_pixel_limit(self.max_image_pixels, "data.max_image_pixels")
        for name, values, known in (("parts", self.parts, ROBOT_QUESTIONS), ("questions", self.questions, SUDOKU_QUESTIONS)):
            if not values:
                raise ValueError(f"data.{name}: an empty list (choose from: {', '.join(known)})")
            unknown = sorted(set(values) - set(known))
            if unknown:
                raise ValueError(f"data.{name}: {unknown} unknown (choose from: {', '.join(known)})")
        if self.jsonl is None and self.build == "edct" and not (self.source or {}).get("run_dir"):
            raise ValueError("data.source: data.build=edct needs the cbm-edct run: 'data.source={run_dir: outputs/edct/<run>}'")


@dataclass
class LoraSettings:
    WHERE: ClassVar[str] = "lora."
    r: int = 16
    alpha: float = 32
    dropout: float = 0.05
    #: null: every linear layer of the language model; else a list of module-name suffixes or one regex.
    target_modules: list[str] | str | None = None
    projector: bool = False  # also adapt the vision -> language projector
    extra: dict[str, Any] | None = None  # more peft.LoraConfig fields, e.g. {use_rslora: true}

    def __post_init__(self) -> None:
        check_fields(self, self.WHERE)
        in_range("lora.r", self.r, 1, 4096)
        in_range("lora.alpha", self.alpha, 0, 1e6, lo_open=True)
        in_range("lora.dropout", self.dropout, 0, 1, hi_open=True)
        if self.target_modules is not None and not self.target_modules:
            raise ValueError("lora.target_modules: empty; null adapts every linear layer of the language model")
        if isinstance(self.target_modules, str):
            try:
                re.compile(self.target_modules)
            except re.error as err:
                raise ValueError(f"lora.target_modules: {self.target_modules!r} is not a regular expression ({err})") from None


@dataclass
class TrainSettings:
    WHERE: ClassVar[str] = "train."
    epochs: int = 3
    max_steps: int = -1  # >= 1 stops earlier
    batch_size: int = 4
    #: Batches whose gradients are summed (loss / grad_accum) before each optimiser step.
    grad_accum: int = 1
    lr: float = 2e-4
    weight_decay: float = 0.0
    #: Recompute activations in the backward pass (non-reentrant): less memory, a third more ops per step
    #: (host time the GPU waits on with small models). Turn on when a step runs out of memory.
    gradient_checkpointing: bool = False
    precision: str | int = "32"  # 32 | bf16 (autocast on CUDA)
    #: Optimiser steps between logged ``train/loss`` rows (the last step is always logged).
    log_every: int = 1

    def __post_init__(self) -> None:
        check_fields(self, self.WHERE)
        self.precision = str(self.precision)
        in_range("train.epochs", self.epochs, 1, 1_000_000)
        if self.max_steps != -1:
            in_range("train.max_steps (-1: no limit)", self.max_steps, 1, 10**9)
        in_range("train.batch_size", self.batch_size, 1, 65536)
        in_range("train.grad_accum", self.grad_accum, 1, 65536)
        in_range("train.lr", self.lr, 0, 1, lo_open=True)
        in_range("train.weight_decay", self.weight_decay, 0, 1e3)
        in_range("train.log_every", self.log_every, 1, 10**9)
        if self.precision not in PRECISIONS:
            raise ValueError(f"train.precision: '{self.precision}' is not one of {', '.join(PRECISIONS)}")


@dataclass
class EvalSettings:
    WHERE: ClassVar[str] = "eval."
    #: Also evaluate the held-out pairs before training (the before / after comparison); false: after only.
    before: bool = True
    max_new_tokens: int = 8
    #: Localisation score: the answer's share of image attention inside the row's mask (needs eager attention).
    localise: bool = True
    pool_threshold: float = 0.0
    heatmaps: int = 4  # pairs drawn (original and counterfactual, before and after)
    attention_layers: list[int] = field(default_factory=lambda: list(PAPER_LAYERS))  # [first, last], 1-based, clipped to the depth
    threshold_percentile: float = PAPER_PERCENTILE
    sharpen: float = PAPER_SHARPEN

    def __post_init__(self) -> None:
        check_fields(self, self.WHERE)
        in_range("eval.max_new_tokens", self.max_new_tokens, 1, 4096)
        in_range("eval.heatmaps", self.heatmaps, 0, 100_000)
        in_range("eval.pool_threshold", self.pool_threshold, 0, 1, hi_open=True)
        in_range("eval.threshold_percentile", self.threshold_percentile, 0, 100, hi_open=True)
        in_range("eval.sharpen", self.sharpen, 0, 16, lo_open=True)
        if len(self.attention_layers) != 2:
            raise ValueError(f"eval.attention_layers: {self.attention_layers} is not [first, last] (1-based layers, e.g. [7, 12])")
        for v in self.attention_layers:
            in_range("eval.attention_layers", v, 1, 100_000)
        if self.attention_layers[0] > self.attention_layers[1]:
            raise ValueError(f"eval.attention_layers: first {self.attention_layers[0]} after last {self.attention_layers[1]}")


@dataclass
class FinetuneConfig:
    WHERE: ClassVar[str] = ""
    output_dir: str
    model: ModelSettings
    data: DataSettings = field(default_factory=DataSettings)
    quant: str = "none"
    lora: LoraSettings = field(default_factory=LoraSettings)
    train: TrainSettings = field(default_factory=TrainSettings)
    eval: EvalSettings = field(default_factory=EvalSettings)
    merge: bool = False  # also save the base model with the adapter merged in
    seed: int = 0
    #: W&B (``logger.wandb``, as cbm-train's; CSV always); a config built in code with none: W&B off.
    logger: dict[str, Any] = field(default_factory=dict)
    progress: bool | None = None

    def __post_init__(self) -> None:
        from cbm.config.train import LoggerConfig
        from cbm.core.validation import to_dataclass

        for name, cls in (("model", ModelSettings), ("data", DataSettings), ("lora", LoraSettings), ("train", TrainSettings), ("eval", EvalSettings)):
            setattr(self, name, nested(cls, getattr(self, name), name))
        check_fields(self, self.WHERE)
        in_range("seed", self.seed, 0, 2**32 - 1)
        to_dataclass(LoggerConfig, self.logger, "logger")
        if self.quant not in QUANTS:
            raise ValueError(f"quant: '{self.quant}' is not one of {', '.join(QUANTS)}")
        if self.merge and self.quant != "none":
            raise ValueError("merge=true needs quant=none (merge into the full-precision base, then quantise if you want)")
        if self.eval.localise and self.model.attn_implementation != "eager":
            raise ValueError("eval.localise=true reads the attention weights: it needs model.attn_implementation=eager (or eval.localise=false)")
        if self.quant != "none" and self.model.device == "cpu":
            raise ValueError(f"quant={self.quant} (QLoRA) needs a CUDA GPU, not model.device=cpu (on the CPU use finetune=lora_cpu)")
