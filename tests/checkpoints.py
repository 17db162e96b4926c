"""Untrained models saved in ``cbm-train``'s checkpoint format, on tiny tabular robots (no training:
fast), for the tests of the commands that read a run."""

from __future__ import annotations

from pathlib import Path

import torch

#: The tabular robots of these checkpoints (200 training rows, 300 test rows).
SMALL = {"name": "robot", "modality": "tabular", "n_train": 200, "n_calib": 0, "n_test": 300}


def make_checkpoint(path: Path, cache: Path, model: str = "cbm", base: dict | None = None, **data) -> Path:
    """An untrained ``model`` at ``path`` (``.../checkpoints/best.ckpt``), its data (``base``, the tabular
    robots unless given, updated by ``data``) cached in ``cache``."""
    import lightning as L

    from cbm.core.validation import as_dict
    from cbm.models import build_model
    from synthetic.registry import data_config, data_info, load_data

    dcfg = data_config({**(SMALL if base is None else base), **data})
    ds = load_data(dcfg, str(cache))
    torch.manual_seed(0)
    m = build_model({"name": model}, data_info(ds, dcfg), as_dict(dcfg))
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": m.state_dict(), "hyper_parameters": dict(m.hparams), "pytorch-lightning_version": L.__version__}, path)
    return path


def concept_and_group_runs(tmp_path: Path, data: dict) -> tuple:
    """An untrained CBM on ``data`` (a real dataset's config), then ``cbm-intervene`` with the oracle and
    the random policy at k = 0, 1, max, per example: by concept and with ``groups=true``."""
    from cbm.experiments import intervene

    make_checkpoint(tmp_path / "run" / "checkpoints" / "best.ckpt", tmp_path / "cache", base=data)
    base = {"checkpoint": str(tmp_path / "run"), "cache_dir": str(tmp_path / "cache"), "policy": {"random": {}}, "intervener": {"oracle": {}},
            "ks": [0, 1, "max"], "per_example": True}  # fmt: skip
    return intervene.run({**base, "output_dir": str(tmp_path / "c")}), intervene.run({**base, "output_dir": str(tmp_path / "g"), "groups": True})
