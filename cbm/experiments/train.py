"""``cbm-train``: train one model on one synthetic dataset, test it, report oracle interventions.

Writes into the Hydra run directory: ``checkpoints/best.ckpt``, ``csv/metrics.csv``,
``wandb/`` (offline), ``config.yaml`` and ``metrics.json`` (final test metrics).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import hydra
import lightning as L
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from cbm.config import to_dataclass
from cbm.config.train import TrainConfig
from cbm.config.validate import as_dict
from cbm.experiments.common import CONF_DIR, clean_errors, markdown_table, write_json_atomic
from cbm.interventions.base import RandomPolicy
from cbm.interventions.evaluate import intervention_accuracy, resolve_ks
from cbm.models import build_model, model_class
from cbm.training.trainer import build_trainer, finish_wandb
from synthetic.datamodule import SyntheticDataModule
from synthetic.registry import data_config, data_info, load_data

log = logging.getLogger("cbm.train")


def validate(cfg: DictConfig) -> tuple[TrainConfig, Any, dict]:
    """Typed train / data / model configs; raises ConfigError with one clear line."""
    raw = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(raw, dict)
    data_raw, model_raw = raw.pop("data"), raw.pop("model")
    train = to_dataclass(TrainConfig, raw, "config")
    data = data_config(data_raw)
    name = model_raw.get("name", "cbm")
    model_cfg = as_dict(to_dataclass(model_class(name).config_cls, model_raw, "model"))
    return train, data, model_cfg


def run(cfg: DictConfig) -> dict[str, Any]:
    """Train, test and evaluate oracle interventions; return the metrics written to metrics.json.

    Under a multi-process strategy every rank trains and tests on its shard; only rank zero
    writes ``config.yaml`` / ``metrics.json``, runs the oracle table and prints (the other
    ranks return ``{}``).
    """
    train_cfg, data_cfg, model_cfg = validate(cfg)
    run_dir = Path(train_cfg.output_dir)
    zero = rank_zero_only.rank == 0
    if zero:
        run_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(cfg, run_dir / "config.yaml", resolve=True)
    L.seed_everything(train_cfg.seed, workers=True, verbose=False)

    data = load_data(data_cfg, train_cfg.cache_dir)
    t = train_cfg.trainer
    dm = SyntheticDataModule(
        lambda: data, train_cfg.batch_size, train_cfg.eval_batch_size, seed=train_cfg.seed, device_resident=t.data_on_device
    )
    model = build_model(model_cfg, data_info(data, data_cfg), as_dict(data_cfg))
    if t.compile:
        model.backbone.compile()
    run_name = f"{data_cfg.name}-{model_cfg['name']}-s{train_cfg.seed}"
    trainer = build_trainer(train_cfg, run_dir, run_name)
    timing: dict[str, float] = {}
    try:
        start = time.perf_counter()
        trainer.fit(model, datamodule=dm)
        timing["fit_s"] = time.perf_counter() - start
        ckpt = trainer.checkpoint_callback.best_model_path or None
        start = time.perf_counter()
        test = trainer.test(model, datamodule=dm, ckpt_path=ckpt, verbose=False)[0]
        timing["test_s"] = time.perf_counter() - start
        if not trainer.is_global_zero:
            return {}
        metrics: dict[str, Any] = {k: float(v) for k, v in test.items()}
        if model.has_concepts and train_cfg.interventions.ks:
            start = time.perf_counter()
            device = trainer.strategy.root_device  # the strategy's teardown moved the model to the CPU
            model.to(device).eval()
            if t.data_on_device:
                dm.to_device(device)
            ks = resolve_ks(train_cfg.interventions.ks, model.n_concepts)
            seed = train_cfg.interventions.seed
            accs = intervention_accuracy(model, dm.loader("test"), ks, lambda: RandomPolicy(seed))
            metrics["oracle_random"] = {str(k): v for k, v in accs.items()}
            timing["interventions_s"] = time.perf_counter() - start
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
        )
        write_json_atomic(run_dir / "metrics.json", metrics)
        write_json_atomic(run_dir / "timing.json", {k: round(v, 3) for k, v in timing.items()})
    finally:
        finish_wandb()
    print(results_table([metrics]))
    return metrics


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


@hydra.main(config_path=CONF_DIR, config_name="train", version_base="1.3")
@clean_errors("cbm-train")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
