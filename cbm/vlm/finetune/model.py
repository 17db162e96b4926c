"""Loading a local vision-language model for fine-tuning (optionally 4-bit NF4 on CUDA) and
wrapping it with LoRA on the language model's linear layers (vision tower frozen, projector
optional), gradient checkpointing non-reentrant."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import torch
from torch import nn

from cbm.vlm.finetune.config import QUANTS, LoraSettings
from cbm.vlm.prompt_format import prompt_format

__all__ = ["QUANTS", "LoraSettings", "add_lora", "load_model", "load_processor", "lora_config", "trainable_names"]
#: Module-name fragments of vision towers and of vision -> language projectors across families
#: (Qwen2-VL ``visual`` / ``merger``, LLaVA ``vision_tower`` / ``multi_modal_projector``, Idefics3 ``connector``).
VISION_PARTS = ("visual", "vision_tower", "vision_model", "vision_encoder")
PROJECTOR_PARTS = ("merger", "multi_modal_projector", "connector", "mm_projector")
HEAD_NAMES = ("lm_head",)


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


def _first_line(err: BaseException, limit: int = 200) -> str:
    text = str(err).strip()
    line = text.splitlines()[0] if text else type(err).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."


def check_pickled_weights(path: Path) -> None:
    """Every ``pytorch_model*.bin`` in ``path`` unpickles as plain tensors (``weights_only=True``):
    a pickle that would call anything is refused before anything in it runs."""
    for f in sorted(path.glob("pytorch_model*.bin")):
        try:
            try:
                torch.load(f, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError as err:
                if "mmap" not in str(err):
                    raise
                torch.load(f, map_location="cpu", weights_only=True)  # the legacy (non-zip) format cannot be mapped
        except Exception as err:  # UnpicklingError, RuntimeError (not a zip), EOFError (truncated), ...
            found = re.search(r"Unsupported global: (GLOBAL \S+)", str(err)) or re.search(r"GLOBAL (\S+) was not an allowed global", str(err))
            if found:
                raise ValueError(f"model.path: {f} could run code when loaded ({found.group(1)}): refused "
                                 "(only plain weights load; use safetensors)") from None  # fmt: skip
            detail = re.search(r"WeightsUnpickler error: \s*(\S[^\n]*)", str(err))
            raise ValueError(f"model.path: {f} is not a readable weights file ({detail.group(1) if detail else _first_line(err, 120)})") from None


def _load_error(path: str | Path, what: str, err: BaseException) -> ValueError:
    text = _first_line(err)
    if "Unrecognized configuration class" in str(err) or "does not recognize this architecture" in str(err):
        text = "not a vision-language architecture transformers can load for image-text-to-text"
    return ValueError(f"model.path: cannot load {what} from '{path}': {text}")


def load_processor(path: str | Path) -> Any:
    """The model's processor (tokenizer + image processor), which must carry a chat template unless
    its family has a prompt format of its own (PaliGemma)."""
    from transformers import AutoProcessor

    try:
        processor = AutoProcessor.from_pretrained(Path(path).expanduser(), local_files_only=True)
    except Exception as err:  # transformers raises many kinds for a broken directory
        if os.environ.get("CBM_DEBUG"):
            raise
        raise _load_error(path, "the processor (tokenizer and image processor)", err) from None
    tok = getattr(processor, "tokenizer", None)
    if tok is None or getattr(processor, "image_processor", None) is None:
        raise ValueError(f"model.path: '{path}' has no image processor and tokenizer (not a vision-language model's processor)")
    prompt_format(processor, f"model.path: '{path}'")
    return processor


def load_model(path: str | Path, quant: str = "none", dtype: str = "auto", device: str = "auto", attn_implementation: str | None = None) -> Any:
    """A local ``AutoModelForImageTextToText`` (no downloads). Safetensors are preferred; ``.bin``
    weights load only as plain tensors. ``quant="4bit"``: NF4 with double quantisation and bf16
    compute, CUDA only (one clear error otherwise). Weights that leave tensors uninitialised are refused."""
    from transformers import AutoModelForImageTextToText

    if quant not in QUANTS:
        raise ValueError(f"quant: '{quant}' is not one of {', '.join(QUANTS)}")
    cuda = torch.cuda.is_available()
    dev = device if device != "auto" else ("cuda" if cuda else "cpu")
    p = Path(path).expanduser()
    kwargs: dict[str, Any] = {"local_files_only": True, "output_loading_info": True}
    if any((p / f).is_file() for f in ("model.safetensors", "model.safetensors.index.json")):
        kwargs["use_safetensors"] = True
    else:
        check_pickled_weights(p)
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
        model, info = AutoModelForImageTextToText.from_pretrained(p, **kwargs)
    except Exception as err:  # OSError, ValueError, SafetensorError, RuntimeError (shapes), ...
        if os.environ.get("CBM_DEBUG"):
            raise
        raise _load_error(path, "a vision-language model", err) from None
    missing = sorted(info.get("missing_keys") or [])
    if missing:
        raise ValueError(f"model.path: the weights in '{path}' lack {len(missing)} of the model's tensors (e.g. {missing[0]}): "
                         "refused (they would start random)")  # fmt: skip
    if quant == "none":
        model.to(dev)
    return model


def lora_config(model: nn.Module, settings: LoraSettings) -> Any:
    """The ``peft.LoraConfig`` of ``settings`` for ``model``; every target must exist (one line)."""
    from peft import LoraConfig

    targets = settings.target_modules
    names = [n for n, _ in model.named_modules() if n]
    if targets is None:
        chosen = language_linear_names(model, settings.projector)
        if not chosen:
            raise ValueError("lora: found no linear layer in the language model to adapt")
        targets = "^(" + "|".join(re.escape(n) for n in chosen) + ")$"
    elif isinstance(targets, str):
        if not any(re.fullmatch(targets, n) for n in names):
            raise ValueError(f"lora.target_modules: the pattern {targets!r} matches no module of the model")
    else:
        absent = [t for t in targets if not any(n == t or n.endswith("." + t) for n in names)]
        if absent:
            raise ValueError(f"lora.target_modules: {absent} name no module of the model (give suffixes like q_proj, v_proj)")
    try:
        return LoraConfig(r=settings.r, lora_alpha=settings.alpha, lora_dropout=settings.dropout, target_modules=targets,
                          task_type="CAUSAL_LM", **(settings.extra or {}))  # fmt: skip
    except TypeError as err:
        raise ValueError(f"lora.extra: {_first_line(err)}") from None


def add_lora(model: Any, settings: LoraSettings, gradient_checkpointing: bool = True, quantized: bool = False) -> Any:
    """The model with LoRA adapters; only adapter weights train."""
    from peft import get_peft_model, prepare_model_for_kbit_training

    cfg = lora_config(model, settings)
    gc_kwargs = {"use_reentrant": False}
    if quantized:
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=gradient_checkpointing, gradient_checkpointing_kwargs=gc_kwargs)
    elif gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=gc_kwargs)
        model.enable_input_require_grads()
    return get_peft_model(model, cfg)


def trainable_names(model: nn.Module) -> list[str]:
    return [n for n, p in model.named_parameters() if p.requires_grad]
