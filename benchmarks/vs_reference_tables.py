"""Our paper tables beside concept-benchmark 0.4.1's own pipeline, one seed, both run on this machine.

``--task robot``: the reference's ``scripts/robot_pipeline.py`` at the paper's settings (its
``setup``, ``cbm``, ``dnn`` and ``intervene`` stages for the ``ground_truth`` and ``foot_subtypes``
concept presets, KFlip budgets 1 3 max) in a scratch copy of its sdist, run by the interpreter of a
venv that has it installed (``--ref-python``); then its per-concept test accuracy, its k = 0 / k = max
and its DNN, read from the models and CSVs it saved with its own calls. Beside it, ours:
``cbm-experiment +experiment=paper_v04_robot 'seeds=[SEED]'`` (reference mode). Every stage is timed
(whole processes), so the table also gives the wall time of equal work on both sides.

``--task sudoku``: the Sudoku rows are ``benchmarks/vs_reference_sudoku.py`` (its own options: seeds
171-180, the OCR's cell accuracy and boards misread); this flag says so.

    python benchmarks/vs_reference_tables.py --task robot --seed 1014 \\
        --ref-src /tmp/refw/ref --ref-python /tmp/refw/venv/bin/python --work /tmp/vs_ref \\
        --out benchmarks/results/vs_reference_robot_seed1014.md

``--reference-json FILE`` reads a finished reference side (the JSON this script writes into
``--work``) instead of running it again; ``--skip-ours`` writes the reference side alone.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRESETS = {"true": "ground_truth", "human": "foot_subtypes"}
#: The reference's stages for one seed, as reference-run.md ran them (its defaults are the paper's).
REF_STAGES = [(preset, stages) for preset in PRESETS.values() for stages in (["setup"], ["cbm"], ["intervene", "--budgets", "1", "3", "max"])]
REF_STAGES.insert(2, ("ground_truth", ["dnn"]))

#: Run in the reference's venv after its stages: the numbers, with the same calls its pipeline makes.
REF_EVAL = r"""
import json, sys
import numpy as np, pandas as pd, torch
from concept_benchmark.config import RobotBenchmarkConfig
from concept_benchmark.ext.fileutils import load
from concept_benchmark.utils import compute_accuracy, get_loader_config
from experiments.models import RobotClassifierCNN
seed = int(sys.argv[1]); out = {}
for name, preset in (("true", "ground_truth"), ("human", "foot_subtypes")):
    cfg = RobotBenchmarkConfig(seed=seed, concept_preset=preset)
    data = load(cfg.get_dataset_path()); cbm = load(cfg.get_model_path("cbm")); test = data.test
    proba = cbm.concept_detector.predict_proba(test)
    acc = ((proba >= 0.5) == (test.C > 0.5)).mean(0)
    res = pd.read_csv(cfg.get_results_path("cbm"))
    if "intervention_source" in res:
        res = res[res["intervention_source"] == "perfect"]
    out[name] = {"concepts": [str(c) for c in test.concepts], "concept_acc": [float(a) for a in acc],
                 "k0": float((cbm.predict(test) == test.y).mean()),
                 "budgets": {str(b): float(a) for b, a in zip(res["budget"], res["accuracy"])} if "budget" in res else {},
                 "results_csv": str(cfg.get_results_path("cbm")),
                 "sizes": [int(len(data.train.y)), int(len(data.validation.y)), int(len(test.y))]}
    if name == "true":
        dnn = RobotClassifierCNN(input_size=cfg.input_size); dnn.load_state_dict(load(cfg.get_model_path("dnn"))); dnn.eval()
        out["dnn"] = float(compute_accuracy(dnn, test.loader(shuffle=False, **get_loader_config()), device="cpu"))
