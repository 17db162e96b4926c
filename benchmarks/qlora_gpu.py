"""QLoRA training throughput on a GPU: step time, tokens/s and peak memory of 4-bit NF4 QLoRA
(LoRA r=16 on every linear layer of the language model, gradient checkpointing, bf16 compute) on
the robot counterfactual set, for the tiny model and for a ~1B-parameter Qwen2-VL built from a
config (random init: the weights do not matter for throughput; no download).

    python benchmarks/qlora_gpu.py                              # GPU: tiny and 1b, 4-bit
    python benchmarks/qlora_gpu.py --sizes tiny --quant none    # CPU smoke run (plain LoRA)

The same code path as ``cbm-finetune finetune=qlora`` (``cbm.vlm.finetune``): ``load_model``,
``add_lora``, ``Collator``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from cbm.vlm.finetune.builders import robot_pairs
from cbm.vlm.finetune.collate import Collator
from cbm.vlm.finetune.model import LoraSettings, add_lora, load_model
from cbm.vlm.tiny import TinyVLMConfig, build_tiny_vlm
from synthetic.registry import data_config

#: Model sizes built from a config: the tiny test model and a ~1B-parameter one.
SIZES = {
    "tiny": TinyVLMConfig(image_px=112),
    "1b": TinyVLMConfig(hidden=2048, layers=16, heads=16, kv_heads=8, intermediate=5632, vision_width=1024, vision_layers=8,
                      vision_heads=16, image_px=224),
}


def bench(size: str, quant: str, steps: int, warmup: int, batch_size: int, root: Path) -> dict:
    from transformers import AutoProcessor

    model_dir = build_tiny_vlm(root / size, SIZES[size])
    rows = robot_pairs(data_config({"name": "robot", "image_size": 64, "n_train": 10, "n_calib": 0, "n_test": batch_size}),
                       root / "pairs", batch_size, parts=("knees",), cache_dir=str(root / "cache"))  # fmt: skip
    col = Collator(AutoProcessor.from_pretrained(model_dir, local_files_only=True))
    model = load_model(model_dir, quant=quant, attn_implementation="sdpa")
    n_params = sum(p.numel() for p in model.parameters())
    n_4bit = sum(1 for m in model.modules() if type(m).__name__ == "Linear4bit")
    model = add_lora(model, LoraSettings(r=16, alpha=32), gradient_checkpointing=True, quantized=quant != "none")
    device = next(model.parameters()).device
    batch = {k: v.to(device) for k, v in col(rows[:batch_size]).items()}
    tokens = int(batch["attention_mask"].sum())
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-4)
    cuda = device.type == "cuda"
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else torch.autocast("cpu", enabled=False)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    model.train()
    times, losses = [], []
    for i in range(warmup + steps):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with autocast:
            loss = model(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
        losses.append(float(loss.detach()))
    med = statistics.median(times)
    return {
        "size": size, "params": n_params, "linear4bit": n_4bit, "quant": quant, "device": str(device), "batch": batch_size,
        "tokens_per_step": tokens, "step_ms": 1000 * med, "step_ms_spread": 1000 * (max(times) - min(times)),
        "tokens_per_s": tokens / med, "peak_mib": torch.cuda.max_memory_allocated() / 2**20 if cuda else float("nan"),
        "loss_first": losses[0], "loss_last": losses[-1],
    }  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="tiny,1b")
    ap.add_argument("--quant", default="4bit", choices=("4bit", "8bit", "none"))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=4)
    args = ap.parse_args()
    if args.quant != "none" and not torch.cuda.is_available():
        print(f"qlora_gpu: --quant {args.quant} needs a CUDA GPU (none here); --quant none runs plain LoRA on the CPU", file=sys.stderr)
        return 2
    print(f"torch {torch.__version__}, {'cuda ' + torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu'}")
    print("| model | params | 4-bit layers | quant | batch | tokens/step | step ms (median, spread) | tokens/s | peak MiB | loss first -> last |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        for size in args.sizes.split(","):
            r = bench(size, args.quant, args.steps, args.warmup, args.batch_size, Path(d))
            print(f"| {r['size']} | {r['params'] / 1e6:.1f}M | {r['linear4bit']} | {r['quant']} | {r['batch']} | {r['tokens_per_step']} | "
                  f"{r['step_ms']:.1f} ({r['step_ms_spread']:.1f}) | {r['tokens_per_s']:.0f} | {r['peak_mib']:.0f} | "
                  f"{r['loss_first']:.3f} -> {r['loss_last']:.3f} |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
