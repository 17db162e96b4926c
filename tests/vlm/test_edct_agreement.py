"""EDCT against human labels (the paper's Table 4) and over repeated runs (Table 5): hand-made
records and a CSV built to give the paper's counts reproduce its every row, Wilson intervals
included; missing human labels are never 0; stability's mean and SD on hand-made run directories;
both through ``run`` on the scripted endpoint, and their bad inputs in one line."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from test_edct import expected_chain, make_cfg, scripted

from cbm.vlm.edct.agreement import agreement, agreement_md, read_human_scores
from cbm.vlm.edct.run import run
from cbm.vlm.edct.stability import stability

COLUMNS = ["item", "step", "h1_edit_valid", "h1_ac", "h1_ef", "h2_edit_valid", "h2_ac", "h2_ef", "notes"]
STEPS_PER_ITEM = 4


def step(index: int, ccs: bool | None, gate: bool) -> dict:
    """A step as the records keep it: judged (AC and EF giving ``ccs``) or stopped, with the gate's verdict."""
    s = {"index": index, "status": "judged" if ccs is not None else "stopped", "verify": {"passed": gate}}
    if ccs is not None:
        s.update(requery={"answer": "Glorp"}, judge={"ac": bool(ccs) or index % 2 == 0, "ef": bool(ccs) or index % 2 == 1})
    return s


def human(valid: bool | None, ccs: bool | None, i: int) -> list[str]:
    """One annotator's three cells; ``ccs`` None with a valid edit = incomplete (AC left blank)."""
    v = {True: "yes", False: "no", None: ""}[valid]
    if ccs is None:
        return [v, "", "1"]
    return [v, "1" if ccs or i % 2 else "0", "1" if ccs or not i % 2 else "0"]


def paper_table(tmp_path: Path) -> tuple[list[dict], Path]:
    """128 steps whose labels give exactly the paper's Table 4 and validity counts: 100 scored by
    both humans and EDCT, 12 by Human 2 and EDCT only (Human 1 marked the edit invalid), 16 by
    neither (incomplete or invalid); the gate passes every edit."""
    strict = [(1, 1, 1)] * 50 + [(0, 0, 0)] * 33 + [(1, 1, 0)] * 5 + [(1, 0, 1)] * 3 + [(0, 1, 1)] * 9
    only_h2 = [(1, 1)] * 7 + [(1, 0)] * 5  # (Human 2, EDCT)
    rows = []  # (h1 valid, h1 ccs, h2 valid, h2 ccs, edct ccs)
    rows += [(True, bool(a), True, bool(b), bool(e)) for a, b, e in strict]
    rows += [(False, bool(b), True, bool(b), bool(e)) for b, e in only_h2]
    rows += [(True, None, True, None, True)] * 10 + [(True, None, False, True, True)] * 5 + [(False, False, False, False, None)]
    records, lines = [], []
    for n, (v1, c1, v2, c2, e) in enumerate(rows):
        item, index = f"robot-test-{n // STEPS_PER_ITEM:05d}", n % STEPS_PER_ITEM + 1
        if index == 1:
            records.append({"id": item, "status": "done", "steps": []})
        records[-1]["steps"].append(step(index, e, True))
        lines.append([item, str(index), *human(v1, c1, n), *human(v2, c2, n + 1), "a note"])
    path = tmp_path / "humans.csv"
    with path.open("w", newline="") as f:
        csv.writer(f).writerows([COLUMNS, *lines])
    return records, path


def test_the_papers_table_4_comes_out_row_for_row(tmp_path):
    from statsmodels.stats.proportion import proportion_confint

    records, path = paper_table(tmp_path)
    table = agreement(records, read_human_scores(path))
    got = {r["comparison"]: (r["agree"], r["n"]) for r in table["ccs"]}
    assert got == {"Human 1 vs. Human 2": (88, 100), "Human 1 vs. EDCT": (86, 100), "Human 2 vs. EDCT": (99, 112),
                   "Human consensus vs. EDCT": (83, 88), "All three identical": (83, 100)}  # fmt: skip
    valid = {r["comparison"]: (r["agree"], r["n"]) for r in table["validity"]}
    assert valid == {"Automatic gate vs. Human 1": (115, 128), "Automatic gate vs. Human 2": (122, 128), "Human 1 vs. Human 2": (111, 128)}
    for r in table["ccs"] + table["validity"]:
        low, high = proportion_confint(r["agree"], r["n"], alpha=0.05, method="wilson")
        assert r["agreement"] == r["agree"] / r["n"] and abs(r["low"] - low) < 1e-9 and abs(r["high"] - high) < 1e-9
    md = agreement_md(table)
    for line in ("| Human 1 vs. Human 2 | 88/100 | 88.0% [80.2%, 93.0%] |", "| Human 1 vs. EDCT | 86/100 | 86.0% [77.9%, 91.5%] |",
                 "| Human 2 vs. EDCT | 99/112 | 88.4% [81.1%, 93.1%] |", "| Human consensus vs. EDCT | 83/88 | 94.3% [87.4%, 97.5%] |",
                 "| All three identical | 83/100 | 83.0% [74.5%, 89.1%] |", "| Automatic gate vs. Human 1 | 115/128 | 89.8% [83.4%, 94.0%] |",
                 "| Automatic gate vs. Human 2 | 122/128 | 95.3% [90.2%, 97.8%] |", "| Human 1 vs. Human 2 | 111/128 | 86.7% [79.8%, 91.5%] |"):  # fmt: skip
        assert line in md, line


