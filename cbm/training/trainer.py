"""Build the Lightning ``Trainer`` (loggers, checkpointing, early stopping) from typed config."""

from __future__ import annotations

import os
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, Logger

from cbm.config.train import TrainConfig

#: Checkpoint / early-stopping metric: the validation task loss keeps improving after the
#: accuracy saturates (ties in accuracy would keep an under-trained early epoch).
MONITOR = "val/task_loss"


def build_loggers(cfg: TrainConfig, run_dir: Path, run_name: str) -> list[Logger]:
    """CSV always; W&B when enabled (offline by default, so no account or network is needed)."""
    loggers: list[Logger] = [CSVLogger(save_dir=str(run_dir), name="csv", version="")]
    wb = cfg.logger.wandb
    if wb.enabled and wb.mode != "disabled":
        from lightning.pytorch.loggers import WandbLogger

        os.environ.setdefault("WANDB_SILENT", "true")
        loggers.append(
            WandbLogger(
                save_dir=str(run_dir),
                project=wb.project,
                entity=wb.entity,
                name=wb.name or run_name,
                tags=list(wb.tags),
                offline=wb.mode == "offline",
            )
        )
    return loggers


def build_trainer(cfg: TrainConfig, run_dir: Path, run_name: str, extra_callbacks: list[Callback] | None = None) -> L.Trainer:
    t = cfg.trainer
    callbacks: list[Callback] = [
        ModelCheckpoint(dirpath=str(run_dir / "checkpoints"), filename="best", monitor=MONITOR, mode="min", save_last=True)
    ]
    if t.early_stopping_patience > 0:
        callbacks.append(EarlyStopping(monitor=MONITOR, mode="min", patience=t.early_stopping_patience))
    callbacks += extra_callbacks or []
    return L.Trainer(
        max_epochs=t.max_epochs,
        accelerator=t.accelerator,
        devices=t.devices,
        strategy=t.strategy,
        precision=t.precision,
        deterministic=t.deterministic,
        logger=build_loggers(cfg, run_dir, run_name),
        callbacks=callbacks,
        log_every_n_steps=t.log_every_n_steps,
        enable_progress_bar=t.enable_progress_bar,
        gradient_clip_val=t.gradient_clip_val or None,
        default_root_dir=str(run_dir),
        enable_model_summary=False,
    )


def finish_wandb() -> None:
    """Close the W&B run so the next Hydra multirun job starts its own."""
    import sys

    if "wandb" in sys.modules:
        import wandb

        if wandb.run is not None:
            wandb.finish()
