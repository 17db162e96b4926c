"""Build the Lightning ``Trainer`` (loggers, checkpointing, early stopping) from typed config."""

from __future__ import annotations

import logging
import time
import warnings
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint

from cbm.config.train import CHECKPOINT_MONITORS, TrainConfig
from cbm.core.progress import progress_bar_wanted
from cbm.tracking.lightning import build_loggers  # noqa: F401 (its callers import it from here too)
from cbm.training.checkpoint import AtomicCheckpointIO
from synthetic.datamodule import stream_seed

log = logging.getLogger("cbm.train")


def wandb_logger_of(trainer: L.Trainer):
    """The trainer's :class:`~cbm.training.wandb_logging.CbmWandbLogger`, or ``None``."""
    from cbm.tracking.lightning import CbmWandbLogger

    return next((lg for lg in trainer.loggers if isinstance(lg, CbmWandbLogger)), None)


#: Stream key of the model's random numbers (the data order uses ``(epoch,)`` alone).
MODEL_STREAM = 1


class EpochSeeding(Callback):
    """Reseed the global RNG at every epoch start from ``(seed, epoch, rank)``.

    Everything random in training (dropout, CEM's RandInt masks, ProbCBM's samples) then depends
    only on the seed and the epoch, so a run resumed from an epoch-end checkpoint continues with
    exactly the random numbers of an uninterrupted run.
    """

    def __init__(self, seed: int):
        self.seed = seed

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        torch.manual_seed(stream_seed(self.seed, trainer.current_epoch, trainer.global_rank, MODEL_STREAM))


class _DropLitLoggerTip(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "litlogger" not in record.getMessage()


def quiet_lightning() -> None:
    """Keep the messages that tell the user something; drop Lightning's advertising and the
    warnings that do not apply here (in-memory data needs no workers; short epochs log every epoch)."""
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logging.getLogger(name).addFilter(_DropLitLoggerTip())
    if logging.getLogger().handlers:  # the app's logging is set up: Lightning's lines go there, once
        for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
            logger = logging.getLogger(name)
            for handler in list(logger.handlers):
                logger.removeHandler(handler)
            logger.propagate = True
    warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
    warnings.filterwarnings("ignore", message=".*log_every_n_steps.*")
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=".*Experiment logs directory .* exists and is not empty.*")


class EpochLine(Callback):
    """One log line per epoch (the progress bar's replacement when output is not a terminal)."""

    def __init__(self) -> None:
        self.start = 0.0

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.start = time.perf_counter()

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        m = trainer.callback_metrics
        parts = [f"{k} {float(m[k]):.4f}" for k in ("train/loss", "val/task_loss", "val/task_acc", "val/concept_acc", "val/concept_f1") if k in m]
        log.info("epoch %d/%d: %s (%.1f s)", trainer.current_epoch + 1, trainer.max_epochs, ", ".join(parts),
                 time.perf_counter() - self.start)  # fmt: skip


def _limit(value: float | int) -> float | int | None:
    """Lightning's batch limit: ``None`` for the whole split (1.0; an int 1 means one batch)."""
    return None if isinstance(value, float) and value == 1.0 else value


def build_trainer(
    cfg: TrainConfig, run_dir: Path, run_name: str, extra_callbacks: list[Callback] | None = None, *,
    config: dict | None = None, resume: bool = False,
) -> L.Trainer:  # fmt: skip
    t = cfg.trainer
    loggers = build_loggers(cfg, run_dir, run_name, config=config, resume=resume)
    monitor, mode = CHECKPOINT_MONITORS[t.checkpoint_monitor]
    callbacks: list[Callback] = [
        ModelCheckpoint(dirpath=str(run_dir / "checkpoints"), filename="best", monitor=monitor, mode=mode, save_last=True)
    ]
    if t.early_stopping_patience > 0:
        callbacks.append(
            EarlyStopping(monitor=monitor, mode=mode, patience=t.early_stopping_patience, min_delta=t.early_stopping_min_delta)
        )
    bar = progress_bar_wanted(t.enable_progress_bar)
    callbacks += [EpochSeeding(cfg.seed), *([] if bar else [EpochLine()]), *(extra_callbacks or [])]
    if len(loggers) > 1:  # W&B: the training loss and learning rates every log_every_n_steps
        from cbm.tracking.lightning import StepMetrics

        callbacks.append(StepMetrics(loggers[-1], t.log_every_n_steps))
    quiet_lightning()
    return L.Trainer(
        max_epochs=t.max_epochs,
        accelerator=t.accelerator,
        devices=t.devices,
        num_nodes=t.num_nodes,
        strategy=t.strategy,
        sync_batchnorm=t.sync_batchnorm,
        use_distributed_sampler=False,  # the datamodule shards its own batches (synthetic.datamodule)
        plugins=[AtomicCheckpointIO()],
        precision=t.precision,
        deterministic=t.deterministic,
        logger=loggers,
        callbacks=callbacks,
        log_every_n_steps=t.log_every_n_steps,
        enable_progress_bar=bar,
        gradient_clip_val=t.gradient_clip_val or None,
        limit_train_batches=_limit(t.limit_train_batches),
        limit_val_batches=_limit(t.limit_val_batches),
        default_root_dir=str(run_dir),
        enable_model_summary=False,
    )


def finish_wandb(exit_code: int = 0) -> None:
    """Close the W&B run with the process's exit code (a failed run is marked failed), so the next
    Hydra multirun job starts its own."""
    from cbm.tracking.wandb_run import finish

    finish(exit_code)
