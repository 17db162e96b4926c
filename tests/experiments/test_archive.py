"""The results archive (issue 47): ``cbm-report collect`` copies an experiment's records into one layout
and the paired tests computed from it equal the experiment's own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cbm.experiments.archive import archive_cells, collect, load_index, paired_from_archive
from cbm.experiments.tables import comparisons, paired_rows

SEEDS = [0, 1, 2]


def intervene_results(acc0: float, acc_max: float, bb: float) -> dict:
    rows = [{"intervener": "oracle", "policy": p, "k": k, "accuracy": a + (0.01 if p == "uncertainty" and k == 1 else 0.0),
             "gain": None, "mean_requested": float(k), "frac_requesting": 1.0, "mean_cost": float(k), "n_examples": 100, "seconds": 0.1}
            for p in ("random", "uncertainty") for k, a in ((0, acc0), (1, (acc0 + acc_max) / 2), (3, acc_max))]  # fmt: skip
    return {"rows": rows, "blackbox_accuracy": bb, "meta": {"concepts": ["a", "b", "c"]}}


def fake_experiment(root: Path) -> Path:
    """A finished experiment's folder as cbm-experiment leaves it: train and intervene cells of two models
    over three seeds (numbers chosen per seed so the pairs differ), no checkpoints."""
    cells = []
    for seed in SEEDS:
        for model, shift in (("cbm", 0.0), ("cbm_aligned", 0.02 + 0.01 * seed)):
            base = 0.80 + 0.03 * seed + shift
            for stage, name, body in (("train", "metrics.json", {"model": model, "test/task_acc": base}),
                                      ("intervene", "results.json", intervene_results(base, 0.95 + 0.01 * seed, 0.85 + 0.01 * seed))):  # fmt: skip
                d = f"s/{model}/seed{seed}/{stage}"
                (root / d).mkdir(parents=True)
                (root / d / name).write_text(json.dumps(body))
                cells.append({"key": f"{stage}/s/{model}/{seed}", "stage": stage, "setting": "s", "model": model, "seed": seed,
                              "status": "done", "dir": d})  # fmt: skip
    (root / "s/cbm/seed0/train/config.yaml").write_text("model: {name: cbm}\n")
    cells.append({"key": "train/s/cbm/9", "stage": "train", "setting": "s", "model": "cbm", "seed": 9, "status": "failed", "dir": "x"})
    cfg = {"compare": {"models": [["cbm_aligned", "cbm"]], "policies": [["uncertainty", "random"]]},
           "intervene": {"policy": ["random", "uncertainty"]}}  # fmt: skip
    (root / "experiment.json").write_text(json.dumps({"name": "toy", "description": "d", "config": cfg, "cells": cells}))
    return root


def experiment_paired(root: Path) -> list[dict]:
    manifest = json.loads((root / "experiment.json").read_text())
    cells = [{**c, "_results": json.loads((root / c["dir"] / "results.json").read_text())}
             for c in manifest["cells"] if c["stage"] == "intervene" and c["status"] == "done"]  # fmt: skip
    return paired_rows(cells, *comparisons(manifest["config"]))[0]


def test_collect_round_trips_the_paired_tests(tmp_path):
    root = fake_experiment(tmp_path / "exp")
    index = collect(root, tmp_path / "archive")
    assert index["seeds"] == SEEDS and len(index["cells"]) == 12
    assert {s["why"] for s in index["skipped"]} == {"status failed", "no checkpoint: predictions not written"}
    expected = experiment_paired(root)
    assert expected and paired_from_archive(tmp_path / "archive") == expected
    kinds = {r["comparison"] for r in expected}
    assert kinds == {"Gain (model - black box)", "policy uncertainty - random", "model cbm_aligned - cbm"}
    cell = tmp_path / "archive" / "s" / "cbm" / "seed0"
    assert sorted(p.name for p in cell.iterdir()) == ["config.yaml", "interventions.json", "metrics.json"]
    assert len(archive_cells(tmp_path / "archive", "train")) == 6 and load_index(tmp_path / "archive")["name"] == "toy"
    assert "predictions.npz" in (tmp_path / "archive" / "README.md").read_text()
    again = collect(root, tmp_path / "archive")  # an archive is collected again in place
    assert again["cells"] == index["cells"]


def test_collect_refuses_to_write_into_the_experiment_or_a_foreign_folder(tmp_path):
    root = fake_experiment(tmp_path / "exp")
    with pytest.raises(ValueError, match="must lie outside the experiment"):
        collect(root, root / "archive")
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not an archive: choose a new or empty folder"):
        collect(root, other)
    assert [p.name for p in other.iterdir()] == ["notes.txt"]
