"""W&B through Lightning's loggers, for cbm-train and cbm-finetune alike: the loggers a run gets
(CSV always, W&B when enabled), the whole config at start, history keyed by the global step (so a
resumed run continues the same history), best validation metrics in the summary, per-step training
loss and learning rates, and the resume's replay of epochs the killed run's log lost."""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import CSVLogger, Logger, WandbLogger
from lightning.pytorch.utilities import rank_zero_only

from cbm.tracking import wandb_run


class CbmWandbLogger(WandbLogger):
    """Lightning's W&B logger with the run's history keyed by ``trainer/global_step``.

    ``floor_step``: rows at or below it are already in the run's history (a resumed run: the killed
    run logged them), so they are not logged twice.
    """

    def __init__(self, *, floor_step: int = -1, **kwargs: Any):
        super().__init__(**kwargs)
        self.floor_step = floor_step
        # Lightning always passes anonymous=None, which wandb answers with a deprecation warning.
        self._wandb_init.pop("anonymous", None)

    @property
    def experiment(self):  # type: ignore[override]
        fresh = self._experiment is None
        run = wandb_run.retry_in_use(lambda: super(CbmWandbLogger, self).experiment)
        if fresh and run is not None and hasattr(run, "define_metric"):
            for key, kind in wandb_run.BEST_VAL.items():
                run.define_metric(key, summary=kind, step_metric="trainer/global_step")
        return run

    @rank_zero_only
    def log_hyperparams(self, params: Any) -> None:
        """The run's config is the whole resolved config, given at ``wandb.init``: the module's
        hyper-parameters (a part of it) are not logged again under other keys."""

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        if step is not None and step <= self.floor_step:
            return
        row = {k: v for k, v in metrics.items() if k != "trainer/global_step"}
        if step is not None:
            row["trainer/global_step"] = step
        if step is None:
            self.experiment.log(row)
        else:
            self.experiment.log(row, step=int(step))


class StepMetrics(Callback):
    """Every ``every`` optimiser steps: the training loss of the step and each parameter group's
    learning rate (W&B only: the CSV log keeps one row per epoch)."""

    def __init__(self, logger: CbmWandbLogger, every: int):
        self.logger, self.every = logger, max(1, every)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        done = trainer.global_step  # optimiser steps so far; Lightning logs this batch's metrics at done - 1
        if done % self.every or not trainer.is_global_zero:
            return
        step = done - 1
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        row: dict[str, float] = {}
        if loss is not None:
            row["train/loss_step"] = float(loss.detach())
        for i, opt in enumerate(trainer.optimizers):
            for j, group in enumerate(opt.param_groups):
                row[f"lr/opt{i}_group{j}"] = float(group["lr"])
        if row:
            self.logger.log_metrics(row, step=step)


def last_logged_step(run_dir: Path, run_id: str) -> int:
    """The highest step an earlier process of run ``run_id`` wrote to its offline log (``-1``: none
    readable; an online run's history is on the server and is not read here)."""
    from cbm.tracking.offline import last_step

    best = -1
    for f in sorted((run_dir / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb")):
        best = max(best, last_step(f))
    return best


def replay_csv(logger: CbmWandbLogger, csv_path: Path, after_step: int, up_to_epoch: int) -> int:
    """Log the CSV rows of epochs ``<= up_to_epoch`` with a step above ``after_step`` (what a killed
    run's W&B log lost before its checkpoint) to ``logger``; the number of rows logged."""
    if not csv_path.is_file():
        return 0
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    n = 0
    for r in rows:
        try:
            step, epoch = int(float(r.get("step") or "nan")), int(float(r.get("epoch") or "nan"))
        except ValueError:
            continue
        if step <= after_step or epoch > up_to_epoch:
            continue
        metrics = {k: float(v) for k, v in r.items() if k not in ("step",) and v not in (None, "")}
        metrics = {k: v for k, v in metrics.items() if not math.isnan(v)}
        logger.log_metrics(metrics, step=step)
        n += 1
    return n


def log_training_results(run: Any, metrics: dict[str, Any], wb: Any, run_dir: Path, data_cfg: Any, dm: Any = None) -> None:
    """The summary a W&B user queries (test metrics, ``oracle/k=<k>``, the best checkpoint) and the
    model / dataset artifacts asked for. (The oracle table's long format and plot are cbm-intervene's:
    a ``wandb.Table`` here would add a second to every training's start-up cost.)"""
    oracle = metrics.get("oracle_random") or {}
    summary: dict[str, Any] = {k: v for k, v in metrics.items() if k.startswith("test/")}
    summary.update({f"oracle/k={k}": v for k, v in oracle.items()})
    summary["checkpoint"] = metrics.get("checkpoint")
    run.summary.update(summary)
    if wb.log_model:
        ckpts = sorted((run_dir / "checkpoints").glob("*.ckpt"))
        wandb_run.log_files_artifact(run, f"model-{run.id}", "model", ckpts, {"run_dir": str(run_dir), **summary}, ["latest"])
    if wb.log_dataset:
        log_dataset_artifact(run, data_cfg, dm)


def log_dataset_artifact(run: Any, data_cfg: Any, dm: Any = None) -> None:
    """The dataset as an artifact named by its cache key: its generator config (which regenerates it
    bit for bit) and split sizes."""
    import json
    import tempfile

    from synthetic.cache import config_hash

    cfg = wandb_run.plain_config(data_cfg)
    key = config_hash(cfg)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "data_config.json"
        path.write_text(json.dumps(cfg, indent=1, sort_keys=True, default=str))
        wandb_run.log_files_artifact(run, f"dataset-{cfg.get('name', 'data')}-{key}", "dataset", [path], {"cache_key": key, **cfg})


def build_loggers(
    cfg: Any, run_dir: Path, run_name: str, *, job_type: str = "train", config: dict | None = None, resume: bool = False
) -> list[Logger]:
    """``cfg.logger.wandb`` (a :class:`cbm.config.train.WandbSettings`): CSV always; W&B when enabled (offline by default, so no account or network is needed).

    The W&B run (:mod:`cbm.tracking.wandb_run`) gets ``config`` (the whole resolved config), its
    group / job type / unique name; ``resume``: the run directory's recorded run continues, the
    steps its killed process already logged are not logged again.
    """
    loggers: list[Logger] = [CSVLogger(save_dir=str(run_dir), name="csv", version="")]
    wb = cfg.logger.wandb
    if wb.enabled is not False and wb.mode != "disabled":
        os.environ.setdefault("WANDB_SILENT", "true")
        record = wandb_run.read_record(run_dir) if resume else None
        kw = wandb_run.identity(wb, job_type=job_type, name=run_name, run_dir=run_dir, run_id=record and record["id"])
        kw.setdefault("id", wandb_run.new_id())  # known before W&B starts: the run directory records it at once
        if record:  # the resumed process is not the sweep job that started the run: keep its identity
            kw.update({k: record[k] for k in ("name", "group", "job_type") if record.get(k)})
        init = {k: v for k, v in kw.items() if k not in ("dir", "project", "name", "mode", "id")}
        wandb_logger = CbmWandbLogger(
            save_dir=str(run_dir), project=kw["project"], name=kw["name"], id=kw["id"], offline=wb.mode == "offline",
            config=config or {}, floor_step=last_logged_step(run_dir, record["id"]) if record else -1, **init,
        )  # fmt: skip
        wandb_logger.identity = kw
        loggers.append(wandb_logger)
    return loggers
