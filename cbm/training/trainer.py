"""Build the Lightning ``Trainer`` (loggers, checkpointing, early stopping) from typed config."""

from __future__ import annotations

import os
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, Logger

from cbm.config.train import TrainConfig
from cbm.training.checkpoint import AtomicCheckpointIO
from synthetic.datamodule import stream_seed

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


def build_trainer(cfg: TrainConfig, run_dir: Path, run_name: str, extra_callbacks: list[Callback] | None = None) -> L.Trainer:
    t = cfg.trainer
    callbacks: list[Callback] = [
        ModelCheckpoint(dirpath=str(run_dir / "checkpoints"), filename="best", monitor=MONITOR, mode="min", save_last=True)
    ]
    if t.early_stopping_patience > 0:
        callbacks.append(EarlyStopping(monitor=MONITOR, mode="min", patience=t.early_stopping_patience))
    callbacks += [EpochSeeding(cfg.seed), *(extra_callbacks or [])]
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