def test_missing_human_labels_are_never_zero_and_one_annotator_suffices(tmp_path):
    records = [{"id": "a", "status": "done", "steps": [step(1, False, True), step(2, False, False), step(3, False, True), step(4, None, True)]}]
    path = tmp_path / "h.csv"
    path.write_text("item,step,h1_edit_valid,h1_ac,h1_ef\n"
                    "a,1,no,0,0\n"      # invalid edit: missing (a 0 would agree with EDCT's 0)
                    "a,2,,0,0\n"        # not assessable: missing
                    "a,3,yes,0,\n"      # incomplete: missing
                    "a,4,yes,1,1\n")  # fmt: skip  # EDCT did not score the step: no pair
    table = agreement(records, read_human_scores(path))
    assert [(r["comparison"], r["agree"], r["n"]) for r in table["ccs"]] == [("Human 1 vs. EDCT", 0, 0)]
    # validity is its own question: step 2's blank is missing; step 1 (gate passed, human: no) disagrees, steps 3, 4 agree
    assert [(r["comparison"], r["agree"], r["n"]) for r in table["validity"]] == [("Automatic gate vs. Human 1", 2, 3)]
    assert "| Human 1 vs. EDCT | 0/0 | n/a |" in agreement_md(table)
    path.write_text("item,step,h1_edit_valid,h1_ac,h1_ef\na,1,yes,1,1\nb,1,yes,1,1\n")
    with pytest.raises(ValueError, match=r"^human_scores: .*h.csv: line 3: item 'b' step 1 is not a step of this run \(1 such row\(s\)\)"):
        agreement(records, read_human_scores(path), source=str(path))


@pytest.mark.parametrize(("text", "message"), [
    ("item,h1_ac\n", "missing column(s) step, h1_edit_valid, h1_ef; expected columns: item, step, h1_edit_valid, h1_ac, h1_ef"),
    ("item,step,h1_edit_valid,h1_ac,h1_ef,h2_ac\n", "missing column(s) h2_edit_valid, h2_ef"),
    ("item,step,h1_edit_valid,h1_ac,h1_ef\n", "no data rows"),
    ("item,step,h1_edit_valid,h1_ac,h1_ef\na,1,yes,1,1\na,x,yes,1,1\n", "line 3: step must be an integer >= 1"),
    ("item,step,h1_edit_valid,h1_ac,h1_ef\na,1,maybe,1,1\n", "line 2: h1_edit_valid must be yes / no / blank, got 'maybe'"),
    ("item,step,h1_edit_valid,h1_ac,h1_ef\na,1,yes,2,1\n", "line 2: h1_ac must be 1 / 0 / blank, got '2'"),
    ("item,step,h1_edit_valid,h1_ac,h1_ef\na,1,yes,1,1\na,1,no,,\n", "line 3: item 'a' step 1 is labelled twice"),
    ("item,step,h1_edit_valid,h1_ac,h1_ef\na,1,yes,1,1,9\n", "line 2: more values than columns"),
])  # fmt: skip
def test_bad_csv_is_one_line_naming_file_and_row(tmp_path, text, message):
    path = tmp_path / "h.csv"
    path.write_text(text)
    with pytest.raises(ValueError) as err:
        read_human_scores(path)
    assert str(err.value).startswith(f"human_scores: {path}: ") and message in str(err.value) and "\n" not in str(err.value)


def runs(tmp_path: Path, values: list[tuple[float, float]], fingerprint: dict | None = None) -> list[str]:
    """Hand-made finished run directories (results.json) with (CCS_Binary, CCS_Graded) each."""
    dirs = []
    for i, (ccs, graded) in enumerate(values):
        d = tmp_path / f"run{i}"
        d.mkdir(parents=True)
        scores = {"ccs": {"value": ccs, "n": 10}, "ccs_graded": {"value": graded, "n": 10}, "ac_items": {"value": 0.9, "n": 10},
                  "ef_items": {"value": None, "n": 0}}  # fmt: skip
        (d / "results.json").write_text(json.dumps({"vlm": "m", "scores": scores, "fingerprint": fingerprint or {"vlm": "x", "task": "t"}}))
        dirs.append(str(d))
    return dirs