print("RESULT=" + json.dumps(out))
"""


def timed(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> float:
    """Run ``cmd`` (its output appended to ``log``); its wall seconds. A failure stops the script."""
    t0 = time.perf_counter()
    with open(log, "a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        res = subprocess.run(cmd, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT)
    if res.returncode != 0:
        raise SystemExit(f"vs_reference_tables: '{' '.join(cmd)}' failed (exit {res.returncode}); see {log}")
    return time.perf_counter() - t0


def run_reference(args: argparse.Namespace) -> dict:
    """The reference's robot pipeline for one seed in ``--work/ref`` (a fresh copy of its sdist)."""
    work = Path(args.work).resolve()
    ref = work / "ref"
    if not ref.exists():
        shutil.copytree(args.ref_src, ref, ignore=shutil.ignore_patterns("data", "results", "*.egg-info"))
    env = {**os.environ, "PYTHONPATH": str(ref), "CONCEPT_BENCHMARK_NUM_WORKERS": str(args.workers), "TQDM_DISABLE": "1"}
    log = work / "reference.log"
    times = []
    for preset, stages in REF_STAGES:
        cmd = [args.ref_python, "scripts/robot_pipeline.py", "--seed", str(args.seed), "--concept-preset", preset, "--stages", *stages]
        times.append({"command": " ".join(cmd[1:]), "seconds": timed(cmd, ref, env, log)})
    t0 = time.perf_counter()
    res = subprocess.run([args.ref_python, "-c", REF_EVAL, str(args.seed)], cwd=ref, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"vs_reference_tables: the reference's evaluation failed:\n{res.stderr[-3000:]}")
    out = json.loads(res.stdout.split("RESULT=")[-1])
    times.append({"command": "evaluation (per-concept accuracy, k = 0, DNN)", "seconds": time.perf_counter() - t0})
    version = subprocess.run([args.ref_python, "-c", "import torch, sklearn, numpy; print(torch.__version__, sklearn.__version__, numpy.__version__)"],
                             capture_output=True, text=True).stdout.split()  # fmt: skip
    out.update({"seed": args.seed, "stages": times, "seconds": sum(t["seconds"] for t in times),
                "versions": dict(zip(("torch", "scikit-learn", "numpy"), version))})  # fmt: skip
    (work / f"reference_robot_seed{args.seed}.json").write_text(json.dumps(out, indent=2))
    return out


def run_ours(args: argparse.Namespace) -> dict:
    """``paper_v04_robot`` (reference mode) for the one seed (or the cells of a finished run,
    ``--ours-dir``); the same numbers from its cells."""
    work = Path(args.work).resolve()
    if args.ours_dir:
        root = Path(args.ours_dir).resolve()
        cells = json.loads((root / "experiment.json").read_text()).get("cells", [])
        seconds = sum(float(c.get("seconds") or 0) for c in cells)
        out: dict = {"seed": args.seed, "command": f"(cells of {root})", "seconds": seconds}
    else:
        root = work / "ours" / "paper_v04_robot"
        exe = Path(sys.executable).parent / "cbm-experiment"
        cmd = [str(exe), "+experiment=paper_v04_robot", f"seeds=[{args.seed}]", f"output_dir={root}", f"jobs={args.jobs}",
               f"cache_dir={work / 'cache'}", *args.ours_override]  # fmt: skip
        seconds = timed(cmd, ROOT, dict(os.environ), work / "ours.log")
        out = {"seed": args.seed, "command": " ".join(["cbm-experiment", *cmd[1:]]), "seconds": seconds}
    for name in PRESETS:
        res = json.loads((root / name / "cbm" / f"seed{args.seed}" / "intervene" / "results.json").read_text())
        stats = res["concept_stats"]
        acc = {str(r["k"]): r["accuracy"] for r in res["rows"]}
        out[name] = {"concepts": stats["names"], "concept_acc": stats["detector_accuracy"], "k0": acc["0"], "budgets": acc,
                     "k_max": acc[str(len(stats["names"]))]}  # fmt: skip
    bb = json.loads((root / "true" / "blackbox" / f"seed{args.seed}" / "train" / "metrics.json").read_text())
    out["dnn"] = bb["test/task_acc"]
    import torch

    out["versions"] = {"torch": torch.__version__, "python": platform.python_version()}
    return out


