"""One ``cbm-finetune`` run: rows -> evaluation before -> LoRA / QLoRA training -> evaluation after ->
the originals-vs-counterfactuals table, heatmaps, adapter (and optionally the merged model).

Outputs in ``output_dir``: ``data/pairs.jsonl`` (built sets), ``csv/metrics.csv`` (+ W&B offline),
``adapter/`` (PEFT adapter + processor), ``merged/`` (``merge=true``), ``results.json`` /
``results.md``, ``per_row.csv``, ``heatmaps/<pair>-<split>-{before,after}.png``.
"""

from __future__ import annotations

import errno
import logging
import math
import random
import shutil
import time
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from PIL import Image

from cbm.core.atomic import WriteError, atomic_dir, write_csv_atomic, write_json_atomic, write_text_atomic
from cbm.core.progress import progress_bar_wanted
from cbm.core.safe_paths import inside, slug, slugs
from cbm.vlm.finetune.checks import check_device_available, edct_source
from cbm.vlm.finetune.collate import Collator
from cbm.vlm.finetune.config import FinetuneConfig
from cbm.vlm.finetune.data import BadDataError, BadRow, QARow, load_rows, split_pairs
from cbm.vlm.finetune.evaluate import Evaluator, RowResult, heatmap, mcnemar, summarise
from cbm.vlm.finetune.model import add_lora, load_model, load_processor, lora_config, trainable_names

__all__ = ["build_rows", "encodable", "report", "run", "save_outputs", "split_pairs", "train"]

log = logging.getLogger("cbm.finetune")


def build_rows(cfg: FinetuneConfig) -> tuple[list[QARow], list[BadRow]]:
    """The configured JSONL's rows, or a built set written to ``output_dir/data/pairs.jsonl``."""
    d = cfg.data
    if d.jsonl is not None:
        return load_rows(d.jsonl, d.on_bad, d.max_image_pixels)
    from cbm.vlm.finetune.builders import build, generator_config

    out = Path(cfg.output_dir) / "data"
    if d.build == "edct":
        path = build("edct", out, **edct_source(d.source or {}))
    elif d.build == "robot":
        src = generator_config("robot", d.n, d.source)
        path = build("robot", out, cfg=src, n=d.n, parts=list(d.parts), cache_dir=d.cache_dir)
    else:
        src = generator_config("sudoku", d.n, d.source)
        path = build("sudoku", out, cfg=src, n=d.n, cache_dir=d.cache_dir, seed=cfg.seed, cells_per_board=d.cells_per_board,
                     questions=list(d.questions))  # fmt: skip
    return load_rows(path, d.on_bad, d.max_image_pixels)


def encodable(collator: Collator, rows: Sequence[QARow], bad: list[BadRow], on_bad: str) -> tuple[list[QARow], list[BadRow]]:
    """The rows the model's processor takes (each encoded once, its mask decoded): a row it refuses
    (an aspect ratio it cannot tile, a truncated image) is a bad row here, not a crash mid-epoch."""
    good, new = [], []
    for r in rows:
        try:
            collator.encode(r)
            if r.mask is not None:
                with Image.open(r.mask) as m:
                    m.convert("L")
        except Exception as err:  # the processor's own checks raise ValueError, OSError, RuntimeError, ...
            text = str(err).strip().splitlines()[0][:160] if str(err).strip() else type(err).__name__
            new.append(BadRow(r.line, f"the model's processor cannot take this row ({type(err).__name__}: {text})"))
            continue
        good.append(r)
    if new and on_bad == "error":
        raise BadDataError(f"data: {len(new)} row(s) the model cannot take: " + "; ".join(map(str, new[:3])))
    if not good:
        raise BadDataError(f"data: no row the model can take ({new[0]})")
    return good, sorted(bad + new, key=lambda b: b.line)


