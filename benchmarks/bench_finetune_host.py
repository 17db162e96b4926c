"""Host work per fine-tuning step, before and after issue 45, on equal work: the same rows, model,
seed and number of optimiser steps through ``cbm.vlm.finetune.run.train`` (the loop ``cbm-finetune``
runs), on the CPU with the tiny VLM.

    python benchmarks/bench_finetune_host.py                 # tiny model, 32 rows, 3 epochs, batch 4
    python benchmarks/bench_finetune_host.py --size deep      # the 1b's depth at tiny widths (host-bound)

before: every batch collated from the rows each step (image opened, processed, tokenised again each
epoch) and gradient checkpointing on (the old default); after: each row encoded once (the collator's
cache, filled by the pass that checks every row is encodable) and checkpointing off (the new default,
on when asked). Both time the encoding pass and the training. Also printed: the aten ops of one
training step (each a kernel launch on a GPU, where the host's time per op is what a small model's
step waits on). The loss curves must agree (the same batches, the same numbers up to round-off).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from qlora_gpu import SIZES, count_ops  # noqa: E402

from cbm.vlm.finetune.builders import robot_pairs  # noqa: E402
from cbm.vlm.finetune.collate import Collator  # noqa: E402
from cbm.vlm.finetune.config import FinetuneConfig  # noqa: E402
from cbm.vlm.finetune.model import LoraSettings, add_lora, load_model, load_processor  # noqa: E402
from cbm.vlm.finetune.run import ENCODE_CACHE_BYTES, encodable, train  # noqa: E402
from cbm.vlm.tiny import build_tiny_vlm  # noqa: E402
from synthetic.registry import data_config  # noqa: E402

VARIANTS = {"before": {"cache_bytes": 0, "checkpointing": True}, "after": {"cache_bytes": ENCODE_CACHE_BYTES, "checkpointing": False}}


def run(variant: str, model_dir: Path, rows: list, args: argparse.Namespace) -> dict:
    v = VARIANTS[variant]
    cfg = FinetuneConfig(output_dir=str(model_dir.parent / variant), model={"path": str(model_dir)},
                         train={"epochs": args.epochs, "batch_size": args.batch_size, "gradient_checkpointing": v["checkpointing"]})  # fmt: skip
    torch.manual_seed(0)
    collator = Collator(load_processor(model_dir), cache_bytes=v["cache_bytes"])
    model = add_lora(load_model(model_dir, attn_implementation="sdpa"), LoraSettings(r=16, alpha=32), v["checkpointing"])
    t0, c0 = time.perf_counter(), time.process_time()
    good, _ = encodable(collator, rows, [], "skip")
    t_encode = time.perf_counter() - t0
    t0 = time.perf_counter()
    losses = train(model, collator, good, cfg, [], progress=False)
    t_train, cpu = time.perf_counter() - t0, time.process_time() - c0
    batch = Collator(load_processor(model_dir))(good[: args.batch_size])
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.0)

    def step() -> None:
        model(**batch).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return {"variant": variant, "steps": len(losses), "encode_s": t_encode, "train_s": t_train, "ms_per_step": 1000 * (t_encode + t_train) / len(losses),
            "cpu_ms_per_step": 1000 * cpu / len(losses), "ops_per_step": count_ops(step), "losses": losses}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="tiny", choices=["tiny", "deep"])
    ap.add_argument("--rows", type=int, default=32, help="training rows (robot counterfactual pairs, knees)")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=2, help="runs of each variant, alternating (the median is printed)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        model_dir = build_tiny_vlm(root / args.size, SIZES[args.size])
        n = max(1, args.rows // 2)
        rows = robot_pairs(data_config({"name": "robot", "image_size": 64, "n_train": 10, "n_calib": 0, "n_test": n}), root / "pairs", n,
                           parts=("knees",), cache_dir=str(root / "cache"))  # fmt: skip
        results: dict[str, list[dict]] = {k: [] for k in VARIANTS}
        for _ in range(args.repeats):
            for variant in VARIANTS:
                results[variant].append(run(variant, model_dir, rows, args))
    print(f"{args.size} model, {len(rows)} rows, {args.epochs} epochs, batch {args.batch_size}, {args.threads} thread(s), "
          f"torch {torch.__version__}; median of {args.repeats} runs each")  # fmt: skip
    print("| variant | steps | encode pass s | training s | ms per step (both) | CPU ms per step | aten ops per step | loss first -> last |")
    print("|---|---|---|---|---|---|---|---|")
    med = {}
    for variant, runs in results.items():
        m = {k: statistics.median(r[k] for r in runs) for k in ("encode_s", "train_s", "ms_per_step", "cpu_ms_per_step", "ops_per_step")}
        med[variant] = m
        loss = runs[0]["losses"]
        print(f"| {variant} | {runs[0]['steps']} | {m['encode_s']:.2f} | {m['train_s']:.2f} | {m['ms_per_step']:.1f} | {m['cpu_ms_per_step']:.1f} | {m['ops_per_step']:.0f} "
              f"| {loss[0]:.4f} -> {loss[-1]:.4f} |")  # fmt: skip
    b, a = med["before"], med["after"]
    gap = max(abs(x - y) for x, y in zip(results["before"][0]["losses"], results["after"][0]["losses"]))
    print(f"\nafter / before: {a['ms_per_step'] / b['ms_per_step']:.2f} of the time per step ({a['cpu_ms_per_step'] / b['cpu_ms_per_step']:.2f} of the CPU time), "
          f"{a['ops_per_step'] / b['ops_per_step']:.2f} of "
          f"the ops; largest loss difference over the steps {gap:.2e}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
