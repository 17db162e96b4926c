"""The 0.4 robot tables' committed results (benchmarks/v04_results.py): the docs' tables are what the
package's own table code computes from the committed per-seed files, and a run's grids merge into those
files without changing what the tables read."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from cbm.experiments.tables import by_seed, own_answer_rows

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
GUIDES = ROOT / "docs" / "guides"


def _module():
    spec = importlib.util.spec_from_file_location("v04_results", ROOT / "benchmarks" / "v04_results.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


v04 = _module()

#: table -> (its results file, the docs page that shows it)
TABLES = {"alignment": ("paper_v04_alignment_seeds1014-1023.json", "v04-tables.md"),
          "sparse": ("paper_v04_sparse_seeds1014-1017.json", "v04-more-tables.md"),
          "own_answers": ("paper_v04_own_answers_seeds1014-1023.json", "v04-more-tables.md"),
          "tau": ("sudoku_v04_tau_seeds171-180.json", "v04-more-tables.md"),
          "confirmed": ("sudoku_v04_tau_seeds171-180.json", "v04-more-tables.md")}  # fmt: skip


@pytest.mark.parametrize("table", sorted(TABLES))
def test_docs_tables_are_the_results_files(table):
    results, page = TABLES[table]
    doc = json.loads((RESULTS / results).read_text())
    text = (GUIDES / page).read_text()
    assert f"benchmarks/results/{results}" in text
    blocks = v04.TABLES[table](doc)
    assert blocks and all(blocks)
    for block in blocks:
        assert "\n".join(block) in text, f"{page} does not show, as computed from {results}:\n" + "\n".join(block)


def _grid(seed: int, k_max: int, blackbox: float | None = None) -> dict:
    """One intervention grid's results.json as cbm-intervene writes it (the fields the tables read)."""
    rows = []
    for iv, shift in (("oracle", 0.0), ("self", -0.3)):
        for i, k in enumerate((0, 1, 3, k_max)):
            share = 0.0 if k == 0 else 0.25 + 0.01 * i
            rows.append({"intervener": iv, "policy": "responsiveness", "k": k, "n_examples": 100, "gain": None,
                         "accuracy": 0.5 + 0.01 * (seed % 7) + (0.0 if k == 0 else 0.05 * i + shift * share),
                         "frac_requesting": share, "frac_changed": share / 2})  # fmt: skip
    return {"rows": rows, "blackbox_accuracy": blackbox, "concept_stats": {},
            "meta": {"k_max": k_max, "concepts": [f"c{j}" for j in range(k_max)]}}  # fmt: skip


def _run(root: Path, seeds: list[int]) -> list[dict]:
    """A run folder with two settings and two models per seed; returns its cells as the report reads them."""
    cells = []
    for seed in seeds:
        for setting, k_max in (("true", 7), ("human", 12)):
            for model in ("cem", "probcbm"):
                res = _grid(seed, k_max, blackbox=0.8 + seed / 1e4 if model == "cem" else None)
                d = root / setting / model / f"seed{seed}" / "intervene"
                d.mkdir(parents=True)
                (d / "results.json").write_text(json.dumps(res))
                cells.append({"setting": setting, "model": model, "seed": seed, "_results": res})
    return cells


def test_merge_keeps_what_the_tables_read(tmp_path):
    into = tmp_path / "results.json"
    shutil.copyfile(RESULTS / TABLES["own_answers"][0], into)
    before = json.loads(into.read_text())
    cells = _run(tmp_path / "run", [2001, 2002])
    doc = v04.merge(tmp_path / "run", into)
    assert json.loads(into.read_text()) == doc
    assert list(doc["seeds"]) == [*before["seeds"], "2001", "2002"]
    for seed in before["seeds"]:
        assert doc["seeds"][seed] == before["seeds"][seed]
    assert doc["seeds"]["2001"]["true"]["blackbox"] == pytest.approx(1.0001)
    assert doc["seeds"]["2002"]["human"]["cem"]["self"]["max"]["frac_changed"] == pytest.approx((0.25 + 0.03) / 2)
    # What the tables read from the merged file is what they read from the run itself.
    merged = [c for c in v04.cells(doc) if c["seed"] in (2001, 2002)]
    assert by_seed(merged) == by_seed(cells)
    assert own_answer_rows(merged) == own_answer_rows(cells)


def test_merge_takes_the_seeds_and_models_asked_and_replaces_them(tmp_path):
    into = tmp_path / "results.json"
    shutil.copyfile(RESULTS / TABLES["own_answers"][0], into)
    _run(tmp_path / "run", [2001, 2002])
    doc = v04.merge(tmp_path / "run", into, seeds={2002}, models={"probcbm"})
    assert "2001" not in doc["seeds"] and set(doc["seeds"]["2002"]["true"]) == {"probcbm"}
    doc = v04.merge(tmp_path / "run", into, seeds={2002})
    assert set(doc["seeds"]["2002"]["true"]) == {"probcbm", "cem", "blackbox"}
    doc["seeds"]["2002"]["true"]["cem"]["oracle"]["0"]["acc"] = -1.0
    into.write_text(json.dumps(doc))
    again = v04.merge(tmp_path / "run", into, seeds={2002})
    assert again["seeds"]["2002"]["true"]["cem"]["oracle"]["0"]["acc"] == pytest.approx(0.5 + 0.01 * (2002 % 7))