def _loggers(cfg: FinetuneConfig, out: Path) -> list[Any]:
    """CSV always; W&B (job type ``finetune``) with the whole config when ``logger.wandb`` is on."""
    from cbm.config.train import LoggerConfig
    from cbm.core.validation import to_dataclass
    from cbm.tracking.lightning import build_loggers
    from cbm.tracking.wandb_run import plain_config, run_config

    logger = dict(cfg.logger) if cfg.logger.get("wandb") else {"wandb": {"enabled": False}}  # a config built in code: off
    settings = SimpleNamespace(logger=to_dataclass(LoggerConfig, logger, "logger"))
    config = run_config(plain_config(cfg), "cbm-finetune")
    return build_loggers(settings, out, f"finetune-{Path(cfg.model.path).name}", job_type="finetune", config=config)  # type: ignore[arg-type]


#: Bytes of encoded rows (token ids, image patches) the collator keeps, so each row's image is opened,
#: processed and tokenised once per run, not once per epoch (2 GiB: ~1,700 rows of 224-px Qwen images).
ENCODE_CACHE_BYTES = 2 * 2**30


def train(model: Any, collator: Collator, rows: Sequence[QARow], cfg: FinetuneConfig, loggers: Sequence[Any], progress: bool) -> list[float]:
    """AdamW on the trainable (adapter) parameters; returns the loss of every optimiser step.

    The step stays on the device: losses are summed there and read (one host sync) every
    ``train.log_every`` steps and once at the end, not after every batch; batches come from the
    collator's encoded rows (:class:`~cbm.vlm.finetune.collate.Collator`, ``cache_bytes``)."""
    from tqdm.auto import tqdm

    t = cfg.train
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=t.lr, weight_decay=t.weight_decay)
    g = torch.Generator().manual_seed(cfg.seed)
    loader = torch.utils.data.DataLoader(list(rows), batch_size=min(t.batch_size, len(rows)), shuffle=True, collate_fn=collator, generator=g)
    device = next(model.parameters()).device
    steps_per_epoch = math.ceil(len(loader) / t.grad_accum)
    total = steps_per_epoch * t.epochs if t.max_steps <= 0 else min(t.max_steps, steps_per_epoch * t.epochs)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if (t.precision == "bf16" and device.type == "cuda") else nullcontext()
    model.train()
    losses: list[torch.Tensor] = []
    step, acc = 0, 0
    running: torch.Tensor | None = None
    bar = tqdm(total=total, desc="finetune", disable=not progress, leave=False)
    t0 = time.perf_counter()
    while step < total:
        for batch in loader:
            batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
            try:
                with autocast:
                    loss = model(**batch).loss / t.grad_accum
                loss.backward()
            except torch.OutOfMemoryError:
                hint = "" if t.gradient_checkpointing else "train.gradient_checkpointing=true or "
                raise ValueError(f"out of {device} memory at training step {step + 1} (batch {len(batch['input_ids'])}): "
                                 f"{hint}a smaller train.batch_size with train.grad_accum") from None  # fmt: skip
            running = loss.detach() if running is None else running + loss.detach()
            acc += 1
            if acc < t.grad_accum:
                continue
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(running.float())
            step, acc, running = step + 1, 0, None
            if step % t.log_every == 0 or step == total:
                value = float(losses[-1])  # the host sync, once per logged step
                metrics = {"train/loss": value, "train/step_s": (time.perf_counter() - t0) / step}
                for lg in loggers:
                    lg.log_metrics(metrics, step=step)
                bar.set_postfix(loss=f"{value:.3f}")
            bar.update(1)
            if step >= total:
                break
    bar.close()
    for lg in loggers:
        lg.save()
        lg.finalize("success")
    return torch.stack(losses).tolist() if losses else []


