"""``cbm-train``: train one model on one synthetic dataset, test it, report oracle interventions.

Writes into the Hydra run directory: ``checkpoints/best.ckpt``, ``csv/metrics.csv``,
``wandb/`` (offline), ``config.yaml`` and ``metrics.json`` (final test metrics).
"""

from __future__ import annotations

import csv
import io
import logging
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from cbm.config.train import TrainConfig
from cbm.core import runlock
from cbm.core.atomic import clean_orphans, ensure_dir
from cbm.core.cli import hydra_app
from cbm.core.common import (
    clean_errors,
    dry_run,
    log_to,
    markdown_table,
    say,
    write_json_atomic,
    write_text_atomic,
)
from cbm.core.concurrency import Terminated, stoppable, stopped
from cbm.core.lifeline import die_with_parent
from cbm.core.safe_paths import check_creatable
from cbm.core.validation import ConfigError, as_dict, to_dataclass
from cbm.experiments.tables import RULES_FILE
from cbm.models.registry import validate_model
from cbm.tracking.wandb_run import check_api_key
from synthetic.registry import data_config
from synthetic.resources import check_footprint

log = logging.getLogger("cbm.train")


def validate(cfg: DictConfig) -> tuple[TrainConfig, Any, dict]:
    """Typed train / data / model configs and the checks a run needs before it starts (non-empty
    train / val / test splits, an accelerator that exists); raises ConfigError with one clear line."""
    raw = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(raw, dict)
    raw.pop("hydra", None)
    data_raw, model_raw = raw.pop("data"), raw.pop("model")
    train = to_dataclass(TrainConfig, raw, "config")
    check_api_key(train.logger.wandb)  # mode=online without a key: refused now, not after the run directory is made
    data = data_config(data_raw)
    model_cfg = validate_model(model_raw)
    if model_cfg["name"] == "blackbox" and train.trainer.checkpoint_monitor in ("concept_auroc", "concept_f1"):
        raise ConfigError(f"trainer.checkpoint_monitor={train.trainer.checkpoint_monitor}: a black box has no concepts (use task_loss, task_acc or last)")
    if train.cache_dir is not None:
        check_creatable(train.cache_dir, "cache_dir")  # a file in the way: refused now, not when the data is written
    check_footprint(data, train.data_storage, train.cache_dir)  # fits in memory / on disk
    sizes = data.split_sizes
    for split, why in (("train", "to train on"), ("val", "to choose the best checkpoint"), ("test", "to test on")):
        if sizes.get(split, 0) < 1:
            raise ConfigError(f"data: the {split} split is empty ({sizes}); cbm-train needs one {why}")
    if train.trainer.accelerator in ("gpu", "cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(
                f"trainer.accelerator={train.trainer.accelerator} but no CUDA GPU is available "
                "(use trainer.accelerator=cpu or auto)"
            )
        n = train.trainer.devices
        have = torch.cuda.device_count()
        if isinstance(n, int) and n > have:
            raise ConfigError(f"trainer.devices={n} but only {have} CUDA GPU(s) are available")
    return train, data, model_cfg


#: Settings a resumed run may change (everything else is the run's own config).
RESUMABLE = ("trainer.max_epochs", "trainer.accelerator", "trainer.devices", "trainer.num_nodes",
             "trainer.enable_progress_bar", "cache_dir")  # fmt: skip


def previous_run(run_dir: Path) -> str | None:
    """What in ``run_dir`` belongs to an earlier run (``None`` when it is free to use)."""
    if (run_dir / "metrics.json").exists():
        return "metrics.json"
    ckpts = sorted(p.name for p in (run_dir / "checkpoints").glob("*.ckpt")) if (run_dir / "checkpoints").is_dir() else []
    return f"checkpoints/{ckpts[0]}" if ckpts else None


