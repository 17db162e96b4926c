"""Multi-process training through the real entry point: ``cbm-train trainer=ddp`` with two CPU
processes (gloo) against one process, batch sharding, and the cluster / GPU presets composed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from cbm.core.common import CONF_DIR
from cbm.core.validation import ConfigError
from synthetic.datamodule import BatchPlan

SMALL = [
    "data.modality=tabular", "data.n_train=1500", "data.n_calib=0", "data.n_test=2000", "trainer.max_epochs=8",
    "logger=csv_only", "trainer.enable_progress_bar=false",
]  # fmt: skip


def cbm_train(tmp_path: Path, name: str, *overrides: str) -> dict:
    run_dir = tmp_path / name
    exe = Path(sys.executable).parent / "cbm-train"
    res = subprocess.run(
        [str(exe), *SMALL, f"cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={run_dir}", *overrides],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads((run_dir / "metrics.json").read_text())


@pytest.mark.slow  # two DDP ranks and a one-process reference: about a minute on 2 cores
def test_ddp_two_processes_match_one_process(tmp_path):
    """Each global batch is split between the ranks and DDP averages their gradients, so two processes
    train the same model as one (CBM on tabular robots has no random draws): the test metrics agree
    to float32 reduction-order noise (losses 1e-4 relative, accuracies within 2 of 2,000 examples)."""
    one = cbm_train(tmp_path, "one")
    two = cbm_train(tmp_path, "two", "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2")
    assert one["world_size"] == 1 and two["world_size"] == 2
    assert one["test/task_acc"] > 0.9  # a trained model, not the majority class
    for key in ("test/task_acc", "test/concept_acc", "test/concept_auroc"):
        assert abs(one[key] - two[key]) <= 2 / 2000, key
    assert two["test/task_loss"] == pytest.approx(one["test/task_loss"], rel=1e-4)
    assert two["oracle_random"] == pytest.approx(one["oracle_random"], abs=2 / 2000)
    # only rank zero wrote results and checkpoints; rank one left its log only
    assert sorted(p.name for p in (tmp_path / "two" / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]
    assert len(list((tmp_path / "two").rglob("metrics.json"))) == 1


@pytest.mark.parametrize("n", [203, 193])  # 193 = 12 * 16 + 1: the last global batch is dropped when training
@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("shuffle", [True, False])
def test_batch_plan_shards_cover_each_global_batch(n, world, shuffle):
    bs = 16
    plans = [BatchPlan(n, bs, shuffle, seed=5, rank=r, world_size=world) for r in range(world)]
    for p in plans:
        p.set_epoch(3)
    steps = [list(p.batches(torch.device("cpu"))) for p in plans]
    if shuffle:  # training: same number of steps on every rank; each step's shards form one global batch
        assert len({len(s) for s in steps}) == 1
        order = plans[0].order()
        for b in range(len(steps[0])):
            union = torch.cat([steps[r][b] for r in range(world)]).sort().values
            assert torch.equal(union, order[b * bs : (b + 1) * bs].sort().values)
    rows = torch.cat([torch.cat(s) for s in steps]).sort().values
    expected = torch.arange(n) if not shuffle or (n % bs) >= world else plans[0].order()[: n - n % bs].sort().values
    assert torch.equal(rows, expected)  # evaluation never drops a row


def test_batch_order_is_a_function_of_seed_and_epoch():
    a, b = BatchPlan(100, 10, True, seed=1), BatchPlan(100, 10, True, seed=1)
    a.set_epoch(4)
    torch.rand(1000)  # the global RNG does not matter
    b.set_epoch(4)
    assert torch.equal(a.order(), b.order())
    b.set_epoch(5)
    assert not torch.equal(a.order(), b.order())
    assert not torch.equal(a.order(), BatchPlan(100, 10, True, seed=2, rank=0).order())


def compose_cfg(*overrides: str, hydra: bool = False):
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        extra = [] if hydra else ["output_dir=."]
        return compose(config_name="train", overrides=[*extra, *overrides], return_hydra_config=hydra)


def test_presets_compose_and_validate():
    from cbm.experiments.train import validate

    gpu = compose_cfg("trainer=gpu")
    assert gpu.trainer.accelerator == "gpu" and gpu.eval_batch_size == 8192 and gpu.trainer.deterministic
    ddp = compose_cfg("trainer=ddp", "trainer.devices=4", "trainer.num_nodes=2")
    assert (ddp.trainer.strategy, ddp.trainer.devices, ddp.trainer.num_nodes, ddp.trainer.sync_batchnorm) == ("ddp", 4, 2, True)
    validate(ddp)
    if torch.cuda.is_available():
        validate(gpu)
    else:  # one line, before any work
        with pytest.raises(ConfigError, match="no CUDA GPU is available"):
            validate(gpu)


def test_slurm_launcher_composes():
    cfg = compose_cfg("hydra/launcher=slurm", "hydra.launcher.partition=gpu", "hydra.launcher.gpus_per_node=4", hydra=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("submitit_launcher.SlurmLauncher")
    assert (launcher.partition, launcher.gpus_per_node, launcher.tasks_per_node) == ("gpu", 4, 1)


def test_joblib_launcher_runs_two_jobs_by_default():
    launcher = compose_cfg("hydra/launcher=parallel", hydra=True).hydra.launcher
    assert launcher._target_.endswith("joblib_launcher.JoblibLauncher") and launcher.n_jobs == 2


@pytest.mark.slow
def test_joblib_sweep_shares_one_sweep_dir_and_reports_the_swept_setting(tmp_path):
    """Parallel local sweep: both jobs land in one sweep directory (its name is resolved once, not
    per worker process) and the table has a column for the swept setting."""
    import subprocess
    import sys

    args = ["--multirun", "hydra/launcher=parallel", "data.modality=tabular", "data.n_train=300", "data.n_test=100",
            "data.n_calib=0", "trainer=cpu_smoke", "logger=csv_only", "interventions.ks=[]", "data.concept_noise=0.0,0.3",
            f"cache_dir={tmp_path / 'cache'}"]  # fmt: skip
    proc = subprocess.run([sys.executable, "-m", "cbm.experiments.train", *args], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "deprecated" not in proc.stderr  # the launcher config extends the plugin's schema, never shadows it
    (sweep,) = (tmp_path / "multirun").iterdir()
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0-robot-cbm", "1-robot-cbm"]
    table = (sweep / "results.md").read_text().splitlines()
    assert "| data.concept_noise |" in table[0] and "| 0.0 |" in table[2] and "| 0.3 |" in table[3]


@pytest.mark.slow
def test_optuna_preset_tunes_a_concept_model_on_validation_accuracy(tmp_path):
    """``+tune=concept_model`` (hydra-optuna-sweeper): each trial returns the kept checkpoint's
    validation accuracy, the study's best is the best trial's, the sampled values stay in the preset's
    ranges, and neither Hydra nor Optuna warns."""
    import subprocess
    import sys

    import yaml

    sweep = tmp_path / "tune"
    args = ["--multirun", "+tune=concept_model", "hydra.sweeper.n_trials=3", "data.modality=tabular", "data.n_train=300",
            "data.n_test=100", "data.n_calib=0", "trainer=cpu_smoke", "logger=csv_only", "interventions.ks=[]",
            f"hydra.sweep.dir={sweep}", f"cache_dir={tmp_path / 'cache'}"]  # fmt: skip
    proc = subprocess.run([sys.executable, "-m", "cbm.experiments.train", *args], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "warn" not in proc.stderr.lower(), proc.stderr[-2000:]
    trials = sorted(d for d in sweep.iterdir() if d.is_dir())
    assert len(trials) == 3
    values = [json.loads((d / "metrics.json").read_text())["val/task_acc"] for d in trials]
    best = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert best["best_value"] == pytest.approx(max(values))
    for d in trials:
        cfg = yaml.safe_load((d / "config.yaml").read_text())
        assert 0.0003 <= cfg["model"]["optim"]["lr"] <= 0.01 and 0.1 <= cfg["model"]["concept_loss_weight"] <= 10.0
        assert cfg["objective"] == "val/task_acc"
