"""The testbed end to end at a smoke size (``cbm-vlm-zoo``): every output written and consistent,
models cached (a rerun trains nothing), the repaired adapter saved. What a trained zoo measures
is in the README (the full size does not fit a test)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SMOKE = ["data.n_train=160", "data.n_test=40", "data.image_size=32", "train.base_epochs=1", "train.member_epochs=1", "train.threads=1",
         "members={faithful: 0, shortcut: 1}", "edct_items=16", "bootstrap=200", "repair.pairs=24", "repair.epochs=1", "logger=csv_only"]  # fmt: skip


def run_zoo(args: list[str], out: Path) -> tuple[subprocess.CompletedProcess, dict]:
    """``cbm-vlm-zoo`` with ``args`` into ``out``: its process (exit 0 asserted) and ``results.json``."""
    cmd = [str(Path(sys.executable).parent / "cbm-vlm-zoo"), *args, f"output_dir={out}"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env={**os.environ, "CBM_PROGRESS": "0"})
    assert res.returncode == 0, res.stderr[-3000:]
    return res, json.loads((out / "results.json").read_text())


@pytest.mark.slow
def test_the_zoo_study_writes_consistent_results_and_caches_its_models(tmp_path):
    out = tmp_path / "zoo"
    res, result = run_zoo(SMOKE, out)
    assert list(result["members"]) == ["faithful", "shortcut"]
    for name, row in result["members"].items():
        assert row["items"] == 16 and row["scored"] + sum(row["excluded"].values()) == 16
        assert 0 <= row["cue_reliance"] <= 1 and 0 <= row["part_reliance"] <= 1 and row["n"] == 40
        lines = (out / "edct" / f"{name}.jsonl").read_text().splitlines()
        assert len(lines) == 16 and all(json.loads(x)["status"] in ("done", "baseline_unparsed", "no_concepts") for x in lines)
    assert {"part_reliance", "cue_reliance"} <= set(result["across"])
    rep = result["repair"]  # an untrained smoke model cites nothing: EDCT finds no failed edit to teach
    assert rep["member"] == "shortcut" and rep["pairs"] == (0 if "mcnemar" not in rep else rep["pairs"])
    assert (out / "zoo.png").stat().st_size > 0 and "| faithful |" in (out / "results.md").read_text()
    stamps = {p: p.stat().st_mtime_ns for p in (out / "models").glob("*/zoo.json")}
    assert len(stamps) == 3  # base + two members
    res, _ = run_zoo(SMOKE, out)
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps  # nothing retrained
    assert "epochs, loss" not in res.stdout


@pytest.mark.slow
def test_repair_tunes_a_lora_adapter_on_the_verified_pairs(tmp_path):
    import torch
    from test_zoo import replies, shortcut_says

    from cbm.vlm.finetune.config import LoraSettings
    from cbm.vlm.zoo import model as zm
    from cbm.vlm.zoo.config import ZooData, ZooModel
    from cbm.vlm.zoo.data import Texts, make_robots
    from cbm.vlm.zoo.edct import run_edct
    from cbm.vlm.zoo.repair import repair

    torch.set_num_threads(1)
    data = ZooData(n_train=60, n_test=20, image_size=32)
    robots, texts = make_robots(data), Texts(list(data.rule))
    model, proc = zm.load(zm.build(tmp_path / "m", ZooModel(hidden=32, vision_width=32, vision_heads=2), data, texts.words))
    enc = zm.Encoder(proc)
    _, records = run_edct(replies(robots, shortcut_says), robots, 20, n_resamples=200, split="train")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    tuned, taught = repair(model, enc, robots, texts, records, 1, 1e-3, 8, LoraSettings(r=4, alpha=8, dropout=0.0, projector=True), 0)
    assert taught["pairs"] > 0 and len(taught["losses"]) == 1 and np.isfinite(taught["losses"][0])
    trainable = {n for n, p in tuned.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    for n, p in tuned.base_model.model.named_parameters():  # the base weights are frozen
        if "lora_" not in n and n.replace(".base_layer", "") in before:
            assert torch.equal(p, before[n.replace(".base_layer", "")]), n
    tuned.save_pretrained(tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_config.json").exists()
    # before / after: every figure measured on both, McNemar on the paired part-flip counterfactuals
    from cbm.vlm.finetune.evaluate import mcnemar
    from cbm.vlm.zoo.repair import compare, evaluate

    after = evaluate(tuned, enc, robots, 8, 6, 200, 0)
    with tuned.disable_adapter():
        before = evaluate(tuned, enc, robots, 8, 6, 200, 0)
    out = compare(before, after)
    assert len(before["right_on_flips"]) == len(after["right_on_flips"]) == before["part_flips"] > 0
    assert out["mcnemar"] == mcnemar(list(before["right_on_flips"]), list(after["right_on_flips"]))
    for when in ("before", "after"):
        loc = out["localisation"][when]
        assert 0 < loc["parts"] <= 1 and 0 <= loc["cue"] <= 1  # shares (1: the parts cover every image token)
        assert out["cue_reliance"][when] == (before if when == "before" else after)["cue_reliance"]


SUDOKU_SMOKE = ["task=sudoku", "sudoku.n_train=120", "sudoku.n_test=40", "sudoku.cell_size=16", "train.base_epochs=1", "train.member_epochs=1",
                "train.threads=1", "edct_items=16", "repair.pairs=60", "repair.epochs=1", "logger=csv_only"]  # fmt: skip


@pytest.mark.slow
def test_the_sudoku_zoo_writes_its_table_repairs_the_counter_and_caches_its_models(tmp_path):
    out = tmp_path / "sudoku"
    res, result = run_zoo(SUDOKU_SMOKE, out)
    assert result["task"] == "sudoku" and list(result["members"]) == ["faithful", "shortcut"]
    for row in result["members"].values():
        assert row["n"] == 40 and all(0 <= row[k] <= 1 for k in ("accuracy", "accuracy_cue_flipped", "cue_reliance", "digit_reliance"))
    rep = result["repair"]
    assert rep["member"] == "shortcut"
    # the one-epoch counter answers one word: it fails the cue flips of half the pool, is taught them and measured again
    assert rep["pairs"] > 0 and rep["pairs"] % 2 == 0 and set(rep["localisation"]["before"]) == {"edited_cell", "shaded"}
    assert 0 <= rep["mcnemar"]["p_value"] <= 1 and (out / "models_sudoku" / "shortcut-repaired" / "adapter_config.json").is_file()
    loc = rep["localisation"]["after"]
    assert 0 <= loc["edited_cell"] <= 1 and 0 <= loc["shaded"] <= 1 and rep["says_valid"]["before"] in (0.0, 1.0)
    assert (out / "zoo.png").stat().st_size > 0 and "| shortcut |" in (out / "results.md").read_text()
    assert "EDCT records" not in res.stdout
    stamps = {p: p.stat().st_mtime_ns for p in (out / "models_sudoku").glob("*/zoo.json")}
    assert len(stamps) == 3  # base + two members
    res, _ = run_zoo(SUDOKU_SMOKE, out)
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps and "epochs, loss" not in res.stdout
