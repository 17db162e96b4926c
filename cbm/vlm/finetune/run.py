"""One ``cbm-finetune`` run: rows -> evaluation before -> LoRA / QLoRA training -> evaluation after ->
the originals-vs-counterfactuals table, heatmaps, adapter (and optionally the merged model).

Outputs in ``output_dir``: ``data/pairs.jsonl`` (built sets), ``csv/metrics.csv`` (+ W&B offline),
``adapter/`` (PEFT adapter + processor), ``merged/`` (``merge=true``), ``results.json`` /
``results.md``, ``per_row.csv``, ``heatmaps/<pair>-<split>-{before,after}.png``.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from cbm.config.safe_paths import inside, slug, slugs
from cbm.progress import progress_bar_wanted
from cbm.vlm.finetune.collate import Collator
from cbm.vlm.finetune.config import FinetuneConfig
from cbm.vlm.finetune.data import BadRow, QARow, load_rows
from cbm.vlm.finetune.evaluate import Evaluator, RowResult, heatmap, mcnemar, summarise
from cbm.vlm.finetune.model import add_lora, load_model, trainable_names
from synthetic.atomic import write_csv_atomic, write_json_atomic, write_text_atomic

log = logging.getLogger("cbm.finetune")


def build_rows(cfg: FinetuneConfig) -> tuple[list[QARow], list[BadRow]]:
    """The configured JSONL's rows, or a built set written to ``output_dir/data/pairs.jsonl``."""
    d = cfg.data
    if d.jsonl is not None:
        return load_rows(d.jsonl, d.on_bad)
    from cbm.vlm.finetune.builders import build
    from synthetic.registry import data_config

    out = Path(cfg.output_dir) / "data"
    if d.build == "edct":
        path = build("edct", out, **dict(d.source))
    elif d.build == "robot":
        src = data_config({"name": "robot", "n_train": 10, "n_calib": 0, "n_test": d.n, **dict(d.source)})
        path = build("robot", out, cfg=src, n=d.n, parts=list(d.parts), cache_dir=d.cache_dir)
    else:
        src = data_config({"name": "sudoku", "n_train": 20, "n_val": 4, "n_calib": 0, "n_test": d.n, **dict(d.source)})
        path = build("sudoku", out, cfg=src, n=d.n, cache_dir=d.cache_dir, seed=cfg.seed, cells_per_board=d.cells_per_board,
                     questions=list(d.questions))  # fmt: skip
    return load_rows(path, d.on_bad)


def split_pairs(rows: Sequence[QARow], eval_fraction: float, seed: int) -> tuple[list[QARow], list[QARow]]:
    """Train / evaluation rows, split by ``pair_id`` (an original and its counterfactual stay together)."""
    ids = sorted({r.pair_id for r in rows})
    rng = np.random.default_rng(seed)
    n_eval = max(1, int(round(eval_fraction * len(ids))))
    if n_eval >= len(ids):
        raise ValueError(f"data: {len(ids)} pair(s) cannot be split into training and evaluation (eval_fraction={eval_fraction})")
    held = set(rng.choice(ids, n_eval, replace=False).tolist())
    return [r for r in rows if r.pair_id not in held], [r for r in rows if r.pair_id in held]


def _loggers(cfg: FinetuneConfig, out: Path) -> list[Any]:
    from cbm.training.trainer import build_loggers

    wandb = dict(dict(cfg.logger).get("wandb") or {"enabled": False})
    wb = SimpleNamespace(enabled=bool(wandb.get("enabled", False)), mode=wandb.get("mode", "offline"), project=wandb.get("project", "cbm"),
                         entity=wandb.get("entity"), name=wandb.get("name"), tags=list(wandb.get("tags") or []))  # fmt: skip
    return build_loggers(SimpleNamespace(logger=SimpleNamespace(wandb=wb)), out, f"finetune-{Path(cfg.model.path).name}")  # type: ignore[arg-type]


