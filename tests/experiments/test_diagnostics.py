"""Diagnostic figures: their data checked exactly on hand-made stored results (fast), and on smoke
experiments run with the ``self`` intervener (slow)."""

from __future__ import annotations

import csv
import json
import math
import statistics
from pathlib import Path

import matplotlib
import numpy as np
import pytest
import torch

from cbm.experiments import diagnostics as dg
from cbm.experiments.automate import HIST_BINS, confidence_histograms
from cbm.experiments.stats import mean_se, paired, paired_text
from cbm.experiments.tables import CONFIRMED, confirmed_rows
from cbm.selective.automation import Scored

NAMES = ["knees", "mouth", "feet"]
N = 100


def stats(seed: int, requested: dict[tuple[str, str, int], list[int]]) -> dict:
    """``concept_stats`` of one seed: the oracle right on every request, ``self`` on all but one per concept."""
    rows = []
    for (iv, pol, k), req in requested.items():
        correct = req if iv == "oracle" else [max(r - 1, 0) for r in req]
        rows.append({"intervener": iv, "policy": pol, "k": k, "requested": req, "correct": correct})
    det = [0.5 + 0.1 * seed, 0.9, 1.0]
    return {"names": NAMES, "n_examples": N, "detector_accuracy": det, "rows": rows}


def fake_cell(setting: str, model: str, seed: int, acc: dict[tuple[str, str, int], float], bb: float = 0.8) -> dict:
    """An intervene cell as the report builds it: its ``results.json`` as ``_results``."""
    requested = {}
    for iv, pol, k in acc:
        per = [0, 0, 0] if k == 0 else ([N, N, N] if k == 3 else [60 + seed, 30 - seed, 10])
        requested[iv, pol, k] = per
    rows = [{"intervener": iv, "policy": pol, "k": k, "accuracy": a, "gain": a - bb, "n_examples": N,
             "mean_requested": sum(requested[iv, pol, k]) / N} for (iv, pol, k), a in acc.items()]  # fmt: skip
    res = {"rows": rows, "blackbox_accuracy": bb, "meta": {"concepts": NAMES}, "concept_stats": stats(seed, requested)}
    return {"setting": setting, "model": model, "seed": seed, "stage": "intervene", "_results": res}


def grid_acc(base: float, gain: float, self_gain: float = 0.0) -> dict[tuple[str, str, int], float]:
    out = {}
    for pol in ("random", "uncertainty"):
        for k, frac in ((0, 0.0), (1, 0.5), (3, 1.0)):
            out["oracle", pol, k] = base + frac * gain
            out["self", pol, k] = base + frac * self_gain
    return out


def inter_cells() -> list[dict]:
    """Two concept sets x two models x two seeds, with per-seed accuracies that differ."""
    cells = []
    for setting, shift in (("true", 0.0), ("llm", -0.1)):
        for model, gain in (("cbm", 0.1), ("cbm_aligned", -0.05)):
            for seed in (0, 1):
                cells.append(fake_cell(setting, model, seed, grid_acc(0.8 + shift + 0.01 * seed, gain + 0.02 * seed)))
    return cells


def runs() -> list[dict]:
    return [{"_setting": s, "_config": {"data": {"concept_set": s}}, "model": "cbm"} for s in ("true", "llm")]


def read_csv(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(path.open()))


def se(values: list[float]) -> float:
    return statistics.stdev(values) / math.sqrt(len(values))


def test_per_concept_rows_count_shares_and_accuracies_exactly():
    cells = inter_cells()
    rows = dg.per_concept_rows(cells, "true")
    by = {(r["model"], r["intervener"], r["policy"], r["k"], r["concept"]): r for r in rows}
    assert len(rows) == 2 * 2 * 2 * 3 * 3  # models x interveners x policies x budgets x concepts
    for model in ("cbm", "cbm_aligned"):
        for pol in ("random", "uncertainty"):
            r1 = [by[model, "oracle", pol, "1", c] for c in NAMES]
            # request counts summed over concepts = mean_requested x n_examples (mean over seeds)
            assert sum(r["requested"] for r in r1) == pytest.approx(100.0)
            assert [r["requested"] for r in r1] == [60.5, 29.5, 10.0]
            assert sum(r["request_share"] for r in r1) == pytest.approx(1.0)
            assert r1[0]["request_share"] == pytest.approx(0.605) and r1[0]["request_share_se"] == pytest.approx(0.005)
            assert all(r["intervener_accuracy"] == 1.0 for r in r1)  # the oracle is always right
            s1 = [by[model, "self", pol, "1", c] for c in NAMES]
            assert s1[2]["intervener_accuracy"] == pytest.approx(0.9) and s1[2]["intervener_accuracy_se"] == 0.0
            zero = [by[model, "oracle", pol, "0", c] for c in NAMES]
            assert all(r["requested"] == 0 and r["request_share"] is None and r["intervener_accuracy"] is None for r in zero)
        knees = by[model, "oracle", "random", "max", "knees"]
        assert knees["detector_accuracy"] == pytest.approx(0.55) and knees["detector_accuracy_se"] == pytest.approx(se([0.5, 0.6]))
        assert knees["seeds"] == 2


