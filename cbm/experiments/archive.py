"""A results archive: an experiment's records in one documented layout, re-analysable without retraining.

``cbm-report collect EXPERIMENT_DIR ARCHIVE_DIR`` copies what every finished cell recorded, and adds what
only the checkpoint holds (each model's test predictions and concept probabilities), into::

    ARCHIVE_DIR/
      archive.json                      name, description, the experiment's config, seeds, one entry per cell
      README.md                         this layout, for whoever opens the folder
      <setting>/<model>/seed<S>/
        metrics.json                    cbm-train's metrics (accuracies, concept metrics, oracle table)
        config.yaml                     the training run's whole config
        predictions.npz                 test split: y, pred, task_probs [N, C]; concept models also
                                        concept_probs [N, m], concept_true [N, m] (float32)
        interventions.json              cbm-intervene's results.json (rows, meta, per-concept counts)
        interventions_per_example.pt    its per-example masks and predictions, when the run kept them
        automation.json                 cbm-automate's automation.json

The paired tests and the tables read the archive the way they read the experiment
(:func:`archive_cells`, :func:`paired_from_archive`): the same rows, without the run folder or a GPU.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np

from cbm.core.atomic import ensure_dir, write_json_atomic, write_text_atomic
from cbm.experiments.tables import read_json

ARCHIVE_VERSION = 1
#: stage -> (the file a finished cell wrote, its name in the archive)
STAGE_FILES = {"train": ("metrics.json", "metrics.json"), "intervene": ("results.json", "interventions.json"),
               "automate": ("automation.json", "automation.json")}  # fmt: skip
EXTRA_FILES = {"train": [("config.yaml", "config.yaml")], "intervene": [("per_example.pt", "interventions_per_example.pt")]}
README = __doc__.split("::", 1)[1].split("The paired tests", 1)[0]


def read_manifest(root: Path) -> dict[str, Any]:
    """An experiment's ``experiment.json`` (one line when ``root`` is not an experiment)."""
    manifest = read_json(root / "experiment.json")
    if not isinstance(manifest, dict) or not isinstance(manifest.get("cells"), list):
        raise FileNotFoundError(f"{root / 'experiment.json'} is not a cbm-experiment manifest")
    return manifest


def cell_dir(cell: dict[str, Any]) -> str:
    """``<setting>/<model>/seed<S>``: the cell's folder in the archive (the experiment's own names,
    which it checked to be safe file names)."""
    return f"{cell['setting']}/{cell['model']}/seed{int(cell['seed'])}"


def collect(root: str | Path, out: str | Path, predictions: bool = True, cache_dir: str | Path | None = None) -> dict[str, Any]:
    """Copy the finished cells of the experiment ``root`` into the archive ``out`` (module doc); with
    ``predictions``, each trained model's test predictions from its checkpoint (data from ``cache_dir``,
    default the experiment's). Returns the archive's index (``archive.json``)."""
    root, out = Path(root), Path(out)
    manifest = read_manifest(root)
    if out.resolve() == root.resolve() or root.resolve() in out.resolve().parents:
        raise ValueError(f"the archive {out} must lie outside the experiment {root}")
    if out.is_dir() and any(out.iterdir()) and not (out / "archive.json").is_file():
        raise ValueError(f"{out} is a folder with other files in it, not an archive: choose a new or empty folder")
    cfg = manifest.get("config", {})
    cache = cache_dir if cache_dir is not None else cfg.get("cache_dir")
    entries, skipped = [], []
    for cell in manifest["cells"]:
        stage = cell.get("stage")
        if stage not in STAGE_FILES or cell.get("status") != "done":
            skipped.append({"cell": cell.get("key"), "why": f"status {cell.get('status')}" if stage in STAGE_FILES else f"stage {stage}"})
            continue
        src, dest = root / cell["dir"], ensure_dir(out / cell_dir(cell))
        name, as_name = STAGE_FILES[stage]
        if not (src / name).is_file():
            skipped.append({"cell": cell.get("key"), "why": f"no {name}"})
            continue
        shutil.copyfile(src / name, dest / as_name)
        files = [as_name]
        for extra, extra_as in EXTRA_FILES.get(stage, []):
            if (src / extra).is_file():
                shutil.copyfile(src / extra, dest / extra_as)
                files.append(extra_as)
        if stage == "train" and predictions:
            if (src / "checkpoints").is_dir():
                write_predictions(src, dest / "predictions.npz", cache)
                files.append("predictions.npz")
            else:
                skipped.append({"cell": cell.get("key"), "why": "no checkpoint: predictions not written"})
        entries.append({"setting": cell["setting"], "model": cell["model"], "seed": int(cell["seed"]), "stage": stage,
                        "dir": cell_dir(cell), "files": files})  # fmt: skip
    index = {"archive_version": ARCHIVE_VERSION, "name": manifest.get("name"), "description": manifest.get("description", ""),
             "config": cfg, "seeds": sorted({e["seed"] for e in entries}), "cells": entries, "skipped": skipped}  # fmt: skip
    write_text_atomic(out / "README.md", f"# {index['name']}: results archive\n\nLayout (cbm.experiments.archive)::\n{README}")
    write_json_atomic(out / "archive.json", index)
    return index


