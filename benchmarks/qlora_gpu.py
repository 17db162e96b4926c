"""LoRA / QLoRA training throughput: tokens/s, step time and peak memory of the fine-tuning step
(LoRA r=16 on every linear layer of the language model, bf16 compute on CUDA) on the robot
counterfactual set, for models built from a config (random init: the weights do not matter for
throughput; no download), 4-bit NF4 and bf16 LoRA side by side.

    python benchmarks/qlora_gpu.py                                        # GPU: tiny and 1b, 4-bit and bf16, batch 4 and 32
    python benchmarks/qlora_gpu.py --sizes tiny,deep --quant none --batch-size 4   # CPU: plain LoRA
    python benchmarks/qlora_gpu.py --checkpointing off,on --json out.json

Sizes: ``tiny`` (the test model, 112 px), ``1b`` (Qwen2-VL-shaped, 16 layers of 2048, an 8-layer
1024-wide vision tower at 224 px: 849 M parameters; bitsandbytes' packed 4-bit weights count half,
425 M, which is the figure earlier notes gave), and ``deep`` (the 1b's depth and heads, the tiny's
widths): its step is nearly all per-op host work (Python, dispatch, kernel launches), the fixed
cost a GPU waits on at the 1b's depth, measurable on a CPU.

Per row: true parameters, 4-bit layers, tokens per step (attention mask), the step's median time
and spread, tokens/s, peak CUDA memory, aten ops per step (counted in one untimed step: forward,
backward, optimiser), the host share (time until the step's last op is queued / the step's time:
near 1 means the GPU waits on the host), the per-batch collation time a loop that collates every
step pays (``cbm-finetune`` before issue 45), and the loss first -> last. The same code path as
``cbm-finetune`` (``cbm.vlm.finetune``): ``load_model``, ``add_lora``, ``Collator``.
``CBM_DRY_RUN=1``: the arguments are checked and the plan printed; nothing is built.
"""

from __future__ import annotations

import argparse
import json
import os
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

#: Models built from a config (module docstring).
SIZES = {
    "tiny": TinyVLMConfig(image_px=112),
    "1b": TinyVLMConfig(hidden=2048, layers=16, heads=16, kv_heads=8, intermediate=5632, vision_width=1024, vision_layers=8,
                        vision_heads=16, image_px=224),
    "deep": TinyVLMConfig(hidden=64, layers=16, heads=4, kv_heads=2, intermediate=128, vision_width=64, vision_layers=8,
                          vision_heads=4, image_px=224),
}  # fmt: skip
QUANTS = ("4bit", "8bit", "none")


def count_ops(step) -> int:  # noqa: ANN001 - a zero-argument callable
    """aten ops dispatched by ``step()`` (forward, backward and optimiser; each is a kernel launch on a GPU)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            Count.n += 1
            return func(*args, **(kwargs or {}))

    with Count():
        step()
    return Count.n


def training_step(model: torch.nn.Module, batch: dict, opt: torch.optim.Optimizer, autocast):  # noqa: ANN001, ANN201
    """One optimiser step on ``batch`` (the loss stays on the device: no host sync)."""

    def step() -> torch.Tensor:
        with autocast:
            loss = model(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def true_params(model: torch.nn.Module) -> int:
    """Parameters, bitsandbytes' packed 4-bit weights (two values a byte) counted as the values they hold."""
    return sum(p.numel() * (2 if type(p).__name__ == "Params4bit" else 1) for p in model.parameters())


def bench(size: str, quant: str, checkpointing: bool, batch_sizes: list[int], args: argparse.Namespace, root: Path) -> list[dict]:
    """One model (``size``, ``quant``, gradient checkpointing) at each batch size."""
    from transformers import AutoProcessor

    model_dir = root / size
    if not (model_dir / "config.json").exists():
        build_tiny_vlm(model_dir, SIZES[size])
    n = max(batch_sizes)
    rows = robot_pairs(data_config({"name": "robot", "image_size": 64, "n_train": 10, "n_calib": 0, "n_test": n}),
                       root / "pairs", n, parts=("knees",), cache_dir=str(root / "cache"))  # fmt: skip
    processor = AutoProcessor.from_pretrained(model_dir, local_files_only=True)
    model = load_model(model_dir, quant=quant, attn_implementation="sdpa")
    n_params, n_4bit = true_params(model), sum(1 for m in model.modules() if type(m).__name__ == "Linear4bit")
    model = add_lora(model, LoraSettings(r=16, alpha=32, dropout=args.lora_dropout), gradient_checkpointing=checkpointing,
                     quantized=quant != "none")  # fmt: skip
    device = next(model.parameters()).device
    cuda = device.type == "cuda"
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else torch.autocast("cpu", enabled=False)
    model.train()
    out = []
    for bs in batch_sizes:
        per_step = Collator(processor, pad_to_multiple_of=args.pad_to)  # no cache: what a per-step collation costs
        collate = []
        for _ in range(3):
            t0 = time.perf_counter()
            per_step(rows[:bs])
            collate.append(time.perf_counter() - t0)
        batch = {k: v.to(device) for k, v in Collator(processor, pad_to_multiple_of=args.pad_to)(rows[:bs]).items()}
        tokens = int(batch["attention_mask"].sum())
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-4)

        step = training_step(model, batch, opt, autocast)
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        times, queued, losses = [], [], []
        for i in range(args.warmup + args.steps):
            t0 = time.perf_counter()
            losses.append(step())
            t1 = time.perf_counter()
            if cuda:
                torch.cuda.synchronize()
            if i >= args.warmup:
                times.append(time.perf_counter() - t0)
                queued.append(t1 - t0)
        ops = count_ops(step)
        med = statistics.median(times)
        loss = torch.stack(losses).float().tolist()  # one host sync for the whole run
        out.append({
            "size": size, "params": n_params, "linear4bit": n_4bit, "quant": quant, "checkpointing": checkpointing,
            "device": str(device), "batch": bs, "tokens_per_step": tokens, "padded_length": int(batch["input_ids"].shape[1]),
            "step_ms": 1000 * med, "step_ms_spread": 1000 * (max(times) - min(times)), "tokens_per_s": tokens / med,
            "peak_mib": torch.cuda.max_memory_allocated() / 2**20 if cuda else None, "ops_per_step": ops,
            "host_share": statistics.median(queued) / med, "collate_ms": 1000 * statistics.median(collate),
            "loss_first": loss[0], "loss_last": loss[-1],
        })  # fmt: skip
        print(row_text(out[-1]), flush=True)
    return out