def test_heatmap_and_reliance_rows_are_the_results_differences():
    cells = inter_cells()
    heat = {(r["intervener"], r["model"], r["setting"]): r for r in dg.heatmap_rows(cells)}
    assert len(heat) == 2 * 2 * 2
    for (iv, model, setting), r in heat.items():
        per_seed = []
        for c in cells:
            if (c["setting"], c["model"]) == (setting, model):
                acc = {(x["intervener"], x["policy"], x["k"]): x["accuracy"] for x in c["_results"]["rows"]}
                per_seed.append(acc[iv, "random", 3] - acc[iv, "random", 0])
        assert r["k"] == "max" and r["policy"] == "random" and r["seeds"] == 2
        assert r["delta"] == pytest.approx(statistics.fmean(per_seed)) and r["delta_se"] == pytest.approx(se(per_seed))
    assert heat["oracle", "cbm", "true"]["delta"] == pytest.approx(0.11) and heat["self", "cbm", "true"]["delta"] == pytest.approx(0.0)


def test_write_diagnostics_draws_each_figure_with_its_csv(tmp_path):
    backend = matplotlib.get_backend()
    root = tmp_path / "exp"
    root.mkdir()
    config = {"models": {"blackbox": ["model=blackbox"], "cbm": ["model=cbm"], "cbm_aligned": ["model=cbm", "model.zero_concepts=[knees]"]},
              "blackbox": "blackbox"}  # fmt: skip
    (root / "experiment.json").write_text(json.dumps({"config": config, "cells": []}))
    auto = [automate_cell("true", "cbm", s) for s in (0, 1)]
    out = dg.write_diagnostics(root, inter_cells(), auto, runs(), root / "figures")
    names = [d.name for d in out]
    assert names == ["diag_per_concept_true", "diag_per_concept_llm", "diag_answer_reliance", "diag_confidence_true",
                     "diag_intervention_heatmap", "diag_alignment", "diag_concept_sets"]  # fmt: skip
    for d in out:
        assert d.png.stat().st_size > 5000 and d.png.suffix == ".png" and d.csv == d.png.with_suffix(".csv")
        assert read_csv(d.csv) and "\n" not in d.read_as and d.read_as and d.title
        assert d.markdown(root).startswith(f"![{d.title}](figures/{d.png.name})")
    assert matplotlib.get_backend() == backend  # the global backend is never changed
    align = read_csv(root / "figures" / "diag_alignment.csv")
    got = {(r["setting"], r["model"], r["k"]): float(r["accuracy"]) for r in align if r["model"] != "blackbox"}
    assert got["true", "cbm", "0"] == pytest.approx(0.805) and got["true", "cbm_aligned", "max"] == pytest.approx(0.805 - 0.04)
    assert {r["role"] for r in align} == {"constrained", "unconstrained", "black box"}
    sets = read_csv(root / "figures" / "diag_concept_sets.csv")
    assert {(r["setting"], r["concept_set"]) for r in sets} == {("true", "true"), ("llm", "llm")}
    assert float(next(r for r in sets if (r["model"], r["setting"], r["k"]) == ("cbm", "llm", "max"))["accuracy"]) == pytest.approx(0.815)


