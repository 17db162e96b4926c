"""``cbm-data export format=hf|parquet`` at scale: rows/s and peak memory.

Each format runs ``cbm-data export`` in a fresh process (empty cache: the labels are sampled, every
image rendered, PNG-encoded and written) and reports rows/s of the whole command and the process's
peak RSS (``ru_maxrss``). Exits non-zero when a run fails or its peak RSS is over ``--max-rss-gb``
(the export writes in chunks, so its memory must not grow with the dataset).

    OMP_NUM_THREADS=1 python benchmarks/bench_export.py --rows 100000
    python benchmarks/bench_export.py --rows 20000 --formats parquet --data sudoku
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, resource, sys, time
t = time.perf_counter()
from cbm.experiments.data_cli import run
run(json.loads(sys.argv[1]))
print(json.dumps({"seconds": time.perf_counter() - t, "rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}))
"""

#: ``data=`` overrides giving ``n`` rows, all in the train split.
DATA = {
    "robot": lambda n: ["data=robot", f"data.n_train={n}", "data.val_fraction=0", "data.n_calib=0", "data.n_test=0"],
    "sudoku": lambda n: ["data=sudoku", f"data.n_train={n}", "data.n_val=0", "data.n_calib=0", "data.n_test=0"],
}


def size_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--data", default="robot", choices=sorted(DATA))
    ap.add_argument("--formats", default="hf,parquet")
    ap.add_argument("--max-rss-gb", type=float, default=2.0)
    args = ap.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    print(f"| {args.data} rows | format | seconds | rows/s | peak RSS GB | output MB |")
    print("|---|---|---|---|---|---|")
    ok = True
    for fmt in args.formats.split(","):
        with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as d:
            cli = ["export", *DATA[args.data](args.rows), f"format={fmt}", f"out={d}/out", f"cache_dir={d}/cache"]
            res = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cli)], capture_output=True, text=True, env=env)
            if res.returncode != 0:
                print(f"| {args.rows:,} | {fmt} | failed: {(res.stderr.strip().splitlines() or [res.returncode])[-1]} |")
                ok = False
                continue
            r = json.loads(res.stdout.strip().splitlines()[-1])
            print(f"| {args.rows:,} | {fmt} | {r['seconds']:.1f} | {args.rows / r['seconds']:,.0f} | {r['rss_gb']:.2f} | "
                  f"{size_mb(Path(d) / 'out'):.0f} |", flush=True)  # fmt: skip
            ok &= r["rss_gb"] <= args.max_rss_gb
    if not ok:
        print(f"FAIL: a run failed or peaked over {args.max_rss_gb} GB", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