def _quiet_transformers(progress: bool) -> None:
    """transformers' own progress bars only where ours are drawn; its advice (``use_cache`` under
    gradient checkpointing) off: stderr stays for what the user must read."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    if not progress:
        hf_logging.disable_progress_bar()


def run(cfg: FinetuneConfig) -> dict[str, Any]:
    """The whole run. The model, processor and LoRA targets are checked before any file is written;
    the results are written before the adapter, so a failed save keeps them (one line, exit 2)."""
    out = Path(cfg.output_dir)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    check_device_available(cfg.model.device, cfg.quant)
    progress = progress_bar_wanted(cfg.progress)
    _quiet_transformers(progress)
    processor = load_processor(cfg.model.path)
    collator = Collator(processor, cfg.model.end_of_turn, cache_bytes=ENCODE_CACHE_BYTES)
    attn = cfg.model.attn_implementation if cfg.eval.localise else None
    model = load_model(cfg.model.path, cfg.quant, cfg.model.dtype, cfg.model.device, attn)
    lora_config(model, cfg.lora)  # targets and extra LoRA fields, before an hour of evaluation
    made = [p for p in (out / "data",) if cfg.data.jsonl is None and not p.exists()]
    try:
        rows, bad = build_rows(cfg)
        rows, bad = encodable(collator, rows, bad, cfg.data.on_bad)
        train_rows, eval_rows = split_pairs(rows, cfg.data.eval_fraction, cfg.seed)
        slugs((r.pair_id for r in rows), "data: pair_id")  # heatmap file names: a collision stops here, before training
    except BaseException:
        for p in made:  # a run that stops before training leaves nothing behind
            shutil.rmtree(p, ignore_errors=True)
        raise
    for b in bad:
        log.warning("data: skipped %s", b)
    e = cfg.eval
    ev = dict(max_new_tokens=e.max_new_tokens, localise=e.localise, pool_threshold=e.pool_threshold, attention_layers=e.attention_layers,
              percentile=e.threshold_percentile, power=e.sharpen)  # fmt: skip
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
    loggers = _loggers(cfg, out)
    losses = train(model, collator, train_rows, cfg, loggers, progress)
    timing["train_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    after = Evaluator(model, collator, **ev).run(eval_rows, progress, "eval after")
    timing["eval_after_s"] = time.perf_counter() - t0
    result = report(cfg, out, eval_rows, before, after, losses, bad, timing, n_trainable, n_total, len(train_rows))
    save_outputs(model, processor, out, cfg.merge)
    wb = next((lg for lg in loggers if hasattr(lg, "identity")), None)
    if wb is not None:
        from cbm.tracking.wandb_run import log_finetune_results

        log_finetune_results(wb.experiment, result, out, cfg.logger.get("wandb", {}).get("log_model", False))
    return {"result": result, "model": model, "before": before, "after": after, "losses": losses, "trainable": trainable_names(model)}


def _save_failure(err: BaseException) -> tuple[int, str] | None:
    """``(errno, reason)`` when ``err`` is a failed write (an ``OSError``, safetensors' own error,
    "File too large" from any layer), else ``None``."""
    text = str(err)
    if isinstance(err, WriteError):
        return err.errno or errno.EIO, text
    if isinstance(err, OSError):
        return err.errno or errno.EIO, f"{err.strerror or text}".lower()
    if "File too large" in text or "FileTooLarge" in text or "code: 27" in text:
        return errno.EFBIG, "file too large (a file-size limit of this process or filesystem)"
    if "No space left" in text or "StorageFull" in text or "code: 28" in text:
        return errno.ENOSPC, "no space left on device"
    if type(err).__name__ == "SafetensorError":
        return errno.EIO, text.strip().splitlines()[0] if text.strip() else "SafetensorError"
    return None


def save_outputs(model: Any, processor: Any, out: Path, merge: bool) -> None:
    """``out/adapter`` (and ``out/merged``), each written whole or not at all (a previous one stays
    when the save fails); a failure is a :class:`WriteError` naming what was kept."""
    saved = [f"results written to {out}"]
    what = "adapter"
    try:
        with atomic_dir(out / "adapter") as d:
            model.save_pretrained(d)
            processor.save_pretrained(d)
        if merge:
            saved.append(f"the adapter saved to {out / 'adapter'}")
            what = "merged model"
            merged = model.merge_and_unload()
            with atomic_dir(out / "merged") as d:
                merged.save_pretrained(d)
                processor.save_pretrained(d)
    except Exception as err:
        failure = _save_failure(err)
        if failure is None:
            raise
        code, reason = failure
        raise WriteError(code, f"{'; '.join(saved)}; the {what} could not be saved: {reason}") from None


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