def test_confidence_draws_the_confirmed_row_where_the_runs_scored_it(tmp_path):
    auto = [automate_cell("s", "cbm", s, confirmed=True) for s in (0, 1)] + [automate_cell("s", "cem", 0)]
    d = dg.confidence(auto, "s", tmp_path / "conf")
    rows = read_csv(d.csv)
    assert {(r["model"], r["split"]) for r in rows} == {("cbm", "test"), ("cbm", CONFIRMED), ("cem", "test")}
    held = {(r["model"], r["split"]): float(r["abstained"]) for r in rows}
    # 5 and 6 of 100 examples stay at 0.5 with every concept true; before, every score up to tau = 0.8 is held
    assert held["cbm", CONFIRMED] == pytest.approx(0.055)
    # ... and those are class 0, predicted 0 at p = 0.5: with every concept true each example is right
    assert {float(r["accuracy"]) for r in rows if (r["model"], r["split"]) == ("cbm", CONFIRMED)} == {1.0}
    p1 = [np.concatenate([np.linspace(0.0, 0.6, 40), np.linspace(0.3 + 0.01 * s, 1.0, 60)]) for s in (0, 1)]
    assert held["cbm", "test"] == pytest.approx(statistics.fmean(np.mean(np.maximum(p, 1 - p) <= 0.8) for p in p1))
    assert sum(int(r["count"]) for r in rows if (r["model"], r["split"]) == ("cbm", CONFIRMED)) == 200
    assert d.png.stat().st_size > 5000 and "no check can rescue" in d.read_as


def test_confirmed_rows_pair_each_seed_as_predicted_and_confirmed():
    auto = [automate_cell("s", "cbm", s, confirmed=True) for s in (0, 1)] + [automate_cell("s", "cem", 0)]
    rows, cols = confirmed_rows(auto)
    (row,) = rows  # the CEM's runs scored no confirmed split
    confs = {c["seed"]: c["_results"]["confidence"] for c in auto if c["model"] == "cbm"}
    held = [{s: c["abstained"][split] for s, c in confs.items()} for split in ("test", CONFIRMED)]
    assert held[1] == {0: pytest.approx(0.05), 1: pytest.approx(0.06)}
    assert row["seeds"] == 2 and row["held back %"] == mean_se(held[0].values())
    assert row["held back, every concept true %"] == "5.50 ± 0.50"
    assert row["held back: difference (points) [95% CI]"] == paired_text(paired(held[1], held[0]))
    assert row["accuracy, every concept true %"] == "100.00 ± 0.00" and cols[:3] == ["setting", "model", "seeds"]
    assert set(cols) == set(row) and confirmed_rows([automate_cell("s", "cbm", 0)]) == ([], ["setting", "model", "seeds"])


def test_figures_that_do_not_apply_are_left_out(tmp_path):
    cells = inter_cells()
    for c in cells:  # old results: no per-concept statistics; no self intervener
        c["_results"].pop("concept_stats")
        c["_results"]["rows"] = [r for r in c["_results"]["rows"] if r["intervener"] != "self"]
    one_set = [{"_setting": s, "_config": {"data": {"concept_set": "true"}}} for s in ("true", "llm")]
    out = dg.write_diagnostics(tmp_path, cells, [], one_set, tmp_path / "figures")  # no experiment.json: no pairs
    assert [d.name for d in out] == ["diag_intervention_heatmap"]
    assert dg.write_diagnostics(tmp_path, [], [], [], tmp_path / "figures") == []


def test_alignment_pairs_from_compare_or_the_model_entries():
    models = {"blackbox": ["model=blackbox"], "cbm": ["model=cbm"], "cem": ["model=cem"],
              "cbm_aligned": ["model=cbm", "model.zero_concepts=[knees]"], "off": ["model=cbm", "model.zero_concepts=[]"]}  # fmt: skip
    assert dg.alignment_pairs({"models": models, "blackbox": "blackbox"}) == [("cbm_aligned", "cbm"), ("cbm_aligned", "off")]
    assert dg.alignment_pairs({"models": models, "compare": {"models": [["cbm", "cbm_aligned"], ["cbm", "cem"]]}}) == [("cbm_aligned", "cbm")]
    assert dg.alignment_pairs({}) == []


def automate_cell(setting: str, model: str, seed: int, confirmed: bool = False) -> dict:
    y = np.array([0] * 40 + [1] * 60)
    p1 = np.concatenate([np.linspace(0.0, 0.6, 40), np.linspace(0.3 + 0.01 * seed, 1.0, 60)])
    sc = Scored(np.maximum(p1, 1 - p1), (p1 > 0.5).astype(np.int64), y)
    scored = {"test": sc}
    if confirmed:  # every concept true: all but 5 + seed examples leave the band [0.2, 0.8] on their class's side
        sure = np.where(y == 1, 0.95, 0.05)
        sure[: 5 + seed] = 0.5
        scored[CONFIRMED] = Scored(np.maximum(sure, 1 - sure), (sure > 0.5).astype(np.int64), y)
    conf = confidence_histograms(scored, 0.8, "probability", 2)
    return {"setting": setting, "model": model, "seed": seed, "_results": {"confidence": conf}}