def ref_k_max(side: dict, name: str) -> float | None:
    """The reference's k = max accuracy (its CSV's largest budget)."""
    budgets = side[name].get("budgets") or {}
    if not budgets:
        return None
    return budgets[max(budgets, key=float)]


def pct(v: float | None) -> str:
    return "" if v is None else f"{100 * v:.2f}"


def robot_table(ref: dict | None, ours: dict | None) -> str:
    lines = ["| concept set | quantity | reference 0.4.1 | ours (reference mode) |", "|---|---|---|---|"]
    for name in PRESETS:
        rows = [("CBM k = 0", (ref or {}).get(name, {}).get("k0"), (ours or {}).get(name, {}).get("k0")),
                ("CBM k = max", ref_k_max(ref, name) if ref else None, (ours or {}).get(name, {}).get("k_max"))]  # fmt: skip
        concepts = (ours or ref)[name]["concepts"]
        for j, c in enumerate(concepts):
            r = ref[name]["concept_acc"][j] if ref and j < len(ref[name]["concept_acc"]) else None
            o = ours[name]["concept_acc"][j] if ours else None
            rows.append((f"concept accuracy: {c}", r, o))
        lines += [f"| {name} | {q} | {pct(r)} | {pct(o)} |" for q, r, o in rows]
    lines.append(f"| — | DNN | {pct((ref or {}).get('dnn'))} | {pct((ours or {}).get('dnn'))} |")
    return "\n".join(lines)


def sudoku_rows(args: argparse.Namespace) -> str:
    """The Sudoku rows live in their own script (other options: seeds, OCR measures)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import vs_reference_sudoku

    print(vs_reference_sudoku.main(args))
    raise SystemExit(0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", choices=("robot", "sudoku"), default="robot")
    ap.add_argument("--seed", type=int, default=1014)
    ap.add_argument("--ref-src", default="/tmp/refw/ref", help="the unpacked concept-benchmark 0.4.1 sdist")
    ap.add_argument("--ref-python", default="/tmp/refw/venv/bin/python", help="a Python with the reference installed")
    ap.add_argument("--work", default="/tmp/vs_reference", help="scratch folder (its copy of the sdist, both runs)")
    ap.add_argument("--workers", type=int, default=2, help="the reference's data-loader workers")
    ap.add_argument("--jobs", type=int, default=2, help="our cells side by side")
    ap.add_argument("--reference-json", help="a finished reference side, instead of running it")
    ap.add_argument("--skip-reference", action="store_true")
    ap.add_argument("--skip-ours", action="store_true")
    ap.add_argument("--ours-override", nargs="*", default=[], help="more cbm-experiment overrides for our side")
    ap.add_argument("--ours-dir", help="a finished paper_v04_robot run holding the seed, instead of running it")
    ap.add_argument("--out", help="write the markdown here (default: print)")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import vs_reference_sudoku  # the Sudoku side's own options (--seeds)

    vs_reference_sudoku.add_arguments(ap)
    args = ap.parse_args()
    if args.task == "sudoku":
        sudoku_rows(args)
    Path(args.work).mkdir(parents=True, exist_ok=True)
    ref = json.loads(Path(args.reference_json).read_text()) if args.reference_json else None
    if ref is None and not args.skip_reference:
        ref = run_reference(args)
    ours = None if args.skip_ours else run_ours(args)
    parts = [f"# Robot table, seed {args.seed}: concept-benchmark 0.4.1 vs ours (reference mode)", "", robot_table(ref, ours), ""]
    for side, data in (("reference", ref), ("ours", ours)):
        if data:
            parts.append(f"**{side}**: {data.get('seconds', 0) / 60:.1f} min wall; versions {data.get('versions')}")
            for stage in data.get("stages", []):
                parts.append(f"- `{stage['command']}`: {stage['seconds']:.0f} s")
            if "command" in data:
                parts.append(f"- `{data['command']}`")
            parts.append("")
    if ref and ours and ours.get("seconds"):
        parts.append(f"Whole-table wall time, reference / ours: {ref['seconds'] / ours['seconds']:.2f}x (equal work: one seed, both concept sets, the DNN).")
    text = "\n".join(parts) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