def resume_config(run_dir: str | Path, overrides: list[str]) -> DictConfig:
    """The stored config of a killed run, with the few :data:`RESUMABLE` overrides applied."""
    d = Path(run_dir)
    if not (d / "config.yaml").is_file():
        raise ValueError(f"resume: {d} is not a cbm-train run directory (no config.yaml)")
    if (d / "metrics.json").exists():
        raise ValueError(f"resume: {d} already finished (it has metrics.json); nothing to resume")
    if not (d / "checkpoints" / "last.ckpt").is_file():
        raise ValueError(f"resume: {d} has no checkpoints/last.ckpt (killed before its first epoch ended): start it again")
    try:
        cfg = OmegaConf.load(d / "config.yaml")
    except Exception as err:
        raise ValueError(f"resume: {d / 'config.yaml'} is not a readable config ({type(err).__name__})") from None
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or key.lstrip("+~") not in RESUMABLE:
            raise ValueError(f"resume: '{item}' cannot change a resumed run (allowed: {', '.join(RESUMABLE)})")
        OmegaConf.update(cfg, key, yaml.safe_load(value), merge=False)
    if OmegaConf.select(cfg, "model.head") is not None and OmegaConf.select(cfg, "model.head.solver") is None:
        # a run started before head.solver existed trained its head by gradient (its checkpoint's
        # optimiser holds the head's parameter group): resume it the way it started
        OmegaConf.update(cfg, "model.head.solver", "gradient", force_add=True)
    cfg.output_dir = str(d)
    return cfg


def restore_csv_log(csv_logger, last_epoch: int) -> None:
    """Lightning's CSV logger empties ``metrics.csv`` when it opens it: put back the rows of the epochs
    the resumed checkpoint holds (those of the killed, unfinished epoch are dropped)."""
    path = Path(csv_logger.log_dir) / "metrics.csv"
    rows, header = [], []
    if path.exists():
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            header = list(reader.fieldnames or [])
            rows = [r for r in reader if r.get("epoch") not in (None, "") and int(float(r["epoch"])) <= last_epoch]
    writer = csv_logger.experiment  # opening it truncates the file
    if rows:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=header, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        write_text_atomic(path, buf.getvalue())
        writer.metrics_keys = sorted(header)