def test_confidence_histograms_give_back_the_probability_by_class():
    y = np.array([0, 0, 1, 1, 1])
    p1 = np.array([0.02, 0.55, 0.5, 0.93, 1.0])  # p(y=1); the score is max(p, 1-p), the prediction p > 0.5
    sc = Scored(np.maximum(p1, 1 - p1), (p1 > 0.5).astype(np.int64), y)
    conf = confidence_histograms({"test": sc}, 0.9, "probability", 2)
    assert conf["quantity"] == "p(y=1)" and conf["band"] == pytest.approx([0.1, 0.9]) and len(conf["edges"]) == HIST_BINS + 1
    expect = {c: np.histogram(p1[y == c], np.linspace(0, 1, HIST_BINS + 1))[0].tolist() for c in (0, 1)}
    assert conf["splits"]["test"] == {"0": expect[0], "1": expect[1]}
    multi = confidence_histograms({"test": sc}, 0.7, "uncertainty", 2)
    assert multi["quantity"] == "confidence (uncertainty)" and multi["band"] == [0.0, 0.7]
    # held back: score > tau fails for 0.55 and 0.5; per predicted class [0.95, never] only 0.98 passes
    assert conf["abstained"] == {"test": 0.4} and multi["abstained"] == {"test": 0.4}
    assert conf["accuracy"] == {"test": 0.6}  # 0.55 (class 0) and 0.5 (class 1, predicted 0) are wrong
    assert confidence_histograms({"test": sc}, [0.95, None], "probability", 2)["abstained"] == {"test": 0.8}
    rows = dg.confidence_rows([automate_cell("s", "cbm", 0), automate_cell("s", "cbm", 1)], "s")
    for cls, n in (("0", 40), ("1", 60)):
        cr = [r for r in rows if r["class"] == cls]
        assert sum(r["count"] for r in cr) == 2 * n and sum(r["fraction"] for r in cr) == pytest.approx(1.0)
        assert cr[0]["band_low"] == pytest.approx(0.2) and cr[0]["band_high"] == pytest.approx(0.8)


# ----------------------------------------------------------------------------- smoke experiments
def report_inputs(root: Path) -> tuple[list, list, list]:
    """``inter``, ``auto`` and ``runs`` exactly as write_experiment_report builds them."""
    from cbm.experiments.report import _cells
    from cbm.experiments.tables import read_json, run_config

    manifest = read_json(root / "experiment.json")
    runs = []
    for cell in _cells(root, manifest, "train", "metrics.json"):
        m = cell["_results"]
        m["_config"], m["_setting"] = run_config(Path(cell["dir"])), cell["setting"]
        runs.append(m)
    return _cells(root, manifest, "intervene", "results.json"), _cells(root, manifest, "automate", "automation.json"), runs


