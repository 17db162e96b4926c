"""What a *new process* pays for Sudoku data before and after the shared building blocks are on disk.

Each measurement runs in a fresh Python process (empty in-memory caches), single-threaded:

1. the 18 px handwritten preset (1,024 glyph variants per digit) at 1,000 boards per split:
   the first config ever (draws the glyph bank, solves the MIP seed grids) vs another config
   whose banks and grids are already cached (only its own boards are made and rendered);
2. labelled boards alone (no rendering) at 1,000 boards: with and without the seed grids on disk.

    python benchmarks/bench_sudoku_first_call.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from synthetic.cache import aux_cache
from synthetic.sudoku import dataset
from synthetic.sudoku.config import SudokuConfig
from synthetic.registry import data_config
cfg, cache, mode = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
t1 = time.perf_counter()
if mode == "load":
    dataset.load(data_config(cfg), cache)
else:
    with aux_cache(cache):
        dataset.labelled_boards(data_config(cfg))
print(json.dumps({"seconds": time.perf_counter() - t1, "import_s": t1 - t0}))
"""


def child(cfg: dict, cache: str, mode: str) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cfg), cache, mode], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    preset = {"name": "sudoku", "cell_size": 18, "style": "handwritten", "glyph_variants": 1024, "n_train": 1000, "n_val": 0, "n_calib": 0, "n_test": 0}
    rows = []
    for label, base, mode in (("18 px preset, 1,000 boards, load", preset, "load"),
                              ("labelled boards only, 1,000", {**preset, "glyph_variants": 48}, "boards")):  # fmt: skip
        cold, warm = [], []
        for r in range(args.repeat):
            with tempfile.TemporaryDirectory() as d:
                cold.append(child({**base, "seed": r}, d, mode))  # nothing on disk
                warm.append(child({**base, "seed": r, "n_train": 999}, d, mode))  # another config: banks and grids on disk
        rows.append((label, cold, warm))
    print("| what (new process, 1 thread) | nothing cached: median (min-max) s | banks + grids cached: median (min-max) s | saved |")
    print("|---|---|---|---|")
    for label, cold, warm in rows:
        mc, mw = statistics.median(cold), statistics.median(warm)
        print(f"| {label} | {mc:.2f} ({min(cold):.2f}-{max(cold):.2f}) | {mw:.2f} ({min(warm):.2f}-{max(warm):.2f}) | {mc - mw:.2f} s |")


if __name__ == "__main__":
    main()