HEADER = ("| model | params | 4-bit layers | quant | ckpt | batch | tokens/step | step ms (median, spread) | tokens/s | peak MiB "
          "| aten ops/step | host share | collate ms/batch | loss first -> last |")  # fmt: skip


def row_text(r: dict) -> str:
    peak = "n/a" if r["peak_mib"] is None else f"{r['peak_mib']:.0f}"
    return (f"| {r['size']} | {r['params'] / 1e6:.1f}M | {r['linear4bit']} | {r['quant']} | {'on' if r['checkpointing'] else 'off'} "
            f"| {r['batch']} | {r['tokens_per_step']} | {r['step_ms']:.1f} ({r['step_ms_spread']:.1f}) | {r['tokens_per_s']:.0f} | {peak} "
            f"| {r['ops_per_step']} | {r['host_share']:.2f} | {r['collate_ms']:.1f} | {r['loss_first']:.3f} -> {r['loss_last']:.3f} |")  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="tiny,1b", help=f"comma-separated, of {', '.join(SIZES)}")
    ap.add_argument("--quant", default="4bit,none", help="comma-separated, of 4bit, 8bit, none (bf16 LoRA on CUDA)")
    ap.add_argument("--batch-size", default="4,32", help="comma-separated batch sizes")
    ap.add_argument("--checkpointing", default="off", help="gradient checkpointing: off, on or off,on")
    ap.add_argument("--lora-dropout", type=float, default=0.05)
    ap.add_argument("--pad-to", type=int, default=1, help="pad each batch's length to a multiple of this")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", type=Path, help="also write the rows here")
    a = ap.parse_args(argv)
    a.sizes, a.quant = a.sizes.split(","), a.quant.split(",")
    try:
        a.batch_size = [int(b) for b in a.batch_size.split(",")]
    except ValueError:
        ap.error(f"--batch-size: {a.batch_size!r} is not a comma-separated list of integers")
    flags = {"off": False, "on": True}
    if any(c not in flags for c in a.checkpointing.split(",")):
        ap.error(f"--checkpointing: {a.checkpointing!r} is not off, on or off,on")
    a.checkpointing = [flags[c] for c in a.checkpointing.split(",")]
    for name, values, known in (("--sizes", a.sizes, SIZES), ("--quant", a.quant, QUANTS)):
        if any(v not in known for v in values):
            ap.error(f"{name}: {','.join(values)} is not a comma-separated list of {', '.join(known)}")
    if min(a.batch_size) < 1 or a.steps < 1 or a.warmup < 0 or a.pad_to < 1:
        ap.error("--batch-size, --steps and --pad-to must be >= 1, --warmup >= 0")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    plan = [(s, q, c) for s in a.sizes for q in a.quant for c in a.checkpointing]
    if os.environ.get("CBM_DRY_RUN", "") not in ("", "0"):
        print(f"qlora_gpu: dry run: {len(plan)} models x batch sizes {a.batch_size}: " + "; ".join(f"{s} {q} ckpt {c}" for s, q, c in plan))
        return 0
    if any(q != "none" for q in a.quant) and not torch.cuda.is_available():
        print(f"qlora_gpu: --quant {','.join(a.quant)} needs a CUDA GPU (none here); --quant none runs plain LoRA on the CPU", file=sys.stderr)
        return 2
    where = f"cuda {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else f"cpu ({torch.get_num_threads()} threads)"
    print(f"torch {torch.__version__}, {where}; {a.steps} timed steps after {a.warmup}; LoRA dropout {a.lora_dropout}; pad to {a.pad_to}")
    print(HEADER)
    print("|" + "---|" * (HEADER.count("|") - 1))
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as d:
        for size, quant, ckpt in plan:
            rows += bench(size, quant, ckpt, a.batch_size, a, Path(d))
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({"torch": torch.__version__, "device": where, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