def run(cfg: DictConfig, resume: bool = False) -> dict[str, Any]:
    """Train, test and evaluate oracle interventions; return the metrics written to metrics.json.

    ``resume``: continue the run in ``cfg.output_dir`` from its ``checkpoints/last.ckpt`` (model,
    optimiser, scheduler, callbacks; batch order and random numbers depend on the seed and the
    epoch only), so it ends with the metrics an uninterrupted run would have. Without it, a
    directory that already holds a run is refused rather than mixed with it.

    Under a multi-process strategy every rank trains and tests on its shard; only rank zero
    writes ``config.yaml`` / ``metrics.json``, runs the oracle table and prints (the other
    ranks return ``{}``).
    """
    import lightning as L
    from lightning.pytorch.utilities import rank_zero_only

    from cbm.interventions.evaluate import intervention_accuracy, resolve_ks
    from cbm.interventions.policies.random import RandomPolicy
    from cbm.models import build_model
    from cbm.tracking.lightning import log_training_results, replay_csv
    from cbm.tracking.wandb_run import distinct_name, exit_code_for, hydra_job, run_config, write_record
    from cbm.training.checkpoint import read_checkpoint
    from cbm.training.device import numerics
    from cbm.training.trainer import build_trainer, finish_wandb, wandb_logger_of
    from synthetic.cache import aux_cache
    from synthetic.datamodule import SyntheticDataModule
    from synthetic.registry import data_info, load_data

    train_cfg, data_cfg, model_cfg = validate(cfg)
    run_dir = Path(train_cfg.output_dir)
    zero = rank_zero_only.rank == 0
    last = run_dir / "checkpoints" / "last.ckpt"
    if not resume and zero and (found := previous_run(run_dir)):
        raise ValueError(
            f"{run_dir} already holds a run ({found}): resume it with 'cbm-train resume={run_dir}' "
            "or choose another directory"
        )
    if zero and resume:
        clean_orphans(run_dir / "checkpoints")  # temp files of a checkpoint write the kill interrupted
    L.seed_everything(train_cfg.seed, workers=True, verbose=False)

    start = time.perf_counter()
    data = load_data(data_cfg, train_cfg.cache_dir, train_cfg.data_storage)
    data_s = time.perf_counter() - start
    t = train_cfg.trainer
    dm = SyntheticDataModule(
        lambda: data, train_cfg.batch_size, train_cfg.eval_batch_size, seed=train_cfg.seed, device_resident=t.data_on_device,
        prefetch=train_cfg.data_prefetch,
    )
    model = build_model(model_cfg, data_info(data, data_cfg), as_dict(data_cfg))
    model.check_data(data)  # before the run directory is used: a refusal leaves nothing behind
    oracle_ks = resolve_ks(train_cfg.interventions.ks, model.types.n_units) if model.has_concepts else []  # a bad budget: refused before training; a categorical concept is one
    if t.compile:
        model.backbone.compile()
    job = hydra_job()
    run_name = f"{data_cfg.name}-{model_cfg['name']}-s{train_cfg.seed}"
    if job.get("mode") == "run":  # a sweep's names show its settings (identity); one run's: their hash
        run_name = distinct_name(run_name, job["overrides"], {"data": data_cfg.name, "model": model_cfg["name"], "seed": str(train_cfg.seed)})
    config = OmegaConf.to_container(cfg, resolve=True)
    trainer = build_trainer(train_cfg, run_dir, run_name, config=run_config(config, "cbm-train", job), resume=resume)
    wb = wandb_logger_of(trainer) if zero else None
    if resume and zero:
        ckpt_epoch = int(read_checkpoint(last)["epoch"])
        restore_csv_log(trainer.loggers[0], ckpt_epoch)
        if wb is not None:  # the epochs up to the checkpoint that the killed run's W&B log lost
            replay_csv(wb, Path(trainer.loggers[0].log_dir) / "metrics.csv", wb.floor_step, ckpt_epoch)
    if wb is not None:
        ensure_dir(run_dir)
        write_record(run_dir, wb.identity)
        _ = wb.experiment  # started now: a run that fails before its first log is still recorded as failed
    if zero and not resume:  # the work starts: from here on the directory holds this run
        ensure_dir(run_dir)
        write_text_atomic(run_dir / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    timing: dict[str, float] = {"data_s": data_s}
    try:
        start = time.perf_counter()
        with aux_cache(train_cfg.cache_dir):  # what a model computes once for its data (a trained OCR) is shared there
            trainer.fit(model, datamodule=dm, ckpt_path=str(last) if resume else None, weights_only=True)
        timing["fit_s"] = time.perf_counter() - start
        ckpt = trainer.checkpoint_callback.best_model_path or None
        start = time.perf_counter()
        test = trainer.test(model, datamodule=dm, ckpt_path=ckpt, verbose=False, weights_only=True)[0]
        timing["test_s"] = time.perf_counter() - start
        if not trainer.is_global_zero:
            return {}
        metrics: dict[str, Any] = {k: float(v) for k, v in test.items()}
        if (train_cfg.objective or "").startswith("val/"):  # a sweeper optimises the kept checkpoint's validation metric
            val = trainer.validate(model, datamodule=dm, ckpt_path=ckpt, verbose=False, weights_only=True)[0]
            metrics.update({k: float(v) for k, v in val.items() if k.startswith("val/")})
        if oracle_ks:
            start = time.perf_counter()
            device = trainer.strategy.root_device  # the strategy's teardown moved the model to the CPU
            model.to(device).eval()
            if t.data_on_device:
                dm.to_device(device)
            seed = train_cfg.interventions.seed
            accs = intervention_accuracy(model, dm.loader("test"), oracle_ks, lambda: RandomPolicy(seed))
            metrics["oracle_random"] = {str(k): v for k, v in accs.items()}
            timing["interventions_s"] = time.perf_counter() - start
        rules = None
        if callable(getattr(model, "rule_table", None)):  # a concept-reasoning head (DCR): its rules, readable
            rules = model.rule_table(dm.loader("test"))
            write_json_atomic(run_dir / RULES_FILE, rules)
        metrics.update(
            dataset=data_cfg.name,
            model=model_cfg["name"],
            training=model_cfg.get("training"),
            seed=train_cfg.seed,
            checkpoint=ckpt,
            run_dir=str(run_dir),
            device=str(trainer.strategy.root_device),
            world_size=trainer.world_size,
            precision=str(t.precision),
            numerics=numerics(),
        )
        write_json_atomic(run_dir / "metrics.json", metrics)
        write_json_atomic(run_dir / "timing.json", {k: round(v, 3) for k, v in timing.items()})
        if wb is not None:
            log_training_results(wb.experiment, metrics, train_cfg.logger.wandb, run_dir, data_cfg, dm)
    except BaseException as err:
        stop = stop_of(trainer, err)
        finish_wandb(exit_code_for(stop or err))
        if stop is not None and zero:
            stopped("cbm-train", stop, resume_hint(run_dir))
        raise
    finish_wandb(0)
    say(results_table([metrics]))
    if rules:
        say(f"rules the model predicted with on the test split (most used of {len(rules)}; all in {RULES_FILE}):")
        say(rules_table(rules[:RULES_SHOWN]))
    if train_cfg.objective:
        say(f"objective {train_cfg.objective} = {metrics[train_cfg.objective]:.6g}")
        return float(metrics[train_cfg.objective])  # type: ignore[return-value]  # what an optimising sweeper reads
    return metrics


def stop_of(trainer: Any, err: BaseException) -> BaseException | None:
    """The Ctrl-C or SIGTERM behind ``err`` (``None`` if it is none): Lightning turns a Ctrl-C during
    ``fit`` into ``sys.exit(1)`` and, without our SIGTERM handler, a SIGTERM into a
    ``SIGTERMException`` that exits 0, which a scheduler would read as success."""
    if isinstance(err, KeyboardInterrupt | Terminated):
        return err
    if isinstance(err, SystemExit) and getattr(trainer, "interrupted", False):
        return Terminated() if getattr(trainer, "received_sigterm", False) else KeyboardInterrupt()
    return None


def resume_hint(run_dir: Path) -> str:
    """What to do after a stopped run: resume it from its last finished epoch, or start it again."""
    if (run_dir / "checkpoints" / "last.ckpt").is_file():
        return f"resume it with 'cbm-train resume={run_dir}'"
    return "it stopped before its first epoch ended: start it again"


#: How many of a concept-reasoning model's rules ``cbm-train`` prints (all are in ``RULES_FILE``).
RULES_SHOWN = 10


def rules_table(rules: list[dict[str, Any]]) -> str:
    """Markdown table of rules (``share`` and ``accuracy`` in %)."""
    return markdown_table(rules, ["rule", "examples", "share", "accuracy"])


def results_table(runs: list[dict[str, Any]]) -> str:
    """Markdown table of test metrics and oracle-intervention accuracies (in %)."""
    ks = sorted({k for r in runs for k in r.get("oracle_random", {})}, key=int)
    rows = []
    for r in runs:
        row = {
            "dataset": r["dataset"],
            "model": r["model"] + (f" ({r['training']})" if r["model"] == "cbm" else ""),
            "task acc": r.get("test/task_acc"),
            "concept acc": r.get("test/concept_acc"),
            "concept AUROC": r.get("test/concept_auroc"),
        }
        for k in ks:
            row[f"oracle k={k}"] = r.get("oracle_random", {}).get(k)
        rows.append(row)
    cols = ["dataset", "model", "task acc", "concept acc", "concept AUROC", *[f"oracle k={k}" for k in ks]]
    return markdown_table(rows, cols)


hydra_main = hydra_app(
    "cbm-train",
    "train",
    run,
    validate,
    "Train one model on one synthetic dataset, test it and report oracle interventions;\n"
    "'cbm-train resume=<run dir>' continues a killed run to the metrics an uninterrupted run reaches.",
    [
        "model=cem seed=1",
        "data=sudoku_50px model=cbm_sudoku trainer=gpu",
        "--multirun model=blackbox,cbm,cem,probcbm,ecbm seed=0,1,2",
        "trainer=ddp trainer.devices=4",
        "resume=outputs/robot-cbm/<time>",
    ],
)


@clean_errors("cbm-train")
def resume_main(run_dir: str, overrides: list[str]) -> None:
    if Path(run_dir).is_dir():
        runlock.check_free(run_dir, "it is still running")
    cfg = resume_config(run_dir, overrides)
    validate(cfg)
    if dry_run("cbm-train"):
        return
    with runlock.hold(run_dir, "it is still running"):
        log_to(Path(run_dir), "train")
        run(cfg, resume=True)


@stoppable("cbm-train")
def main() -> None:
    """``cbm-train [overrides]`` (a Hydra app) or ``cbm-train resume=<run dir> [trainer.max_epochs=N ...]``."""
    die_with_parent()  # a cell of cbm-experiment does not outlive it
    resume = [a for a in sys.argv[1:] if a.startswith("resume=")]
    if resume:
        resume_main(resume[-1].partition("=")[2], [a for a in sys.argv[1:] if not a.startswith("resume=")])
    else:
        hydra_main()


if __name__ == "__main__":
    main()
