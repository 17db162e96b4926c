"""Quality over seeds: train every architecture on one dataset for several seeds and print one table
with the acceptance checks (task accuracy, oracle interventions at every k, same-seed repeats).

    python benchmarks/seed_sweep.py                                   # CPU: 5 archs x seeds 0,1,2, robot
    python benchmarks/seed_sweep.py --seeds 0-9 --jobs 2              # the README's 10-seed table
    python benchmarks/seed_sweep.py --jobs 8 --repeat -- trainer=gpu  # GPU: parallel jobs, + a same-seed repeat
    python benchmarks/seed_sweep.py --data sudoku_50px --seeds 0 --archs cbm,cem

Each run is ``python -m cbm.experiments.train`` (the real entry point) writing into
``<out>/<data>-<arch>-s<seed>``; finished runs are reused (delete the folder to rerun). Checks
(robot data): task accuracy >= 99.5%, oracle accuracy at k=max >= 99%, no budget k lowering
accuracy by more than 1 point below k=0. ``--reference`` compares mean task accuracy with another
sweep's JSON (e.g. the CPU figures in benchmarks/results/seeds_robot_cpu.json): within 0.5 points.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ARCHS = ["blackbox", "cbm", "cem", "probcbm", "ecbm"]
#: Thresholds of the acceptance checks (robot data; Bayes rate 99.98%).
TASK_MIN, KMAX_MIN, MAX_DROP, REFERENCE_TOL = 0.995, 0.99, 0.01, 0.005


def parse_seeds(text: str) -> list[int]:
    """``"0-9"``, ``"0,1,2"`` or a mix (``"0,3,5-7"``) -> distinct seeds in order."""
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        out += range(int(lo), int(hi) + 1) if hi else [int(lo)]
    return list(dict.fromkeys(out))


def model_for(arch: str, data: str) -> str:
    return "cbm_sudoku" if arch == "cbm" and data.startswith("sudoku") else arch


def train(arch: str, seed: int, data: str, out: Path, extra: list[str], tag: str = "") -> dict[str, Any]:
    """One ``cbm-train`` run (reused when its metrics.json exists); metrics + timing + wall seconds."""
    run_dir = out / f"{data}-{arch}-s{seed}{tag}"
    metrics_file = run_dir / "metrics.json"
    wall = None
    if not metrics_file.exists():
        cmd = [
            sys.executable, "-m", "cbm.experiments.train", f"data={data}", f"model={model_for(arch, data)}",
            f"seed={seed}", "logger=csv_only", "trainer.enable_progress_bar=false", f"hydra.run.dir={run_dir}",
            f"cache_dir={out / 'cache'}", *extra,
        ]  # fmt: skip
        start = time.perf_counter()
        res = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "WANDB_MODE": "disabled"})
        wall = time.perf_counter() - start
        if res.returncode != 0:
            return {"arch": arch, "seed": seed, "error": (res.stderr.strip().splitlines() or ["?"])[-1]}
    metrics = json.loads(metrics_file.read_text())
    timing_file = run_dir / "timing.json"
    timing = json.loads(timing_file.read_text()) if timing_file.exists() else {}
    return {"arch": arch, "seed": seed, "wall_s": wall, "timing": timing, **metrics}


def dry_run(archs: list[str], seeds: list[int], data: str, out: Path, extra: list[str]) -> int:
    """``CBM_DRY_RUN=1``: every run's command line checked by ``cbm-train`` itself (one ``--multirun``
    precheck over the models and seeds; nothing trains). Under ``GPU_DRY_RUN=1`` (benchmarks/gpu_lib.sh)
    each run directory also gets an empty ``checkpoints/best.ckpt``, so the steps that read the runs
    (cbm-intervene, cbm-automate) check their own command lines in turn."""
    models = ",".join(dict.fromkeys(model_for(arch, data) for arch in archs))
    cmd = [
        sys.executable, "-m", "cbm.experiments.train", "--multirun", f"data={data}", f"model={models}",
        f"seed={','.join(map(str, seeds))}", "logger=csv_only", "trainer.enable_progress_bar=false",
        f"cache_dir={out / 'cache'}", *extra,
    ]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        print((res.stderr.strip().splitlines() or ["?"])[-1], file=sys.stderr)
        return res.returncode
    print(f"seed_sweep: dry run: the {len(archs) * len(seeds)} runs' command lines are valid ({data}, models {models}, seeds {seeds})")
    if os.environ.get("GPU_DRY_RUN") == "1":
        for arch in archs:
            for seed in seeds:
                ckpt = out / f"{data}-{arch}-s{seed}" / "checkpoints" / "best.ckpt"
                ckpt.parent.mkdir(parents=True, exist_ok=True)
                ckpt.touch()
    return 0


def oracle(r: dict[str, Any]) -> dict[int, float]:
    return {int(k): v for k, v in r.get("oracle_random", {}).items()}


def summarise(runs: list[dict[str, Any]], repeats: dict[str, dict[str, Any]], reference: dict | None) -> list[dict]:
    rows = []
    for arch in dict.fromkeys(r["arch"] for r in runs):
        mine = [r for r in runs if r["arch"] == arch and "error" not in r]
        errors = [r["error"] for r in runs if r["arch"] == arch and "error" in r]
        if not mine:
            rows.append({"arch": arch, "error": errors[0] if errors else "no run"})
            continue
        task = [r["test/task_acc"] for r in mine]
        row: dict[str, Any] = {
            "arch": arch,
            "seeds": [r["seed"] for r in mine],
            "task_acc": task,
            "task_mean": statistics.fmean(task),
            "task_se": statistics.stdev(task) / len(task) ** 0.5 if len(task) > 1 else None,
            "concept_mean": statistics.fmean([r["test/concept_acc"] for r in mine]) if "test/concept_acc" in mine[0] else None,
            "train_eval_s": statistics.fmean([sum(r["timing"].values()) for r in mine if r["timing"]] or [float("nan")]),
            "errors": errors,
        }
        ks = [oracle(r) for r in mine if oracle(r)]
        if ks:
            row["kmax_min"] = min(o[max(o)] for o in ks)
            row["max_drop"] = max(o[0] - min(o.values()) for o in ks)
        rep = repeats.get(arch)
        if rep is not None:
            first = next(r for r in mine if r["seed"] == rep["seed"])
            row["repeat_identical"] = "error" not in rep and all(
                first[k] == rep[k] for k in first if k.startswith("test/") or k == "oracle_random"
            )
        if reference and arch in reference:
            row["reference_mean"] = reference[arch]["task_mean"]
        rows.append(row)
    return rows


def checks(row: dict[str, Any], strict: bool) -> list[str]:
    """Failed acceptance checks of one row (empty: pass)."""
    if "error" in row:
        return [row["error"]]
    bad = [f"run failed: {e}" for e in row["errors"]]
    if strict and min(row["task_acc"]) < TASK_MIN:
        bad.append(f"task acc {100 * min(row['task_acc']):.2f} < {100 * TASK_MIN:.1f}")
    if strict and row.get("kmax_min", 1.0) < KMAX_MIN:
        bad.append(f"k=max {100 * row['kmax_min']:.2f} < {100 * KMAX_MIN:.0f}")
    if row.get("max_drop", 0.0) > MAX_DROP:
        bad.append(f"an intervention lowers accuracy by {100 * row['max_drop']:.2f} points")
    if row.get("repeat_identical") is False:
        bad.append("same-seed repeat differs")
    if "reference_mean" in row and abs(row["task_mean"] - row["reference_mean"]) > REFERENCE_TOL:
        bad.append(f"mean task acc {100 * row['task_mean']:.2f} vs reference {100 * row['reference_mean']:.2f}")
    return bad


def table(rows: list[dict[str, Any]], strict: bool) -> str:
    def pct(v: float | None) -> str:
        return "" if v is None or v != v else f"{100 * v:.2f}"  # None or NaN: no such metric

    head = "| arch | train+eval s | task acc per seed | mean ± SE | min | concept acc | oracle k=max (min) | worst drop | repeat identical | ref. mean | checks |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['arch']} | | | | | | | | | | FAIL: {r['error']} |")
            continue
        rep = r.get("repeat_identical")
        se = "" if r.get("task_se") is None else f" ± {100 * r['task_se']:.2f}"
        lines.append(
            f"| {r['arch']} | {r['train_eval_s']:.1f} | {' / '.join(pct(v) for v in r['task_acc'])} "
            f"| {pct(r['task_mean'])}{se} | {pct(min(r['task_acc']))} "
            f"| {pct(r['concept_mean'])} | {pct(r.get('kmax_min'))} | {pct(r.get('max_drop'))} "
            f"| {'' if rep is None else ('yes' if rep else 'NO')} | {pct(r.get('reference_mean'))} "
            f"| {'; '.join(checks(r, strict)) or 'pass'} |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--archs", default=",".join(ARCHS))
    p.add_argument("--seeds", default="0,1,2", help="e.g. 0,1,2 or 0-9")
    p.add_argument("--data", default="robot")
    p.add_argument("--jobs", type=int, default=1, help="runs at a time (GPU: several fit on one device)")
    p.add_argument("--out", default="sweeps/seeds")
    p.add_argument("--repeat", action="store_true", help="run the first seed twice and compare the metrics")
    p.add_argument("--reference", action="append", default=[],
                   help="JSON of another sweep (e.g. the CPU one) to compare mean task accuracy with (repeatable)")
    p.add_argument("--json", help="write the summary here")
    p.add_argument("overrides", nargs="*", help="extra cbm-train overrides (after --)")
    a = p.parse_args()
    archs, seeds = a.archs.split(","), parse_seeds(a.seeds)
    out = Path(a.out)
    if os.environ.get("CBM_DRY_RUN", "") not in ("", "0"):
        sys.exit(dry_run(archs, seeds, a.data, out, a.overrides))
    out.mkdir(parents=True, exist_ok=True)
    jobs = [(arch, s, "") for arch in archs for s in seeds] + ([(arch, seeds[0], "-repeat") for arch in archs] if a.repeat else [])
    train(jobs[0][0], jobs[0][1], a.data, out, a.overrides)  # fills the data cache before parallel jobs start
    with ThreadPoolExecutor(max(1, a.jobs)) as pool:
        results = list(pool.map(lambda j: train(j[0], j[1], a.data, out, a.overrides, j[2]), jobs))
    runs = [r for r, j in zip(results, jobs) if not j[2]]
    repeats = {j[0]: r for r, j in zip(results, jobs) if j[2]}
    reference = None
    for ref in a.reference:
        if Path(ref).exists():
            rows = json.loads(Path(ref).read_text())["rows"]
            reference = {**(reference or {}), **{r["arch"]: r for r in rows if "error" not in r}}
    rows = summarise(runs, repeats, reference)
    strict = a.data == "robot"
    print(f"\n{a.data}, seeds {a.seeds}, overrides {a.overrides or 'none'} (accuracies in %):\n")
    print(table(rows, strict))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps({"data": a.data, "overrides": a.overrides, "rows": rows}, indent=2) + "\n")
    sys.exit(1 if any(checks(r, strict) for r in rows) else 0)


if __name__ == "__main__":
    main()