def train(model: Any, collator: Collator, rows: Sequence[QARow], cfg: FinetuneConfig, loggers: Sequence[Any], progress: bool) -> list[float]:
    """AdamW on the trainable (adapter) parameters; returns the loss of every optimiser step."""
    from tqdm.auto import tqdm

    t = cfg.train
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=t.lr, weight_decay=t.weight_decay)
    g = torch.Generator().manual_seed(cfg.seed)
    loader = torch.utils.data.DataLoader(list(rows), batch_size=t.batch_size, shuffle=True, collate_fn=collator, generator=g)
    device = next(model.parameters()).device
    steps_per_epoch = math.ceil(len(loader) / t.grad_accum)
    total = steps_per_epoch * t.epochs if t.max_steps <= 0 else min(t.max_steps, steps_per_epoch * t.epochs)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if (t.precision == "bf16" and device.type == "cuda") else nullcontext()
    model.train()
    losses: list[float] = []
    step, acc, running = 0, 0, 0.0
    bar = tqdm(total=total, desc="finetune", disable=not progress, leave=False)
    t0 = time.perf_counter()
    while step < total:
        for batch in loader:
            batch = {k: v.to(device) for k, v in batch.items()}
            with autocast:
                loss = model(**batch).loss / t.grad_accum
            loss.backward()
            running += float(loss.detach())
            acc += 1
            if acc < t.grad_accum:
                continue
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(running)
            step, acc = step + 1, 0
            if step % t.log_every == 0 or step == total:
                metrics = {"train/loss": running, "train/step_s": (time.perf_counter() - t0) / step}
                for lg in loggers:
                    lg.log_metrics(metrics, step=step)
            bar.update(1)
            bar.set_postfix(loss=f"{running:.3f}")
            running = 0.0
            if step >= total:
                break
    bar.close()
    for lg in loggers:
        lg.save()
        lg.finalize("success")
    return losses


