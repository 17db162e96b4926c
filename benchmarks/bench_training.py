"""Lightning training-step time vs a raw PyTorch loop on the same model and data.

Both train the default CBM (small CNN, robot 32 px images, true concepts) for the
same number of epochs over the same in-memory tensors; the ratio is Lightning / raw.
Run: python benchmarks/bench_training.py [--epochs 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import time
import warnings

import lightning as L
import torch

from cbm.models import build_model
from synthetic.datamodule import SyntheticDataModule
from synthetic.registry import data_config, data_info, load_data

warnings.filterwarnings("ignore")


def make(seed: int):
    cfg = data_config({"name": "robot"})
    data = load_data(cfg, ".cache/cbm")
    torch.manual_seed(seed)
    model = build_model({"name": "cbm", "training": "joint"}, data_info(data, cfg))
    return data, model


def raw_loop(model, dm: SyntheticDataModule, epochs: int) -> float:
    """Seconds of the epochs after the first (warm-up), plain PyTorch."""
    opt = model.configure_optimizers()
    model.train()
    loader = dm.train_dataloader()
    start = 0.0
    for epoch in range(epochs):
        if epoch == 1:
            start = time.perf_counter()
        for batch in loader:
            opt.zero_grad(set_to_none=True)
            loss = model.compute_losses(batch)[0]["loss"]
            loss.backward()
            opt.step()
    return time.perf_counter() - start


class EpochTimer(L.Callback):
    """Wall time of every training epoch but the first."""

    def __init__(self) -> None:
        self.total = 0.0

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self.t0 = time.perf_counter()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if trainer.current_epoch > 0:
            self.total += time.perf_counter() - self.t0


def lightning_loop(model, dm: SyntheticDataModule, epochs: int) -> float:
    """Seconds of the epochs after the first, through ``Trainer.fit`` (as cbm-train runs it,
    minus validation and checkpointing, which the raw loop does not do either)."""
    timer = EpochTimer()
    trainer = L.Trainer(
        max_epochs=epochs, accelerator="cpu", logger=False, enable_checkpointing=False, callbacks=[timer],
        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0, num_sanity_val_steps=0,
    )
    trainer.fit(model, datamodule=dm)
    return timer.total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    data, _ = make(0)
    dm = SyntheticDataModule(lambda: data, batch_size=256)
    dm.setup()
    n_steps = (args.epochs - 1) * len(dm.train_dataloader())
    raw, lit = [], []
    for r in range(args.repeats):  # interleave so drift hits both equally
        raw.append(raw_loop(make(r)[1], dm, args.epochs))
        lit.append(lightning_loop(make(r)[1], dm, args.epochs))
    t_raw, t_lit = min(raw), min(lit)
    print(f"torch threads: {torch.get_num_threads()}, timed steps per run: {n_steps} (first epoch excluded), best of {args.repeats}")
    print("| loop | s / run | ms / step |")
    print("|---|---|---|")
    print(f"| raw PyTorch | {t_raw:.2f} | {1000 * t_raw / n_steps:.1f} |")
    print(f"| Lightning | {t_lit:.2f} | {1000 * t_lit / n_steps:.1f} |")
    print(f"ratio Lightning / raw: {t_lit / t_raw:.3f}")


if __name__ == "__main__":
    main()
