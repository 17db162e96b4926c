"""Data generation at scale: rate and peak memory from 1,000 to 1,000,000 samples.

Each size runs in a fresh process (empty caches) and generates the dataset with
``storage="disk"`` (images rendered in chunks into a memory-mapped file in a temporary cache
directory) or ``storage="memory"``; it reports samples/s and the process's peak RSS
(``ru_maxrss``; memory-mapped pages the process wrote count while mapped). With ``--reload``,
another fresh process then loads the same dataset again from the cache directory (labels,
concepts and attributes read from ``*-labels-<key>.npz``, images from the finished file).

    python benchmarks/bench_data_scale.py robot --sizes 1000,10000,100000,1000000
    python benchmarks/bench_data_scale.py sudoku --sizes 1000,10000,50000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, resource, sys, time
cfg, cache, storage = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
from synthetic.registry import data_config, load_data
c = data_config(cfg)
t = time.perf_counter()
data = load_data(c, cache, storage)
dt = time.perf_counter() - t
rss_gen = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
read_s = None
if sys.argv[4] == "1":  # one epoch of shuffled training batches, as a model would read them
    from synthetic.datamodule import SyntheticDataModule
    dm = SyntheticDataModule(lambda: data, batch_size=256)
    t = time.perf_counter()
    for batch in dm.loader("train", shuffle=True):
        pass
    read_s = time.perf_counter() - t
print(json.dumps({"seconds": dt, "rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, "rss_gen_gb": rss_gen,
                  "x_gb": data.x.nbytes / 2**30, "n": len(data.y), "read_s": read_s}))
"""

CONFIGS = {
    "robot": lambda n: {"name": "robot", "image_size": 32, "n_train": n, "n_calib": 0, "n_test": 0, "val_fraction": 0.0},
    "sudoku": lambda n: {"name": "sudoku", "cell_size": 50, "style": "printed", "n_train": n, "n_val": 0, "n_calib": 0, "n_test": 0},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", nargs="?", default="robot", choices=sorted(CONFIGS))
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--storage", default="disk", choices=("disk", "memory", "render"))
    ap.add_argument("--read", action="store_true", help="also read one shuffled training epoch (batch 256) through the DataModule")
    ap.add_argument("--reload", action="store_true", help="then load it again in a new process (from the cache)")
    args = ap.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    print(f"| {args.dataset} samples | storage | seconds | samples/s | peak RSS GB (generation / with the epoch) | images GB | epoch read samples/s | load again s |")
    print("|---|---|---|---|---|---|---|---|")
    for n in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as d:
            out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(CONFIGS[args.dataset](n)), d, args.storage, str(int(args.read))],
                                 capture_output=True, text=True, env=env)  # fmt: skip
            if out.returncode != 0:
                print(f"| {n:,} | {args.storage} | failed: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode} |")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            read = f"{r['n'] / r['read_s']:,.0f}" if r["read_s"] else ""
            again = ""
            if args.reload:
                out2 = subprocess.run([sys.executable, "-c", CHILD, json.dumps(CONFIGS[args.dataset](n)), d, args.storage, "0"],
                                      capture_output=True, text=True, env=env, check=True)  # fmt: skip
                again = f"{json.loads(out2.stdout.strip().splitlines()[-1])['seconds']:.2f}"
            print(f"| {r['n']:,} | {args.storage} | {r['seconds']:.1f} | {r['n'] / r['seconds']:,.0f} | {r['rss_gen_gb']:.2f} / {r['rss_gb']:.2f} | "
                  f"{r['x_gb']:.2f} | {read} | {again} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
