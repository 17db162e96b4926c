"""Loading a local vision-language model for fine-tuning (optionally 4-bit NF4 on CUDA) and
wrapping it with LoRA on the language model's linear layers (vision tower frozen, projector
optional), gradient checkpointing non-reentrant."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

QUANTS = ("none", "4bit", "8bit")
#: Module-name fragments of vision towers and of vision -> language projectors across families
#: (Qwen2-VL ``visual`` / ``merger``, LLaVA ``vision_tower`` / ``multi_modal_projector``, Idefics3 ``connector``).
VISION_PARTS = ("visual", "vision_tower", "vision_model", "vision_encoder")
PROJECTOR_PARTS = ("merger", "multi_modal_projector", "connector", "mm_projector")
HEAD_NAMES = ("lm_head",)


@dataclass
class LoraSettings:
    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    #: null: every linear layer of the language model; else a list of module-name suffixes or one regex.
    target_modules: list[str] | str | None = None
    projector: bool = False  # also adapt the vision -> language projector
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.r < 1 or self.alpha < 1 or not 0 <= self.dropout < 1:
            raise ValueError(f"lora: r and alpha must be >= 1 and dropout in [0, 1), got r={self.r} alpha={self.alpha} dropout={self.dropout}")


def _is_linear(m: nn.Module) -> bool:
    return isinstance(m, nn.Linear) or type(m).__name__ in ("Linear4bit", "Linear8bitLt")


def language_linear_names(model: nn.Module, projector: bool = False) -> list[str]:
    """Qualified names of the linear layers LoRA adapts by default: the language model's, plus the
    projector's when asked; never the vision tower's or the output head."""
    out = []
    for name, m in model.named_modules():
        if not _is_linear(m):
            continue
        parts = name.split(".")
        if any(p in VISION_PARTS for p in parts) or parts[-1] in HEAD_NAMES:
            if not (projector and any(p in PROJECTOR_PARTS for p in parts)):
                continue
        if any(p in PROJECTOR_PARTS for p in parts) and not projector:
            continue
        out.append(name)
    return out


def load_model(path: str | Path, quant: str = "none", dtype: str = "auto", device: str = "auto", attn_implementation: str | None = None) -> Any:
    """A local ``AutoModelForImageTextToText`` (no downloads). ``quant="4bit"``: NF4 with double
    quantisation and bf16 compute, CUDA only (one clear error otherwise)."""
    from transformers import AutoModelForImageTextToText

    if quant not in QUANTS:
        raise ValueError(f"quant: '{quant}' is not one of {', '.join(QUANTS)}")
    cuda = torch.cuda.is_available()
    dev = device if device != "auto" else ("cuda" if cuda else "cpu")
    kwargs: dict[str, Any] = {"local_files_only": True}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    if quant != "none":
        if not cuda or not dev.startswith("cuda"):
            raise ValueError(f"quant={quant} (QLoRA) needs a CUDA GPU; on the CPU use the plain LoRA config (finetune=lora_cpu, quant=none)")
        try:
            import bitsandbytes  # noqa: F401
            from transformers import BitsAndBytesConfig
        except ImportError:
            raise ValueError(f"quant={quant} needs bitsandbytes: pip install bitsandbytes") from None
        if quant == "4bit":
            kwargs["quantization_config"] = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                                               bnb_4bit_compute_dtype=torch.bfloat16)  # fmt: skip
        else:
            kwargs["quantization_config"] = BitsAndBytesConfig(load_in_8bit=True)
        kwargs["device_map"] = {"": 0 if dev == "cuda" else int(dev.split(":")[1])}
        kwargs["dtype"] = torch.bfloat16
    elif dtype != "auto":
        kwargs["dtype"] = getattr(torch, dtype)
    try:
        model = AutoModelForImageTextToText.from_pretrained(Path(path).expanduser(), **kwargs)
    except (OSError, ValueError, KeyError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"model.path: cannot load a vision-language model from '{path}': {first}") from None
    if quant == "none":
        model.to(dev)
    return model


def add_lora(model: Any, settings: LoraSettings, gradient_checkpointing: bool = True, quantized: bool = False) -> Any:
    """The model with LoRA adapters; only adapter weights train."""
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    targets = settings.target_modules
    if targets is None:
        names = language_linear_names(model, settings.projector)
        if not names:
            raise ValueError("lora: found no linear layer in the language model to adapt")
        targets = "^(" + "|".join(re.escape(n) for n in names) + ")$"
    gc_kwargs = {"use_reentrant": False}
    if quantized:
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=gradient_checkpointing, gradient_checkpointing_kwargs=gc_kwargs)
    elif gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=gc_kwargs)
        model.enable_input_require_grads()
    cfg = LoraConfig(r=settings.r, lora_alpha=settings.alpha, lora_dropout=settings.dropout, target_modules=targets,
                     task_type="CAUSAL_LM", **settings.extra)  # fmt: skip
    peft_model = get_peft_model(model, cfg)
    return peft_model


def trainable_names(model: nn.Module) -> list[str]:
    return [n for n, p in model.named_parameters() if p.requires_grad]
