"""Checks ``cbm-finetune`` makes before it loads anything heavy: the model directory's shape, the
device, the rows of a JSONL file, an EDCT run, the generator settings. Each failure is one line
naming the setting; torch is imported only to ask whether a requested GPU exists."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cbm.vlm.finetune.config import check_device_name  # noqa: F401 (its users import it from here too)

if TYPE_CHECKING:
    from cbm.vlm.finetune.config import FinetuneConfig

#: Weight files ``from_pretrained`` reads (safetensors preferred; ``.bin`` only as plain weights).
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


def check_model_dir(path: str) -> Path:
    """A local Hugging Face model directory: a ``config.json`` object with a ``model_type`` and a
    weights file. Whether transformers knows the architecture is checked when it loads."""
    if not path:
        raise ValueError("model.path: required (a local Hugging Face VLM directory; python -m cbm.vlm.tiny DIR writes a tiny one)")
    p = Path(path).expanduser()
    if not p.exists():
        raise ValueError(f"model.path: no model directory at '{path}' (no downloads: a local directory)")
    if not p.is_dir():
        raise ValueError(f"model.path: '{path}' is a file, not a model directory")
    cfg = p / "config.json"
    if not cfg.is_file():
        if (p / "adapter_config.json").is_file():
            raise ValueError(f"model.path: '{path}' is a LoRA adapter, not a model: give its base model")
        raise ValueError(f"model.path: '{path}' has no config.json: not a Hugging Face model directory")
    try:
        obj = json.loads(cfg.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise ValueError(f"model.path: {cfg} is not a readable JSON file ({type(err).__name__})") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("model_type"), str):
        raise ValueError(f"model.path: {cfg} has no 'model_type': not a model config")
    if not any((p / w).is_file() for w in WEIGHT_FILES):
        raise ValueError(f"model.path: '{path}' has no weights ({' or '.join(WEIGHT_FILES[::2])})")
    return p


def check_device_available(device: str, quant: str) -> None:
    """A requested CUDA device (or a quantised load, which needs one) exists: one line up front."""
    if not (device.startswith("cuda") or quant != "none"):
        return
    import torch

    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if quant != "none" and have == 0:
        raise ValueError(f"quant={quant} (QLoRA) needs a CUDA GPU and none is available; on the CPU use finetune=lora_cpu (quant=none)")
    if device.startswith("cuda"):
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= have:
            raise ValueError(f"model.device={device} but {'no CUDA GPU is' if have == 0 else f'only {have} CUDA GPU(s) are'} available "
                             "(model.device=auto or cpu)")  # fmt: skip


def check_creatable(directory: str, where: str) -> None:
    """A directory the run will create must not sit under a file or in a read-only place."""
    from cbm.core.safe_paths import check_creatable as check

    check(Path(directory).expanduser(), where)


def edct_source(source: dict[str, Any]) -> dict[str, Any]:
    """``{run_dir[, question]}`` of a ``cbm-edct`` run directory."""
    unknown = sorted(set(source) - {"run_dir", "question"})
    if unknown:
        raise ValueError(f"data.source: unknown key(s) {unknown} for data.build=edct (it takes run_dir and question)")
    run_dir = source.get("run_dir")
    if not isinstance(run_dir, str) or not run_dir:
        raise ValueError("data.source.run_dir: the cbm-edct run directory (a path)")
    p = Path(run_dir).expanduser()
    if not p.is_dir():
        raise ValueError(f"data.source.run_dir: no cbm-edct run directory at '{run_dir}'")
    if not (p / "results.json").is_file():
        raise ValueError(f"data.source.run_dir: '{run_dir}' is not a cbm-edct run directory (no results.json)")
    if source.get("question") is not None and not isinstance(source["question"], str):
        raise ValueError("data.source.question: expected a string")
    return dict(source)


def wandb_key_known() -> bool:
    """A W&B API key in the environment or ``~/.netrc`` (what ``wandb`` reads without a prompt)."""
    import netrc
    import os

    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def preflight(cfg: FinetuneConfig) -> None:
    """Everything checkable before a model loads: the rows (a JSONL file is read and every row and
    image checked), the generator settings or EDCT run, the cache folder, the GPU asked for."""
    from cbm.vlm.finetune.builders import edct_pairs, generator_config
    from cbm.vlm.finetune.data import load_rows, split_pairs

    check_model_dir(cfg.model.path)
    d = cfg.data
    if d.jsonl is not None:
        rows, _ = load_rows(d.jsonl, d.on_bad, d.max_image_pixels)
        split_pairs(rows, d.eval_fraction, cfg.seed)
    elif d.build == "edct":
        edct_pairs(**edct_source(d.source or {}))  # reads the run's records: no judged step is one line here
    else:
        generator_config(d.build, d.n, d.source)
        if d.cache_dir:
            check_creatable(d.cache_dir, "data.cache_dir")
    wandb = dict(cfg.logger or {}).get("wandb") or {}
    if wandb.get("enabled") and wandb.get("mode") == "online" and not wandb_key_known():
        raise ValueError("logger.wandb.mode=online needs a W&B API key (WANDB_API_KEY or wandb login); mode=offline needs none")
    check_device_available(cfg.model.device, cfg.quant)
