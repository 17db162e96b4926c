"""Load a trained run back: the model from its checkpoint, the data from the config stored in it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from cbm.core.atomic import atomic_write
from cbm.core.paths import resolve_checkpoint
from cbm.models import ConceptModel, model_class
from synthetic.datamodule import SyntheticDataModule
from synthetic.registry import data_config, data_info, load_data


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning checkpoint I/O through the project's atomic write path (temp file beside the
    target, fsync, rename: a full disk or a killed process never leaves a truncated ``.ckpt``),
    and loads that never unpickle code (``weights_only=True``)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        atomic_write(Path(path), lambda f: _save_reporting_os_errors(checkpoint, f))

    def load_checkpoint(self, path: Any, map_location: Any | None = None, weights_only: bool | None = None) -> dict:
        return read_checkpoint(path, map_location or "cpu")


class _RecordingFile:
    """A binary file that remembers the ``OSError`` of a failed write (delegating everything else)."""

    def __init__(self, f: Any):
        self._f = f
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            return self._f.write(data)
        except OSError as err:
            self.error = err
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


def _save_reporting_os_errors(checkpoint: dict[str, Any], f: Any) -> None:
    """``torch.save`` into ``f``; torch's zip writer turns a failed file write (full disk, file-size
    limit) into a RuntimeError about stream positions: raise the write's own OSError instead, which
    the atomic write path turns into one clear line."""
    rec = _RecordingFile(f)
    try:
        torch.save(checkpoint, rec)
    except RuntimeError:
        if rec.error is not None:
            raise rec.error from None
        raise


def read_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """The checkpoint's contents, loaded with ``weights_only=True``: tensors and plain data only, so
    a file carrying a pickled payload is refused before anything in it runs."""
    p = Path(path)
    try:
        ckpt = torch.load(p, map_location=map_location, weights_only=True)
    except (FileNotFoundError, IsADirectoryError, PermissionError) as err:
        raise ValueError(f"cannot read checkpoint {p}: {err.strerror.lower() if err.strerror else err}") from None
    except Exception as err:  # UnpicklingError, RuntimeError (not a zip), EOFError (truncated) ...
        found = re.search(r"GLOBAL (\S+) was not an allowed global", str(err))
        if found:
            raise ValueError(
                f"{p} is not a cbm checkpoint: it holds objects other than tensors and plain data "
                f"({found.group(1)}), and loading them could run code (refused)"
            ) from None
        raise ValueError(f"{p} is not a readable checkpoint ({type(err).__name__})") from None
    if not isinstance(ckpt, dict):
        raise ValueError(f"{p} is not a cbm checkpoint (it holds a {type(ckpt).__name__}, not a dict)")
    return ckpt


def load_model(path: str | Path, map_location: str | torch.device = "cpu") -> ConceptModel:
    """Rebuild the model class recorded in the checkpoint and load its weights (eval mode).

    Nothing in the file is executed: it is read with ``weights_only=True`` and the model is built
    from the plain-data hyper-parameters, then its ``state_dict`` is loaded strictly."""
    ckpt_path = resolve_checkpoint(path)
    ckpt = read_checkpoint(ckpt_path, map_location)
    hp = ckpt.get("hyper_parameters")
    if not isinstance(hp, dict) or not isinstance(hp.get("model"), dict) or "data" not in hp or "state_dict" not in ckpt:
        raise ValueError(f"{ckpt_path} is not a cbm checkpoint (no cbm model hyper-parameters or weights)")
    try:
        cls = model_class(hp["model"])
    except ValueError as err:
        raise ValueError(f"{ckpt_path}: {err}") from None
    try:
        model = cls(model=hp["model"], data=hp["data"], data_cfg=hp.get("data_cfg"))
        model.load_state_dict(ckpt["state_dict"], strict=True)
    except (RuntimeError, TypeError, KeyError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"{ckpt_path}: weights do not fit the model it describes ({first})") from None
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
    """Refuse data whose dataset, concepts or classes differ from the model's (a black box has no
    concepts: any concept set of the same data is compatible with it)."""
    mine = model.info
    keys = ("dataset", "modality", "concept_names", "class_names") if model.has_concepts else ("dataset", "modality", "class_names")
    for key in keys:
        if getattr(mine, key) != info[key]:
            raise ValueError(
                f"checkpoint was trained on {key}={getattr(mine, key)!r} but the data has {info[key]!r}"
            )
