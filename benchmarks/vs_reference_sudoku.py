"""The Sudoku rows of ``vs_reference_tables.py --task sudoku``: concept-benchmark 0.4.1's own Sudoku
pipeline beside ``+experiment=paper_v04_sudoku``, same seeds, both run on this machine.

Reference side (a venv with the reference installed, ``--ref-python``; its sdist, ``--ref-src``, for
the scripts), per seed, in ``--work/ref_data`` and ``--work/ref_results`` (its data and results
folders, through its ``CONCEPT_BENCHMARK_DATA_DIR`` / ``_RESULTS_DIR``)::

    python scripts/sudoku_pipeline.py --seed S --cell-px 10 --target-accuracy 0.95 \\
        --stages setup ocr cs dnn intervene selective
    python scripts/paper/measure_sudoku_detection.py --seeds S --cell-px 10 --out <work>/ref_detection.csv

then its numbers from the CSVs those write (coverage and checks per budget from its automation
table; net work automated = coverage - checks / (test boards x 27), its README's definition; the
DNN's coverage at 0.95 from its selective table; OCR cell accuracy and boards misread per split from
its detection measure). Ours: ``cbm-experiment +experiment=paper_v04_sudoku 'seeds=[S,...]'``, the
same quantities from its cells. Every command is timed (whole processes): equal work on both sides.

    python benchmarks/vs_reference_tables.py --task sudoku --seeds 171 \\
        --ref-src /tmp/refw/ref --ref-python /tmp/refw/venv/bin/python --work /tmp/vs_ref_sudoku \\
        --out benchmarks/results/vs_reference_sudoku.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The paper's one run (seed 171, its README): coverage and net work automated (%), the DNN's coverage.
PAPER = {"coverage k=0": 64.0, "coverage k=3": 77.0, "NWA k=3": 73.0, "coverage k=27": 95.0, "NWA k=27": 59.0, "DNN coverage": 7.0,
         "OCR cell accuracy (test)": 99.3}  # fmt: skip
ROWS = ["OCR cell accuracy (test)", "boards misread (test)", "CBM accuracy (test)", "coverage k=0", "coverage k=3", "NWA k=3",
        "coverage k=27", "NWA k=27", "DNN coverage"]  # fmt: skip

#: Run in the reference's venv after its stages: its numbers, read from the files its pipeline wrote.
REF_EVAL = r"""
import csv, json, sys
import pandas as pd
from concept_benchmark.config import SudokuBenchmarkConfig
seed, detection = int(sys.argv[1]), sys.argv[2]
cfg = SudokuBenchmarkConfig(seed=seed); cfg.cell_px = 10; cfg.target_accuracy = 0.95
inter = pd.read_csv(cfg.get_results_path("interventions", data_type="tabular").with_suffix(".csv"))
sel = pd.read_csv(cfg.get_results_path("selective", data_type="tabular").with_suffix(".csv"))
n_test = round(cfg.n_boards * 0.2)
out = {"budgets": {}}
for _, r in inter.iterrows():
    k = int(r["budget"]); cov = float(r["coverage_after"])
    out["budgets"][str(k)] = {"coverage": cov, "checks": int(r["total_concept_checks"]), "nwa": cov - float(r["total_concept_checks"]) / (n_test * 27),
                              "accuracy": float(r["accuracy"]), "threshold": float(r.get("abstention_threshold", float("nan")))}