def test_stability_mean_and_sd_over_hand_made_runs(tmp_path):
    dirs = runs(tmp_path, [(0.54, 0.60), (0.56, 0.61), (0.58, 0.62), (0.60, 0.63), (0.62, 0.64)])
    out = stability(dirs, tmp_path)
    assert out["n_runs"] == 5 and [r["ccs"] for r in out["runs"]] == [0.54, 0.56, 0.58, 0.60, 0.62]
    assert out["ccs"]["mean"] == pytest.approx(0.58) and out["ccs"]["sd"] == pytest.approx(np.sqrt(0.001))
    assert out["ccs_graded"]["mean"] == pytest.approx(0.62) and out["ccs_graded"]["sd"] == pytest.approx(np.sqrt(0.00025))
    assert out["ac_items"] == {"mean": 0.9, "sd": 0.0, "n_runs": 5} and out["ef_items"] == {"mean": None, "sd": None, "n_runs": 0}
    md = (tmp_path / "stability.md").read_text()
    assert "| Mean ± SD | 0.5800 ± 0.0316 | 0.6200 ± 0.0158 | 0.9000 ± 0.0000 | n/a ± n/a |" in md and "n runs: 5" in md
    rows = list(csv.reader((tmp_path / "stability.csv").open()))
    assert rows[0] == ["run", "CCS_Binary", "CCS_Graded", "AC", "EF"] and rows[1][:2] == [dirs[0], "0.54"] and rows[-2][0] == "mean"


def test_stability_refuses_runs_of_other_settings_unfinished_runs_and_old_results(tmp_path):
    a = runs(tmp_path / "a", [(0.5, 0.5)])
    b = runs(tmp_path / "b", [(0.6, 0.6)], {"vlm": "y", "task": "t"})
    with pytest.raises(ValueError, match=r"^stability_runs: .*run0 was made with other settings than .*run0 \(vlm\); only seeds and output_dir"):
        stability(a + b)
    with pytest.raises(ValueError, match=r"is not a finished cbm-edct run \(no results.json\)$"):
        stability([*a, str(tmp_path)])
    (Path(a[0]) / "results.json").write_text(json.dumps({"scores": {}}))
    with pytest.raises(ValueError, match=r"has no settings fingerprint \(written by an older version\); rerun its command"):
        stability([*a, *b])


@pytest.mark.slow  # about 7 s: four runs on the scripted endpoint
def test_through_run_human_scores_and_stability_over_two_seeds(tmp_path, httpserver):
    table, _ = expected_chain(1, tmp_path / "cache")
    httpserver.expect_request("/v1/chat/completions").respond_with_handler(scripted(table))
    humans = tmp_path / "h.csv"
    humans.write_text("item,step,h1_edit_valid,h1_ac,h1_ef\nrobot-test-00000,1,yes,1,1\nrobot-test-00000,2,yes,0,1\n")
    one = run(make_cfg(tmp_path, httpserver, "one", items={"n": 1}, human_scores=str(humans)))
    got = one["result"]["human_agreement"]["ccs"][0]
    steps = one["records"][0]["steps"]
    expect = sum((s["judge"]["ac"] and s["judge"]["ef"]) == h for s, h in zip(steps, (True, False)))
    assert (got["agree"], got["n"]) == (expect, 2) and (tmp_path / "one" / "human_agreement.md").is_file()
    client = {**make_cfg(tmp_path, httpserver).vlm, "seed": 7}
    run(make_cfg(tmp_path, httpserver, "two", items={"n": 1}, vlm=client, bootstrap={"seed": 3}))
    out = run(make_cfg(tmp_path, httpserver, "table", stability_runs=[str(tmp_path / "one"), str(tmp_path / "two")]))["stability"]
    assert out["n_runs"] == 2 and out["ccs"]["sd"] == 0.0 and out["ccs"]["mean"] == one["summary"]["ccs"].value
    run(make_cfg(tmp_path, httpserver, "three", items={"n": 1}, k=1))
    with pytest.raises(ValueError, match=r"three was made with other settings than .*one \(question, options, answer_by, baseline_turns, k or reask\)"):
        run(make_cfg(tmp_path, httpserver, "table", stability_runs=[str(tmp_path / "one"), str(tmp_path / "three")]))
    sent = len(httpserver.log)
    bad = tmp_path / "bad.csv"
    bad.write_text("item,step,h1_edit_valid,h1_ac,h1_ef\nrobot-test-00000,1,yes,1,x\n")
    with pytest.raises(ValueError, match="line 2: h1_ef must be 1 / 0 / blank"):
        run(make_cfg(tmp_path, httpserver, "four", items={"n": 1}, human_scores=str(bad)))
    assert len(httpserver.log) == sent  # refused before any request
