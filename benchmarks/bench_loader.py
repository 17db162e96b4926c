"""Does reading batches from disk starve the model? Read-ahead threads vs reading in the loop.

A dataset is generated with ``storage="disk"`` (or ``render``) and read through the
DataModule for a number of shuffled training batches, with a simulated training step of
``--step-ms`` per batch that leaves the CPU free (``time.sleep``: what a step queued on a GPU
costs the host). For each ``prefetch`` setting it prints the time per batch and the share of
it the model waited on data (``1 - step / per-batch time``): with the reads in the loop the
two add up, with read-ahead threads they overlap. Each setting reads its own epoch (another
permutation), so the page cache a setting filled helps the next one only by chance; at
200,000 boards of 50 px (38 GB) most reads come from the disk on a 24 GB machine.

    python benchmarks/bench_loader.py --dataset sudoku --n 200000 --batches 40 --step-ms 100
    python benchmarks/bench_loader.py --dataset robot --n 1000000 --batches 400 --step-ms 5
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from synthetic.datamodule import SyntheticDataModule
from synthetic.registry import data_config, load_data

CONFIGS = {
    "robot": lambda n: {"name": "robot", "image_size": 32, "n_train": n, "n_calib": 0, "n_test": 0, "val_fraction": 0.0},
    "sudoku": lambda n: {"name": "sudoku", "cell_size": 50, "style": "printed", "n_train": n, "n_val": 0, "n_calib": 0, "n_test": 0},
}


def epoch_time(dm: SyntheticDataModule, epoch: int, batches: int, step_s: float) -> float:
    """Seconds for the first ``batches`` batches of ``epoch``, sleeping ``step_s`` after each."""
    loader = dm.loader("train", shuffle=True)
    loader.sampler.set_epoch(epoch)
    it = iter(loader)
    t0 = time.perf_counter()
    for _ in range(batches):
        next(it)
        if step_s:
            time.sleep(step_s)
    dt = time.perf_counter() - t0
    it.close()
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", choices=sorted(CONFIGS), default="robot")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--storage", choices=("disk", "render"), default="disk")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--step-ms", type=float, default=5.0, help="simulated training step per batch (CPU left free)")
    ap.add_argument("--prefetch", default="0,1,2,4")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as cache:
        t0 = time.perf_counter()
        data = load_data(data_config(CONFIGS[args.dataset](args.n)), cache, args.storage)
        print(f"{args.dataset}: {args.n:,} samples, storage={args.storage}, generated in {time.perf_counter() - t0:.1f} s; "
              f"batch {args.batch_size}, {args.batches} batches per setting, simulated step {args.step_ms:g} ms\n")  # fmt: skip
        print("| prefetch (threads) | read only: ms/batch | with the step: ms/batch | waited on data |")
        print("|---|---|---|---|")
        epoch = 0
        for p in (int(s) for s in args.prefetch.split(",")):
            dm = SyntheticDataModule(lambda: data, batch_size=args.batch_size, prefetch=p)
            read = epoch_time(dm, epoch, args.batches, 0.0) / args.batches
            with_step = epoch_time(dm, epoch + 1, args.batches, args.step_ms / 1e3) / args.batches
            epoch += 2
            waited = max(0.0, 1.0 - args.step_ms / 1e3 / with_step)
            print(f"| {p} | {read * 1e3:.1f} | {with_step * 1e3:.1f} | {waited:.0%} |", flush=True)
            dm.teardown()


if __name__ == "__main__":
    main()