def run(cfg: FinetuneConfig) -> dict[str, Any]:
    from transformers import AutoProcessor

    out = Path(cfg.output_dir)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    rows, bad = build_rows(cfg)
    for b in bad:
        log.warning("data: skipped %s", b)
    train_rows, eval_rows = split_pairs(rows, cfg.data.eval_fraction, cfg.seed)
    slugs((r.pair_id for r in rows), "data: pair_id")  # heatmap file names: a collision stops here, before training
    processor = AutoProcessor.from_pretrained(Path(cfg.model.path).expanduser(), local_files_only=True)
    collator = Collator(processor, cfg.model.end_of_turn)
    attn = cfg.model.attn_implementation if cfg.eval.localise else None
    model = load_model(cfg.model.path, cfg.quant, cfg.model.dtype, cfg.model.device, attn)
    progress = progress_bar_wanted(cfg.progress)
    ev = dict(max_new_tokens=cfg.eval.max_new_tokens, localise=cfg.eval.localise, pool_threshold=cfg.eval.pool_threshold)
    timing: dict[str, float] = {}
    before: list[RowResult] | None = None
    if cfg.eval.before:
        t0 = time.perf_counter()
        before = Evaluator(model, collator, **ev).run(eval_rows, progress, "eval before")
        timing["eval_before_s"] = time.perf_counter() - t0
    model = add_lora(model, cfg.lora, cfg.train.gradient_checkpointing, quantized=cfg.quant != "none")
    n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    n_total = sum(p.numel() for p in model.parameters())
    t0 = time.perf_counter()
    losses = train(model, collator, train_rows, cfg, _loggers(cfg, out), progress)
    timing["train_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    after = Evaluator(model, collator, **ev).run(eval_rows, progress, "eval after")
    timing["eval_after_s"] = time.perf_counter() - t0
    model.save_pretrained(out / "adapter")
    processor.save_pretrained(out / "adapter")
    if cfg.merge:
        merged = model.merge_and_unload()
        merged.save_pretrained(out / "merged")
        processor.save_pretrained(out / "merged")
    result = report(cfg, out, eval_rows, before, after, losses, bad, timing, n_trainable, n_total, len(train_rows))
    return {"result": result, "model": model, "before": before, "after": after, "losses": losses, "trainable": trainable_names(model)}


def report(cfg: FinetuneConfig, out: Path, rows: Sequence[QARow], before: list[RowResult] | None, after: list[RowResult], losses: list[float],
           bad: list[BadRow], timing: dict[str, float], n_trainable: int, n_total: int, n_train: int) -> dict[str, Any]:  # fmt: skip
    """``results.json`` / ``results.md`` / ``per_row.csv`` and the heatmaps."""
    s_after = summarise(after)
    s_before = summarise(before) if before is not None else None
    tests = {}
    if before is not None:
        for split in s_after:
            b = [r.correct for r in before if r.split == split]
            a = [r.correct for r in after if r.split == split]
            tests[split] = mcnemar(b, a)
    def by_pair(results: list[RowResult]) -> dict[str, Any]:  # originals vs counterfactuals, paired by pair_id
        orig = {r.pair_id: r.correct for r in results if r.split == "original"}
        cf = {r.pair_id: r.correct for r in results if r.split == "counterfactual"}
        ids = sorted(set(orig) & set(cf))
        return mcnemar([orig[i] for i in ids], [cf[i] for i in ids])

    paired = {"after": by_pair(after), **({"before": by_pair(before)} if before is not None else {})}
    result = {
        "model": cfg.model.path, "quant": cfg.quant, "lora": {"r": cfg.lora.r, "alpha": cfg.lora.alpha}, "train_rows": n_train,
        "eval_rows": len(rows), "bad_rows": [str(b) for b in bad], "trainable_params": n_trainable, "total_params": n_total,
        "loss_first": losses[0] if losses else None, "loss_last": losses[-1] if losses else None, "steps": len(losses),
        "before": s_before, "after": s_after, "mcnemar": tests, "original_vs_counterfactual": paired, "timing": timing,
    }  # fmt: skip
    write_json_atomic(out / "results.json", result)
    lines = ["| split | rows | loss before | loss after | accuracy before | accuracy after | McNemar p (worse / better) | localisation before | localisation after |",
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for split, a in s_after.items():
        b = (s_before or {}).get(split, {})
        t = tests.get(split)
        test = "" if t is None else f"{t['p_value']:.3g} ({t['worse']} / {t['better']})"
        lines.append(f"| {split} | {a['rows']} | {_f(b.get('loss'))} | {_f(a['loss'])} | {_f(b.get('accuracy'), 100, 1)} | "
                     f"{_f(a['accuracy'], 100, 1)} | {test} | {_f(b.get('localisation'))} | {_f(a['localisation'])} |")  # fmt: skip
    lines += ["", "originals vs counterfactuals, paired by pair_id (McNemar: counterfactual wrong where the original is right / the reverse): "
              + "; ".join(f"{k} p {v['p_value']:.3g} ({v['worse']} / {v['better']})" for k, v in paired.items())]  # fmt: skip
    lines += ["", f"training: {n_train} rows, {len(losses)} steps, loss {_f(result['loss_first'])} -> {_f(result['loss_last'])}; "
              f"{n_trainable:,} trainable of {n_total:,} parameters ({cfg.quant}, LoRA r={cfg.lora.r}); "
              + ", ".join(f"{k} {v:.1f} s" for k, v in timing.items())]  # fmt: skip
    write_text_atomic(out / "results.md", "\n".join(lines) + "\n")
    per_row = []
    for i, r in enumerate(after):
        row = {"pair_id": r.pair_id, "split": r.split, "answer": rows[i].answer, "after_pred": r.prediction.strip(), "after_correct": r.correct,
               "after_loss": r.loss, "after_localisation": r.localisation}  # fmt: skip
        if before is not None:
            row.update(before_pred=before[i].prediction.strip(), before_correct=before[i].correct, before_loss=before[i].loss,
                       before_localisation=before[i].localisation)  # fmt: skip
        per_row.append(row)
    write_csv_atomic(out / "per_row.csv", per_row, list(per_row[0]) if per_row else [])
    drawn = 0
    seen: list[str] = []
    for i, r in enumerate(after):
        if drawn >= cfg.eval.heatmaps * 2:
            break
        if r.attention is None:
            continue
        if r.pair_id not in seen:
            if len(seen) >= cfg.eval.heatmaps:
                continue
            seen.append(r.pair_id)
        for tag, res in (("before", before[i] if before is not None else None), ("after", r)):
            if res is not None and res.attention is not None:
                title = f"{r.split} {tag}: {res.prediction.strip()[:12]!r} (answer {rows[i].answer!r}), in-mask {res.localisation:.2f}"
                name = f"{slug(r.pair_id)}-{r.split}-{tag}.png"  # pair ids are data: slugged, kept inside out/heatmaps
                heatmap(rows[i], res.attention, inside(out, out / "heatmaps" / name, "pair_id"), title)
        drawn += 1
    return result


def _f(v: float | None, scale: float = 1.0, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    return f"{v * scale:.{digits}f}"
