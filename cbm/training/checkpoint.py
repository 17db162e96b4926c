"""Load a trained run back: the model from its checkpoint, the data from the config stored in it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from cbm.models import ConceptModel, model_class
from synthetic.datamodule import SyntheticDataModule
from synthetic.registry import data_config, data_info, load_data


def resolve_checkpoint(path: str | Path) -> Path:
    """A ``.ckpt`` file, or a run directory holding ``checkpoints/best.ckpt`` (else ``last.ckpt``)."""
    p = Path(path)
    if p.is_dir():
        for name in ("best.ckpt", "last.ckpt"):
            if (p / "checkpoints" / name).exists():
                return p / "checkpoints" / name
        raise FileNotFoundError(f"no checkpoints/best.ckpt or last.ckpt in run directory {p}")
    if not p.exists():
        raise FileNotFoundError(f"checkpoint not found: {p}")
    return p


def load_model(path: str | Path, map_location: str | torch.device = "cpu") -> ConceptModel:
    """Rebuild the model class recorded in the checkpoint and load its weights (eval mode)."""
    ckpt_path = resolve_checkpoint(path)
    try:
        ckpt = torch.load(ckpt_path, map_location=map_location, weights_only=False)
        hp = ckpt["hyper_parameters"]
        cls = model_class(hp["model"]["name"])
    except (KeyError, RuntimeError, EOFError, OSError) as err:
        raise ValueError(f"{ckpt_path} is not a cbm checkpoint ({type(err).__name__}: {err})") from None
    model = cls.load_from_checkpoint(ckpt_path, map_location=map_location)
    model.eval()
    return model


def load_run(
    path: str | Path,
    cache_dir: str | Path | None = ".cache/cbm",
    batch_size: int = 256,
    eval_batch_size: int = 1024,
    data_overrides: dict[str, Any] | None = None,
) -> tuple[ConceptModel, SyntheticDataModule, Any]:
    """Model + the datamodule of the data it was trained on (+ the typed data config).

    ``data_overrides`` may change the data config (e.g. test-split size); a change that
    alters the concepts or classes the model was trained on is refused.
    """
    model = load_model(path)
    stored = model.hparams.get("data_cfg")
    if stored is None:
        raise ValueError("checkpoint has no data config; it was not written by cbm-train")
    cfg = data_config({**stored, **(data_overrides or {})})
    data = load_data(cfg, cache_dir)
    check_compatible(model, data_info(data, cfg))
    dm = SyntheticDataModule(lambda: data, batch_size, eval_batch_size)
    return model, dm, cfg


def check_compatible(model: ConceptModel, info: dict[str, Any]) -> None:
    """Refuse data whose dataset, concepts or classes differ from the model's."""
    mine = model.info
    for key in ("dataset", "modality", "concept_names", "class_names"):
        if getattr(mine, key) != info[key]:
            raise ValueError(
                f"checkpoint was trained on {key}={getattr(mine, key)!r} but the data has {info[key]!r}"
            )
