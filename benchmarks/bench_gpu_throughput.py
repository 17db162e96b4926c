"""Training throughput (examples/s) and accelerator utilisation per architecture, fp32 vs bf16-mixed.

Settings: ``default`` (robot 32 px, the small CNN, batch 64, 3,040 training robots) and ``gpu``
(robot 128 px, ``backbone=resnet18``, 20,000 training robots, batch 256). Each run is a Lightning
``fit`` over the device-resident datamodule (no validation, no logger, no checkpoints); the
first epoch is warm-up and the rate is measured over the following ones. On a GPU the utilisation
is sampled from ``nvidia-smi`` every 100 ms during the measured epochs: the target is >= 80% in
steady state (the data never leave the GPU, so a step never waits on a host copy).

    python benchmarks/bench_gpu_throughput.py                       # CPU: default setting, fp32 + bf16
    python benchmarks/bench_gpu_throughput.py --settings default,gpu --device gpu
"""

from __future__ import annotations

import argparse
import logging
import statistics
import subprocess
import time
import warnings

import lightning as L
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from cbm.core.common import CONF_DIR
from cbm.models import build_model
from synthetic.datamodule import SyntheticDataModule
from synthetic.registry import data_config, data_info, load_data

warnings.filterwarnings("ignore")
for _name in ("lightning.pytorch", "lightning.fabric"):
    logging.getLogger(_name).setLevel(logging.ERROR)
ARCHS = ["blackbox", "cbm", "cem", "probcbm", "ecbm"]
SETTINGS = {
    "default": {"data": {}, "backbone": {}, "batch_size": 64},
    "gpu": {"data": {"image_size": 128, "n_train": 25000, "n_calib": 0, "n_test": 256}, "backbone": {"name": "resnet18"}, "batch_size": 256},
}


class EpochClock(L.Callback):
    """Wall time of each training epoch (synchronised with the device)."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def _sync(self, module: L.LightningModule) -> None:
        if module.device.type == "cuda":
            torch.cuda.synchronize(module.device)

    def on_train_epoch_start(self, trainer, module) -> None:
        self._sync(module)
        self.t0 = time.perf_counter()

    def on_train_epoch_end(self, trainer, module) -> None:
        self._sync(module)
        self.times.append(time.perf_counter() - self.t0)


class UtilisationSampler:
    """``nvidia-smi`` utilisation samples (%) while active; empty without a GPU."""

    def __enter__(self) -> UtilisationSampler:
        self.proc = None
        self.samples: list[float] = []
        if torch.cuda.is_available():
            cmd = ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "-lms", "100", "-i", "0"]
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            self.proc.terminate()
            out, _ = self.proc.communicate()
            self.samples = [float(v) for v in out.split() if v.strip().replace(".", "", 1).isdigit()]


def model_config(arch: str, backbone: dict) -> dict:
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("train", overrides=[f"model={arch}", "output_dir=."])
    model = OmegaConf.to_container(cfg.model, resolve=True)
    model["backbone"].update(backbone)
    return model


def measure(arch: str, setting: str, precision: str, accelerator: str, epochs: int, max_batches: int | None) -> dict:
    s = SETTINGS[setting]
    dcfg = data_config({"name": "robot", **s["data"]})
    data = load_data(dcfg, ".cache/cbm")
    torch.manual_seed(0)
    model = build_model(model_config(arch, s["backbone"]), data_info(data, dcfg))
    dm = SyntheticDataModule(lambda: data, batch_size=s["batch_size"])
    clock = EpochClock()
    trainer = L.Trainer(
        max_epochs=epochs, accelerator=accelerator, devices=1, precision=precision, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
        limit_train_batches=max_batches, callbacks=[clock], deterministic=True, use_distributed_sampler=False,
    )  # fmt: skip
    with UtilisationSampler() as util:
        trainer.fit(model, dm)
    steps = min(len(dm.train_dataloader()), max_batches or 10**9)
    rows = min(dm.split("train").n, steps * s["batch_size"])
    steady = clock.times[1:] or clock.times
    # utilisation samples cover all epochs: drop the warm-up epoch's share
    keep = util.samples[int(len(util.samples) * clock.times[0] / max(sum(clock.times), 1e-9)) :] if util.samples else []
    return {
        "rate": rows / statistics.median(steady),
        "spread": (max(steady) - min(steady)) / statistics.median(steady) if len(steady) > 1 else 0.0,
        "util": statistics.fmean(keep) if keep else None,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--archs", default=",".join(ARCHS))
    p.add_argument("--settings", default="default")
    p.add_argument("--precisions", default="32-true,bf16-mixed")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "gpu"])
    p.add_argument("--epochs", type=int, default=4, help="the first is warm-up")
    p.add_argument("--max-batches", type=int, default=None, help="cap the batches per epoch (quick CPU runs)")
    p.add_argument("--threads", type=int, default=None)
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    accelerator = "gpu" if a.device == "gpu" or (a.device == "auto" and torch.cuda.is_available()) else "cpu"
    where = torch.cuda.get_device_name(0) if accelerator == "gpu" else f"CPU ({torch.get_num_threads()} threads)"
    print(f"training throughput on {where}; examples/s, median of {a.epochs - 1} steady epochs (spread = range/median)\n")
    precisions = a.precisions.split(",")
    head = ["setting", "arch", *[f"{p} ex/s (spread)" for p in precisions], "bf16 / fp32", "GPU util % (fp32, bf16)"]
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for setting in a.settings.split(","):
        for arch in a.archs.split(","):
            res = {p: measure(arch, setting, p, accelerator, a.epochs, a.max_batches) for p in precisions}
            cells = [f"{res[p]['rate']:,.0f} ({100 * res[p]['spread']:.0f}%)" for p in precisions]
            ratio = res["bf16-mixed"]["rate"] / res["32-true"]["rate"] if {"bf16-mixed", "32-true"} <= set(res) else None
            utils = [res[p]["util"] for p in precisions]
            util = ", ".join("n/a" if u is None else f"{u:.0f}" for u in utils)
            print(f"| {setting} | {arch} | {' | '.join(cells)} | {'' if ratio is None else f'{ratio:.2f}x'} | {util} |", flush=True)


if __name__ == "__main__":
    main()
