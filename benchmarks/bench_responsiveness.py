"""Throughput of exact responsiveness for every architecture: all subsets of size <= 3 of the m = 27
Sudoku checks (3,303 subsets, 24,858 (subset, assignment) pairs per example), two classes.

For each architecture the engine's paths run in the same process on the same model and examples:

* ``fast``    - the additive path (the model's ``additive_logits`` hook: CBM and CEM linear heads);
* ``pairs``   - the model's ``pair_logits`` hook (``fast_path=off``): CBM / CEM first-layer moves,
                ProbCBM's expansion of the class-prototype distances, ECBM with ``pair_inference=fast``;
* ``loop``    - the plain per-subset Python loop through ``intervene`` + ``predict`` (each subset's
                assignments batched): the reference every path is checked against. For ProbCBM and
                ECBM the loop runs on the first ``--loop-subsets`` subsets and its rate is scaled to all.

Prints a markdown table: examples/s, ratios against the loop and against the benchmark's reference
code (KFlip) measured on this machine (its fast path 727-786 and generic path 192-202 examples/s side
by side with this project in one run; an earlier run measured 1,429 and 366). Agreement with the loop:
the largest |difference| of resp over the shared examples, in float32 (where the paths sum in different
orders, a pair whose logits tie to float32 rounding can flip: ties are counted, not hidden).

    python benchmarks/bench_responsiveness.py [--threads 1] [--archs cbm,cem,probcbm,ecbm]
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from cbm.interventions.responsiveness import (
    n_candidate_pairs,
    responsiveness_loop,
    subset_responsiveness,
    subset_table,
)
from cbm.models import build_model

#: KFlip (ustunb/concept-benchmark) on this machine: side-by-side run (range), earlier run.
KFLIP = {"fast": (727.0, 786.0), "generic": (192.0, 202.0)}
#: Examples timed per path (the slower paths get fewer).
BATCH = {"fast": 256, "pairs": {"cbm": 128, "cem": 64, "probcbm": 16, "ecbm": 32}, "loop": 2}


def sudoku_like(arch: str, n: int, m: int = 27, seed: int = 0):
    """A model of ``arch`` over ``m`` checks and ``n`` examples, its head scaled so that interventions
    flip predictions (a trivial benchmark would hide nothing: the work per pair is the same)."""
    names = [f"{kind}{i}" for kind in ("row", "col", "box") for i in range(1, 10)][:m]
    info = {"dataset": "sudoku", "modality": "tabular", "in_shape": [16], "concept_names": names, "class_names": ["invalid", "valid"]}
    torch.manual_seed(seed)
    model = build_model({"name": arch, "backbone": {"name": "mlp", "hidden": [32], "out_dim": 32}}, info).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.startswith("backbone"):
                p.mul_(3.0)
        state = model.encode(torch.randn(n, 16, generator=torch.Generator().manual_seed(seed)))
    return model, state


def best_time(fn, repeats: int) -> float:
    """Best process-CPU seconds of ``repeats`` calls after a warm-up (one thread: CPU time is the
    time on an idle core even when other jobs share the machine)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        c0 = time.process_time()
        fn()
        best = min(best, time.process_time() - c0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--archs", default="cbm,cem,probcbm,ecbm")
    ap.add_argument("--m", type=int, default=27)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--loop-subsets", type=int, default=300, help="subsets the ProbCBM/ECBM loop runs on")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    table = subset_table(args.m, args.k)
    subsets = table.subsets()
    print(f"### Exact responsiveness, all subsets |S| <= {args.k} of m = {args.m} concepts "
          f"({table.n_subsets:,} subsets, {n_candidate_pairs(args.m, args.k):,} pairs per example), 2 classes\n")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); best of {args.repeats} runs, CPU time; "
          f"1-min load average {load:.1f}\n")
    print("| architecture | path | examples/s | vs loop | vs KFlip fast (727-786) | vs KFlip generic (192-202) | max abs diff vs loop |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for arch in args.archs.split(","):
        bench_arch(arch, table, subsets, args.loop_subsets, args.repeats)


def bench_arch(arch: str, table, subsets: list, loop_subsets: int, repeats: int) -> None:
    """One architecture's rows of the table."""
    n_pairs_batch = BATCH["pairs"][arch]
    model, state = sudoku_like(arch, max(BATCH["fast"], n_pairs_batch))
    few = state.index(slice(0, BATCH["loop"]))
    with torch.no_grad():
        part = subsets if arch in ("cbm", "cem") else subsets[:loop_subsets]
        t_loop = best_time(lambda: responsiveness_loop(model, few, part), 1) * len(subsets) / len(part)
        loop = responsiveness_loop(model, few, part)
        rows = []
        if model.additive_logits(state) is not None:
            fast_state = state.index(slice(0, BATCH["fast"]))
            rows.append(("fast", BATCH["fast"], best_time(lambda: subset_responsiveness(model, fast_state, table), repeats)))
        pair_state = state.index(slice(0, n_pairs_batch))
        rows.append(("pairs", n_pairs_batch, best_time(lambda: subset_responsiveness(model, pair_state, table, fast_path="off"), repeats)))
        loop_rate = BATCH["loop"] / t_loop
        for path, batch, seconds in rows:
            rate = batch / seconds
            mine = subset_responsiveness(model, few, table, fast_path="auto" if path == "fast" else "off")[:, : len(part)]
            diff = float((mine - loop).abs().max())
            kf, kg = KFLIP["fast"], KFLIP["generic"]
            print(f"| {arch} | {path} | {rate:,.0f} | {rate / loop_rate:,.0f}x | {rate / kf[1]:.1f}-{rate / kf[0]:.1f}x "
                  f"| {rate / kg[1]:.1f}-{rate / kg[0]:.1f}x | {diff:.1e} |", flush=True)
        print(f"| {arch} | loop | {loop_rate:,.3g} | 1x | | | |", flush=True)

if __name__ == "__main__":
    main()