def test_merge_refuses_a_run_that_does_not_match(tmp_path, capsys):
    into = tmp_path / "results.json"
    shutil.copyfile(RESULTS / TABLES["own_answers"][0], into)
    original = into.read_text()
    run = tmp_path / "run"
    (run / "true" / "cem" / "seed1" / "intervene").mkdir(parents=True)
    (run / "true" / "cem" / "seed1" / "intervene" / "results.json").write_text(json.dumps(_grid(1, 9)))
    assert v04.main(["merge", str(run), str(into)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "budget max is 9" in err and "has 7" in err
    assert into.read_text() == original  # nothing written
    assert v04.main(["merge", str(tmp_path / "empty"), str(into)]) == 2
    assert "holds no" in capsys.readouterr().err
    assert v04.main(["merge", str(run), str(into), "--seeds", "5"]) == 2
    assert "no grid of the seeds [5]" in capsys.readouterr().err


def _automation(seed: int, model: str) -> dict:
    """One cbm-automate automation.json (the fields the tables read, and some they do not)."""
    ks = [0] if model == "blackbox" else [0, 1, 3, 27]

    def rows(target: float) -> list[dict]:
        cov = [round(0.5 + 0.1 * i + (0.99 - target) + 0.01 * (seed - 171), 4) for i in range(len(ks))]
        return [{"k": k, "tau": 0.7, "n": 200, "coverage_before": cov[0], "coverage": c, "selective_acc": target + 0.001,
                 "nwa": c - 0.02 * k / 27, "meets_target": True, "requested_share": [0.1] * 27, "aurc": 0.05}
                for k, c in zip(ks, cov)]  # fmt: skip

    rep = {"n_concepts": 27, "calibration": {"target_accuracy": 0.95, "method": "plugin"}, "results": rows(0.95),
           "curves": {"val (k=0)": [[0.0, 1.0]]}, "sweep": [{"target_accuracy": t, "threshold": "global", "tau": 0.6, "results": rows(t)}
                                                            for t in (0.9, 0.99)]}  # fmt: skip
    if model == "cbm":  # confirmed confidence: held back 0.2 / 0.1 (seed 171) -> 0.05 / 0.04 with every concept true
        rep["confidence"] = {"band": [0.3, 0.7], "splits": {"test": {"0": [1], "1": [1]}},
                             "abstained": {"val": 0.3, "test": 0.2 - 0.1 * (seed - 171), "test_confirmed": 0.05 - 0.01 * (seed - 171)},
                             "accuracy": {"val": 0.8, "test": 0.9, "test_confirmed": 0.92 + 0.02 * (seed - 171)}}  # fmt: skip
    return rep


def test_merge_automation_keeps_the_tau_sweep(tmp_path):
    from cbm.experiments.tables import target_rows

    run, cells = tmp_path / "run", []
    for seed in (171, 172):
        for model in ("blackbox", "cbm"):
            rep = _automation(seed, model)
            d = run / "10px" / model / f"seed{seed}" / "automate"
            d.mkdir(parents=True)
            (d / "automation.json").write_text(json.dumps(rep))
            cells.append({"setting": "10px", "model": model, "seed": seed, "_results": rep})
    into = tmp_path / "tau.json"
    into.write_text(json.dumps({"source": "test"}))
    doc = v04.merge_automation(run, into)
    assert json.loads(into.read_text()) == doc and list(doc["automation"]) == ["171", "172"]
    kept = doc["automation"]["172"]["10px"]["cbm"]
    assert "requested_share" not in kept["results"][0] and [s["target_accuracy"] for s in kept["sweep"]] == [0.9, 0.99]
    assert target_rows(v04.automation_cells(doc)) == target_rows(cells)
    # coverage at 0.90 on seeds 171 / 172: 0.59 / 0.60 at k = 0 -> 59.50 ± 0.50; NWA subtracts 2k/27 points (k = 1, 3, 27)
    (block,) = v04.tau_table(doc)
    assert block[0] == "| 90% | 59.50 ± 0.50 | 69.50 ± 0.50 | 79.50 ± 0.50 | 89.50 ± 0.50 | +69.43 ± 0.50 | +79.28 ± 0.50 | +87.50 ± 0.50 | 90.10 ± 0.00 | 59.50 ± 0.50 |".replace("-", "−")
    assert [row.split(" | ")[0] for row in block] == ["| 90%", "| 95%", "| 99%"]
    # the per-split shares are kept (not the histograms); differences paired per seed: -15 and -6 [t(1) interval]
    assert "splits" not in kept["confidence"] and kept["confidence"]["abstained"]["test_confirmed"] == pytest.approx(0.04)
    (conf,) = v04.confirmed_table(doc)
    assert conf[0].startswith("| CBM | 2 | 15.00 ± 5.00 → 4.50 ± 0.50 | −10.50 [") and "| 90.00 ± 0.00 → 93.00 ± 1.00 | +3.00 [" in conf[0]