dnn = sel[(sel["model"] == "dnn") & (abs(sel["target_accuracy"] - 0.95) < 1e-9)].iloc[0]
cs = sel[(sel["model"] == "cs") & (abs(sel["target_accuracy"] - 0.95) < 1e-9)].iloc[0]
out.update(dnn_coverage=float(dnn["selective_cov"]), dnn_accuracy=float(dnn["raw_test_acc"]), cbm_accuracy=float(cs["raw_test_acc"]), n_test=n_test)
rows = [r for r in csv.DictReader(open(detection)) if int(r["seed"]) == seed and int(r["px"]) == 10]
out["detection"] = {k: float(v) for k, v in rows[-1].items()}
print("RESULT=" + json.dumps(out))
"""


def timed(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> float:
    t0 = time.perf_counter()
    with open(log, "a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        res = subprocess.run(cmd, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT)
    if res.returncode != 0:
        raise SystemExit(f"vs_reference_sudoku: '{' '.join(cmd)}' failed (exit {res.returncode}); see {log}")
    return time.perf_counter() - t0


def run_reference(args: argparse.Namespace, seed: int) -> dict:
    work = Path(args.work).resolve()
    env = {**os.environ, "CONCEPT_BENCHMARK_DATA_DIR": str(work / "ref_data"), "CONCEPT_BENCHMARK_RESULTS_DIR": str(work / "ref_results"),
           "CONCEPT_BENCHMARK_NUM_WORKERS": str(args.workers), "PYTHONPATH": str(Path(args.ref_src).resolve())}  # fmt: skip
    log, src, detection = work / "reference.log", Path(args.ref_src).resolve(), work / "ref_detection.csv"
    stages = []
    cmd = [args.ref_python, "scripts/sudoku_pipeline.py", "--seed", str(seed), "--cell-px", "10", "--target-accuracy", "0.95",
           "--stages", "setup", "ocr", "cs", "dnn", "intervene", "selective"]  # fmt: skip
    stages.append({"command": " ".join(cmd[1:]), "seconds": timed(cmd, src, env, log)})
    cmd = [args.ref_python, "scripts/paper/measure_sudoku_detection.py", "--seeds", str(seed), "--cell-px", "10", "--out", str(detection)]
    stages.append({"command": " ".join(cmd[1:]).replace(str(detection), "<work>/ref_detection.csv"), "seconds": timed(cmd, src, env, log)})
    res = subprocess.run([args.ref_python, "-c", REF_EVAL, str(seed), str(detection)], cwd=src, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"vs_reference_sudoku: reading the reference's results failed:\n{res.stderr[-3000:]}")
    out = json.loads(res.stdout.split("RESULT=")[-1])
    out.update(seed=seed, stages=stages, seconds=sum(s["seconds"] for s in stages))
    (work / f"reference_sudoku_seed{seed}.json").write_text(json.dumps(out, indent=2))
    return out


def reference_numbers(ref: dict) -> dict[str, float]:
    b, det = ref["budgets"], ref["detection"]
    return {"OCR cell accuracy (test)": det["cell_acc_test"], "boards misread (test)": det["boards_misread_test"],
            "CBM accuracy (test)": ref["cbm_accuracy"], "coverage k=0": b["0"]["coverage"], "coverage k=3": b["3"]["coverage"],
            "NWA k=3": b["3"]["nwa"], "coverage k=27": b["27"]["coverage"], "NWA k=27": b["27"]["nwa"], "DNN coverage": ref["dnn_coverage"]}  # fmt: skip


def run_ours(args: argparse.Namespace, seeds: list[int]) -> dict:
    work = Path(args.work).resolve()
    root = work / "ours" / "paper_v04_sudoku"
    exe = Path(sys.executable).parent / "cbm-experiment"
    cmd = [str(exe), "+experiment=paper_v04_sudoku", f"seeds=[{','.join(map(str, seeds))}]", f"output_dir={root}", f"jobs={args.jobs}",
           f"cache_dir={work / 'cache'}", *args.ours_override]  # fmt: skip
    seconds = timed(cmd, ROOT, dict(os.environ), work / "ours.log")
    import torch

    return {"seeds": seeds, "command": " ".join(["cbm-experiment", *cmd[1:]]), "seconds": seconds, "root": str(root),
            "per_seed": {str(s): our_numbers(root, s) for s in seeds},
            "versions": {"torch": torch.__version__, "python": platform.python_version()}}  # fmt: skip


def our_numbers(root: Path, seed: int) -> dict[str, float]:
    """The quantities of one seed from the experiment's cells."""

    def read(model: str, stage: str, name: str) -> dict:
        return json.loads((root / "10px" / model / f"seed{seed}" / stage / name).read_text())

    metrics = read("cbm", "train", "metrics.json")
    rows = {int(r["k"]): r for r in read("cbm", "automate", "automation.json")["results"]}
    bb = read("blackbox", "automate", "automation.json")["results"][0]
    return {"OCR cell accuracy (test)": metrics.get("test/ocr_cell_acc"), "boards misread (test)": metrics.get("test/boards_misread"),
            "CBM accuracy (test)": metrics.get("test/task_acc"), "coverage k=0": rows[0]["coverage"], "coverage k=3": rows[3]["coverage"],
            "NWA k=3": rows[3]["nwa"], "coverage k=27": rows[27]["coverage"], "NWA k=27": rows[27]["nwa"],
            "DNN coverage": bb["coverage"] if bb.get("coverage") is not None else 0.0}  # fmt: skip


def pct(v: float | None) -> str:
    return "" if v is None else f"{100 * v:.1f}"


def table(refs: dict[int, dict], ours: dict | None, seeds: list[int]) -> str:
    cols = ["quantity", "paper (seed 171)"] + [f"reference {s}" for s in seeds if s in refs] + [f"ours {s}" for s in seeds if ours]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for q in ROWS:
        cells = [q, f"{PAPER[q]:.1f}" if q in PAPER else ""]
        cells += [pct(reference_numbers(refs[s])[q]) for s in seeds if s in refs]
        cells += [pct(ours["per_seed"][str(s)][q]) for s in seeds if ours]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> str:
    """Run both sides for ``args.seeds`` (or read ``--reference-json``); the markdown, also in ``--out``."""
    seeds = list(args.seeds)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    refs: dict[int, dict] = {}
    given = args.reference_json
    for path in [given] if isinstance(given, str) else given or []:
        ref = json.loads(Path(path).read_text())
        refs[int(ref["seed"])] = ref
    if not args.skip_reference:
        for s in seeds:
            refs.setdefault(s, run_reference(args, s))
    ours = None if args.skip_ours else run_ours(args, seeds)
    if ours:
        (work / "ours_sudoku.json").write_text(json.dumps(ours, indent=2))
    parts = [f"# Sudoku table, seeds {', '.join(map(str, seeds))}: concept-benchmark 0.4.1 vs ours (paper_v04_sudoku)", "",
             "Percent. NWA = coverage - checks / (test boards x 27).", "", table(refs, ours, seeds), ""]  # fmt: skip
    ref_s = sum(r["seconds"] for s, r in refs.items() if s in seeds)
    for s, r in sorted(refs.items()):
        parts.append(f"**reference, seed {s}**: {r['seconds'] / 60:.1f} min wall")
        parts += [f"- `{st['command']}`: {st['seconds']:.0f} s" for st in r["stages"]]
    if ours:
        parts += ["", f"**ours**: {ours['seconds'] / 60:.1f} min wall, `{ours['command']}`; versions {ours['versions']}"]
        if refs and all(s in refs for s in seeds):
            parts.append(f"\nWhole-table wall time, reference / ours: {ref_s / ours['seconds']:.2f}x (equal work: the same seeds, OCR, CBM, DNN, automation).")
    text = "\n".join(parts) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    return text


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The Sudoku side's options (``vs_reference_tables.py`` adds the shared ones)."""
    ap.add_argument("--seeds", type=int, nargs="+", default=[171], help="Sudoku seeds (the paper's run: 171)")
