"""``cbm-report diagnose``: every architecture with concepts is diagnosed from its checkpoint, black
boxes are listed as skipped, and the files agree with the model's own predictions."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from checkpoints import make_checkpoint

from cbm.experiments.diagnose import diagnose_run, write

ARCHITECTURES = ["cbm", "cem", "probcbm", "ecbm", "scbm", "intcem", "dcr", "hybrid_cbm"]


@pytest.mark.parametrize("model", ARCHITECTURES)
def test_every_architecture_is_diagnosed_and_its_k0_is_its_own_accuracy(tmp_path, model):
    from cbm.training.checkpoint import load_run

    run = tmp_path / model
    make_checkpoint(run / "checkpoints" / "best.ckpt", tmp_path / "cache", model=model)
    d = diagnose_run(run, tmp_path / "cache")
    m, dm, _ = load_run(run, tmp_path / "cache")
    m.eval()
    with torch.no_grad():
        right = sum(int((m(b["x"])[1].argmax(1) == b["y"]).sum()) for b in dm.loader("test"))
    assert d["rows"] == 300 and d["leakage"]["accuracy"] == right / 300
    assert len(d["sensitivity"]) == d["concepts"] == len(m.info.concept_names)
    for s in d["sensitivity"]:
        assert 0.0 <= s["changed"] <= 1.0 and s["true"] is not None and s["flipped"] is not None
    assert 0.0 <= d["ceiling"]["concepts"] <= 1.0


def fake_experiment(root: Path, cache: Path) -> None:
    cells = []
    for model in ("cbm", "hybrid_cbm", "blackbox"):
        for seed in (0, 1):
            d = f"true/{model}/seed{seed}/train"
            make_checkpoint(root / d / "checkpoints" / "best.ckpt", cache, model=model, seed=seed)
            cells.append({"key": d, "stage": "train", "setting": "true", "model": model, "seed": seed, "dir": d, "status": "done"})
    cells.append({"key": "true/cbm/seed2/train", "stage": "train", "setting": "true", "model": "cbm", "seed": 2,
                  "dir": "true/cbm/seed2/train", "status": "failed"})  # fmt: skip
    (root / "experiment.json").write_text(json.dumps({"name": "toy", "config": {"cache_dir": str(cache)}, "cells": cells}))


def test_an_experiment_is_diagnosed_per_cell_with_tables_and_figures(tmp_path):
    root, cache = tmp_path / "exp", tmp_path / "cache"
    fake_experiment(root, cache)
    report = write(root)
    out = root / "diagnose"
    assert report == out / "report.md"
    runs = list(csv.DictReader((out / "runs.csv").open()))
    assert [(r["model"], r["seed"]) for r in runs] == [("cbm", "0"), ("cbm", "1"), ("hybrid_cbm", "0"), ("hybrid_cbm", "1")]
    saved = json.loads((out / "diagnose.json").read_text())
    assert [s["cell"] for s in saved["skipped"]] == ["true/blackbox/seed0", "true/blackbox/seed1"]
    for row, cell in zip(runs, saved["cells"]):
        assert float(row["leakage"]) == pytest.approx(cell["diagnosis"]["leakage"]["leakage"])
        assert float(row["leakage"]) == pytest.approx(float(row["marginal"]) - float(row["majority"]))
    concepts = list(csv.DictReader((out / "concepts.csv").open()))
    assert len(concepts) == 4 * saved["cells"][0]["diagnosis"]["concepts"]
    text = report.read_text()
    assert "| model | seeds | k = 0 | oracle | marginal |" in text and "| hybrid_cbm | 2 |" in text
    assert "Skipped: true/blackbox/seed0 (a black box: no concepts)" in text
    for png in ("leakage.png", "sensitivity.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_command_writes_the_report_and_says_where(tmp_path):
    root, cache = tmp_path / "exp", tmp_path / "cache"
    fake_experiment(root, cache)
    res = subprocess.run([sys.executable, "-m", "cbm.experiments.report", "diagnose", str(root)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().endswith(f"diagnostics: {root / 'diagnose' / 'report.md'}")
    assert "[1/6] true/cbm/seed0: k=0" in res.stdout and "[5/6] true/blackbox/seed0: a black box, skipped" in res.stdout
