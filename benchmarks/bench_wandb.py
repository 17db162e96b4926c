"""What offline W&B logging costs a training run: a fixed start, no slower epochs.

Runs the same ``cbm-train`` (30,000 tabular robots, CBM, a few epochs of about 2 s, one torch
thread: epochs long enough for the 0.1 s the progress lines print to resolve a 10% change) with
``logger=csv_only`` and with ``logger=default`` (CSV + offline W&B with the whole config, per-step
loss and learning rates, the oracle table), alternating, and compares wall times and the per-epoch
times the runs print. Targets: the W&B run's extra wall time (its fixed start and finish) <= 3 s;
median epoch time within 10% of the CSV run's.

    python benchmarks/bench_wandb.py [--epochs 6] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ARGS = ["data.modality=tabular", "data.n_train=30000", "data.n_calib=0", "data.n_test=2000", "trainer.enable_progress_bar=false"]
START_TARGET_S, EPOCH_RATIO_TARGET = 3.0, 1.10
EPOCH = re.compile(r"epoch \d+/\d+: .*\(([\d.]+) s\)")


def one_run(logger: str, epochs: int, tmp: Path, i: int) -> tuple[float, list[float]]:
    run_dir = tmp / f"{logger}-{i}"
    cmd = [str(Path(sys.executable).parent / "cbm-train"), *ARGS, f"trainer.max_epochs={epochs}", f"logger={logger}",
           f"hydra.run.dir={run_dir}", f"cache_dir={tmp / 'cache'}"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"{logger} run failed: {res.stderr[-1500:]}")
    return wall, [float(m.group(1)) for m in EPOCH.finditer(res.stdout + res.stderr)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    walls: dict[str, list[float]] = {"csv_only": [], "default": []}
    epochs: dict[str, list[float]] = {"csv_only": [], "default": []}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        one_run("csv_only", 1, tmp, -1)  # the data cache and the OS file cache, for both
        for i in range(a.repeats):
            for logger in ("csv_only", "default"):
                wall, ep = one_run(logger, a.epochs, tmp, i)
                walls[logger].append(wall)
                epochs[logger] += ep[1:]  # the first epoch pays one-off warm-up
    extra = statistics.median(walls["default"]) - statistics.median(walls["csv_only"])
    ratio = statistics.median(epochs["default"]) / statistics.median(epochs["csv_only"])
    print(f"wall per run (median of {a.repeats}): csv_only {statistics.median(walls['csv_only']):.1f} s, "
          f"W&B {statistics.median(walls['default']):.1f} s -> W&B costs {extra:+.1f} s per run (target <= {START_TARGET_S:.0f} s)")  # fmt: skip
    print(f"median epoch: csv_only {statistics.median(epochs['csv_only']):.2f} s, W&B {statistics.median(epochs['default']):.2f} s "
          f"-> ratio {ratio:.3f} (target <= {EPOCH_RATIO_TARGET:.2f})")  # fmt: skip
    if extra > START_TARGET_S or ratio > EPOCH_RATIO_TARGET:
        raise SystemExit("W&B overhead above target")


if __name__ == "__main__":
    main()
