"""``data.name`` -> generator package; builds typed configs and (cached) datasets."""

from __future__ import annotations

import importlib
from dataclasses import asdict
from pathlib import Path
from typing import Any

from cbm.core.validation import ConfigError, to_dataclass
from synthetic.base import SyntheticData
from synthetic.cache import config_hash
from synthetic.resources import check_footprint

#: data.name -> (module, config class). Each module exposes ``load(cfg, cache_dir)``.
DATASETS: dict[str, tuple[str, str]] = {
    "robot": ("synthetic.robot", "RobotConfig"),
    "sudoku": ("synthetic.sudoku", "SudokuConfig"),
    "cub": ("synthetic.real.cub", "CUBConfig"),
    "derm7pt": ("synthetic.real.derm7pt", "Derm7ptConfig"),
    "awa2": ("synthetic.real.awa2", "AwA2Config"),
    "celeba": ("synthetic.real.celeba", "CelebAConfig"),
}


def data_config(cfg: dict[str, Any]) -> Any:
    """Validate a ``data`` config mapping into its generator's dataclass."""
    name = cfg.get("name") if hasattr(cfg, "get") else None
    if name not in DATASETS:
        raise ConfigError(f"data.name must be one of {sorted(DATASETS)}, got '{name}'")
    module, cls = DATASETS[name]
    return to_dataclass(getattr(importlib.import_module(module), cls), cfg, "data")


def load_data(cfg: Any, cache_dir: str | Path | None, storage: str = "memory") -> SyntheticData:
    """Generate (or read from the cache) the dataset of a validated config; ``storage="disk"``:
    images memory-mapped from ``cache_dir`` (rendered there in chunks the first time)."""
    check_footprint(cfg, storage, cache_dir)  # one line, not a MemoryError minutes later
    module = importlib.import_module(DATASETS[cfg.name][0])
    if storage == "memory":
        return module.load(cfg, cache_dir)
    return module.load(cfg, cache_dir, storage=storage)


def concept_implications(cfg: Any) -> list[tuple[str, int, str, int]] | None:
    """The implications ``(A, a, B, v)`` (``A = a => B = v``) between a dataset's concepts, derived
    from their definitions (:mod:`synthetic.robot.hierarchy`); ``None`` for datasets without a
    concept structure (Sudoku's 27 checks are independent rules)."""
    if getattr(cfg, "name", None) == "robot":
        from synthetic.robot.hierarchy import implications

        return implications(cfg.concept_set)
    return None


def data_info(data: SyntheticData, cfg: Any) -> dict[str, Any]:
    """The :class:`~cbm.models.config.DataInfo` fields a model is built from."""
    if data.modality == "image":  # grey images ([N,H,W]) reach the model as 3 channels
        in_shape = [data.x.shape[3] if data.x.ndim == 4 else 3, data.x.shape[1], data.x.shape[2]]
    else:
        in_shape = list(data.x.shape[1:])
    return {
        "dataset": cfg.name,
        "modality": data.modality,
        "in_shape": in_shape,
        "concept_names": list(data.concept_names),
        "class_names": list(data.class_names),
        "vocab_size": len(data.info.get("vocab", [])),
        "data_hash": config_hash(asdict(cfg)),
        "concept_groups": dict(data.info.get("concept_types", {}).get("groups", {})),
        "continuous_concepts": list(data.info.get("concept_types", {}).get("continuous", [])),
    }
