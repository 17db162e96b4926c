"""Data generation here vs ``concept-benchmark`` 0.4.1, side by side in one run, whole process.

Each measurement is a fresh Python process (imports and the first MIP solve count), with no data
cache on either side, single-threaded; the two sides alternate (ours, theirs, ours, ...) and the
median of ``--repeat`` runs is reported with the ratio:

1. robots without images, concept-benchmark 0.4's default (the balanced rule, its training-split
   shift, 3,800 training, 3,384 validation and 10,000 test rows: 17,184; its ``ds.val`` is an alias
   of ``ds.validation``, so the rows are counted over train, validation and test only):
   0.4.1's ``DatasetGenerator(render_images=False).generate_splits()`` vs ``load_data`` of the same
   splits with ``label_rule=balanced train_constraints=rule`` (``data=robot_v04``'s rule and shift;
   one render per row, no calibration split, as 0.4.1 has none);
2. labelled Sudoku boards without images at ``--boards`` (default 1,000, 10,000 and 100,000):
   0.4.1's ``DatasetGenerator(data_type="tabular", n_boards=N).generate()`` (its default
   corruption: 1..9 cell swaps, half the boards valid) vs ours with ``corruption=swaps`` and with
   our default ``walk``, the same N boards in one split.

The reference runs from an unpacked wheel (``pip download --no-deps concept-benchmark==0.4.1``,
unzip) with the few dependencies our environment lacks installed beside it
(``pip install --no-deps --target DIR scikit-learn joblib threadpoolctl pero colorir dill``);
pycairo has no wheel for this platform, so ``--stub-cairo`` puts a placeholder module on its path
(its no-image paths never draw; say so when you quote the numbers).

    python benchmarks/bench_vs_reference.py --ref /tmp/ref04 --ref-deps /tmp/refdeps --stub-cairo [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: 0.4.1's robot splits: training rows and validation rows (int(0.2 x 16,920) of its catalogue's rest).
REF_TRAIN, REF_VAL = 3800, 3384
#: Single-threaded children: the comparison is per core.
THREADS = {v: "1" for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")}

OURS = r"""
import json, sys, time
t0 = time.perf_counter()
from synthetic.registry import data_config, load_data
data = load_data(data_config(json.loads(sys.argv[1])), None)
print(json.dumps({"seconds": time.perf_counter() - t0, "rows": int(len(data.y))}))
"""

THEIRS = r"""
import json, sys, time
t0 = time.perf_counter()
kind, n = sys.argv[1], int(sys.argv[2])
if kind == "robot":
    from concept_benchmark.robots import DatasetGenerator
    ds = DatasetGenerator(seed=1014, render_images=False).generate_splits()
    rows = sum(len(getattr(ds, s).y) for s in ("train", "validation", "test"))  # ds.val is ds.validation
else:
    from concept_benchmark.sudoku import DatasetGenerator
    ds = DatasetGenerator(seed=171, data_type="tabular", n_boards=n).generate()
    rows = len(ds.y)
print(json.dumps({"seconds": time.perf_counter() - t0, "rows": int(rows)}))
"""

CAIRO_STUB = '''"""Placeholder for pycairo: the reference imports it at module level; no-image paths never draw."""


class _Any:
    def __getattr__(self, name):
        return _Any()

    def __call__(self, *args, **kwargs):
        return _Any()

    def __mro_entries__(self, bases):
        return (object,)


def __getattr__(name):
    return _Any()
'''


def run_child(code: str, args: list[str], pythonpath: str) -> dict:
    env = {**os.environ, **THREADS, "PYTHONPATH": pythonpath, "TQDM_DISABLE": "1", "HYDRA_FULL_ERROR": "1"}
    with tempfile.TemporaryDirectory() as cwd:  # no cache, no stray files
        res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=3600)
    if res.returncode != 0:
        raise SystemExit(f"bench_vs_reference: a child failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ref", required=True, help="directory holding the unpacked concept_benchmark 0.4.1 package")
    ap.add_argument("--ref-deps", default="", help="directory of its extra dependencies (pip install --target)")
    ap.add_argument("--stub-cairo", action="store_true", help="put a placeholder pycairo on the reference's path")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--boards", default="1000,10000,100000", help="board counts, comma separated")
    ap.add_argument("--skip-robots", action="store_true")
    args = ap.parse_args()
    ours_path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    stub = tempfile.mkdtemp(prefix="cairo-stub-")
    if args.stub_cairo:
        Path(stub, "cairo.py").write_text(CAIRO_STUB)
    ref_path = os.pathsep.join(p for p in (args.ref, args.ref_deps, stub if args.stub_cairo else "") if p)

    cases: list[tuple[str, list[tuple[str, dict]], list[str]]] = []
    if not args.skip_robots:
        # the same rows as 0.4.1's splits: 3,800 training rows, its validation share of the rest of
        # its catalogue (3,384) and 10,000 test rows; one render per row (no images to vary)
        robot = {"name": "robot", "label_rule": "balanced", "train_constraints": "rule", "modality": "tabular", "n_calib": 0,
                 "n_test": 10000, "renders_per_robot": 1,
                 "n_train": REF_TRAIN + REF_VAL, "val_fraction": REF_VAL / (REF_TRAIN + REF_VAL)}  # fmt: skip
        cases.append(("robots, balanced rule + split shift", [("ours", robot)], ["robot", "0"]))
    for n in (int(x) for x in args.boards.split(",") if x):  # --boards '': robots only
        base = {"name": "sudoku", "modality": "tabular", "n_train": n, "n_val": 0, "n_calib": 0, "n_test": 0}
        cases.append((f"labelled boards ({n:,})", [("ours swaps", {**base, "corruption": "swaps"}), ("ours walk", base)], ["sudoku", str(n)]))

    print("| data | reference 0.4.1 (s) | ours (s) | ratio | rows |")
    print("|---|---|---|---|---|")
    for title, ours_cfgs, ref_args in cases:
        times: dict[str, list[float]] = {name: [] for name, _ in ours_cfgs}
        ref_times, rows = [], {}
        for _ in range(args.repeat):  # interleaved: a slow spell of the machine hits both sides
            for name, cfg in ours_cfgs:
                r = run_child(OURS, [json.dumps(cfg)], ours_path)
                times[name].append(r["seconds"])
                rows[name] = r["rows"]
            r = run_child(THEIRS, ref_args, ref_path)
            ref_times.append(r["seconds"])
            rows["ref"] = r["rows"]
        ref = statistics.median(ref_times)
        for name, t in times.items():
            ours = statistics.median(t)
            spread = f"{min(t):.2f}-{max(t):.2f}"
            print(f"| {title}, {name} | {ref:.2f} ({min(ref_times):.2f}-{max(ref_times):.2f}) | {ours:.2f} ({spread}) | "
                  f"**{ref / ours:.1f}x** | {rows[name]:,} vs {rows['ref']:,} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