def check_decision_support_diagnostics(root: Path) -> None:
    """The diagnostics of a ``robot_decision_support_smoke`` experiment (hard CBM, self intervener,
    per-example predictions, an automation stage; true and llm concept sets) against its stored
    results. Called by the smoke-preset test on the experiment it ran (one run serves both)."""
    inter, auto, runs_ = report_inputs(root)
    out = {d.name: d for d in dg.write_diagnostics(root, inter, auto, runs_, root / "diagnostics")}
    assert set(out) == {"diag_per_concept_true", "diag_per_concept_llm", "diag_answer_reliance", "diag_confidence_true",
                        "diag_confidence_llm", "diag_intervention_heatmap", "diag_concept_sets"}  # fmt: skip
    metrics = {(r["_setting"], r["model"]): r for r in runs_}
    heat = {(r["intervener"], r["model"], r["setting"]): r for r in read_csv(out["diag_intervention_heatmap"].csv)}
    for cell in (c for c in inter if c["model"] == "cbm"):  # the hard CBM (the other models' cells feed the same figures)
        setting, res = cell["setting"], cell["_results"]
        rows = {(r["intervener"], r["policy"], r["k"]): r for r in res["rows"]}
        m = len(res["meta"]["concepts"])
        pc = [r for r in read_csv(out[f"diag_per_concept_{setting}"].csv) if r["model"] == "cbm"]
        # detector accuracy per concept, averaged over concepts, is test/concept_acc (no annotation noise here)
        det = {r["concept"]: float(r["detector_accuracy"]) for r in pc}
        assert len(det) == m and statistics.fmean(det.values()) == pytest.approx(metrics[setting, "cbm"]["test/concept_acc"], abs=1e-6)
        for (iv, pol, k), row in rows.items():
            lab = "max" if k == m else str(k)
            sel = [r for r in pc if (r["intervener"], r["policy"], r["k"]) == (iv, pol, lab)]
            assert sum(float(r["requested"]) for r in sel) == pytest.approx(row["mean_requested"] * row["n_examples"], abs=1e-3)
            if iv == "oracle" and k > 0:
                assert all(float(r["intervener_accuracy"]) == 1.0 for r in sel if float(r["requested"]) > 0)
        for iv in ("oracle", "expert", "self"):  # heatmap cells: the results rows' differences (one seed)
            want = rows[iv, "random", m]["accuracy"] - rows[iv, "random", 0]["accuracy"]
            assert float(heat[iv, "cbm", setting]["delta"]) == pytest.approx(want, abs=1e-9)
        # the hard CBM's own answers change no prediction, at any budget
        per_ex = torch.load(Path(cell["dir"]) / "per_example.pt")
        for pol in {r["policy"] for r in res["rows"] if r["intervener"] == "self"}:
            for k in res["meta"]["ks"]:
                assert torch.equal(per_ex[f"self/{pol}/{k}"]["pred"], per_ex[f"self/{pol}/0"]["pred"]), (setting, pol, k)
                assert rows["self", pol, k]["accuracy"] == rows["self", pol, 0]["accuracy"]
    for r in read_csv(out["diag_answer_reliance"].csv):
        if r["intervener"] == "self" and r["model"] == "cbm":
            assert float(r["delta"]) == 0.0
    for cell in auto:  # the confidence histograms hold every test example once, as predicted and confirmed
        conf, n = cell["_results"]["confidence"], cell["_results"]["results"][0]["n"]
        splits = ["test"] + ([CONFIRMED] if cell["_results"].get("n_concepts") else [])
        assert [sum(map(sum, conf["splits"][s].values())) for s in splits] == [n] * len(splits)
        rows = [r for r in read_csv(out[f"diag_confidence_{cell['setting']}"].csv) if r["model"] == cell["model"]]
        assert [sum(int(r["count"]) for r in rows if r["split"] == s) for s in splits] == [n] * len(splits)
        assert {r["split"] for r in rows} == set(splits)
    sets = read_csv(out["diag_concept_sets"].csv)
    assert {r["concept_set"] for r in sets} == {"true", "llm"}


def check_alignment_diagnostics(root: Path) -> None:
    """The alignment figure's data of an ``alignment_smoke`` experiment: each model's accuracy at
    k = 0 and k = max is the mean over its seeds' cells. Called by the smoke-preset test."""
    inter, auto, runs_ = report_inputs(root)
    out = {d.name: d for d in dg.write_diagnostics(root, inter, auto, runs_, root / "diagnostics")}
    assert "diag_alignment" in out and "diag_concept_sets" not in out and "diag_answer_reliance" not in out
    align = {(r["model"], r["k"]): r for r in read_csv(out["diag_alignment"].csv)}
    assert align["cbm_aligned", "0"]["role"] == "constrained" and align["cbm", "0"]["role"] == "unconstrained"
    cells: dict[tuple[str, str], dict[int, float]] = {}  # (model, k) -> seed -> accuracy
    for cell in inter:
        res = cell["_results"]
        m = len(res["meta"]["concepts"])
        for k in (0, m):
            row = next(r for r in res["rows"] if (r["intervener"], r["policy"], r["k"]) == ("oracle", "random", k))
            cells.setdefault((cell["model"], "max" if k == m else "0"), {})[cell["seed"]] = row["accuracy"]
        cells.setdefault(("blackbox", "0"), {})[cell["seed"]] = res["blackbox_accuracy"]  # each cell of a seed: its black box
    assert set(cells) == set(align)
    for key, by_seed in cells.items():
        assert float(align[key]["accuracy"]) == pytest.approx(statistics.fmean(by_seed.values()), abs=1e-9), key
        assert int(align[key]["seeds"]) == len(by_seed) == 2, key