def write_predictions(run_dir: Path, path: Path, cache_dir: str | Path | None) -> Path:
    """The test split's labels, predictions, class probabilities and (concept models) concept
    probabilities and true concepts of the run's best checkpoint, as ``npz``."""
    import torch

    from cbm.interventions.interveners.base import true_concepts
    from cbm.training.checkpoint import load_run

    model, dm, _ = load_run(run_dir, cache_dir)
    model.eval()
    parts: dict[str, list[np.ndarray]] = {}
    with torch.no_grad():
        for batch in dm.loader("test"):
            state, logits = model(batch["x"])
            got = {"y": batch["y"], "pred": logits.argmax(1), "task_probs": torch.softmax(logits.float(), 1)}
            if getattr(model, "has_concepts", True):
                got |= {"concept_probs": state.probs.float(), "concept_true": true_concepts(batch).float()}
            for k, v in got.items():
                parts.setdefault(k, []).append(v.cpu().numpy())
    arrays = {k: np.concatenate(v) for k, v in parts.items()}
    tmp = path.with_name(path.name + ".part.npz")
    np.savez_compressed(tmp, **arrays)
    tmp.replace(path)
    return path


def load_index(archive: str | Path) -> dict[str, Any]:
    index = read_json(Path(archive) / "archive.json")
    if not isinstance(index, dict) or index.get("archive_version") != ARCHIVE_VERSION:
        raise FileNotFoundError(f"{Path(archive) / 'archive.json'} is not a cbm results archive (version {ARCHIVE_VERSION})")
    return index


def archive_cells(archive: str | Path, stage: str) -> list[dict[str, Any]]:
    """The archive's cells of ``stage`` in the shape the tables read (``setting``, ``model``,
    ``seed``, ``_results``): what :func:`cbm.experiments.report._cells` gives for the experiment."""
    archive = Path(archive)
    _, as_name = STAGE_FILES[stage]
    out = []
    for e in load_index(archive)["cells"]:
        if e["stage"] == stage:
            out.append({"setting": e["setting"], "model": e["model"], "seed": e["seed"], "stage": stage,
                        "dir": str(archive / e["dir"]), "_results": read_json(archive / e["dir"] / as_name)})  # fmt: skip
    return out


def paired_from_archive(archive: str | Path) -> list[dict[str, Any]]:
    """The experiment's paired differences (report.json's ``paired differences``), from the archive."""
    from cbm.experiments.tables import comparisons, paired_rows

    rows, _ = paired_rows(archive_cells(archive, "intervene"), *comparisons(load_index(archive)["config"]))
    return rows
