"""Acceptance: a CBM on the easy (50 px, printed) Sudoku boards, calibrated with LTT on the
calibration split, reaches >= 95% selective accuracy on the test split.

Slow (trains the ``cbm_sudoku`` preset on rendered boards, ~1-3 min on a CPU); run with
``pytest -m slow``. Splits are smaller than the ``sudoku_50px`` defaults (5,500 boards of
453x453x3 are 3.4 GB); ``CBM_CACHE_DIR`` reuses generated boards between runs. The trained
model's concept and task accuracy are checked here too (one training, two acceptance checks).
"""

import os
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from cbm.core.common import CONF_DIR
from cbm.experiments.automate import AutomateConfig, automate
from cbm.experiments.train import run as train_run
from cbm.training.checkpoint import load_run

pytestmark = pytest.mark.slow

CACHE = os.environ.get("CBM_CACHE_DIR", str(Path(__file__).resolve().parents[2] / ".cache" / "cbm"))
TARGET = 0.95
N_CAL, N_TEST = 600, 1000


def test_calibrated_sudoku_50px_cbm_reaches_the_target_on_test(tmp_path):
    run_dir = tmp_path / "train"
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[
                "data=sudoku_50px",
                "data.n_train=600",
                "data.n_val=200",
                f"data.n_calib={N_CAL}",
                f"data.n_test={N_TEST}",
                "model=cbm_sudoku",  # joint CBM: per-cell digit reader + group-validity layer
                "trainer=cpu_smoke",
                "trainer.accelerator=auto",
                "trainer.max_epochs=8",
                "batch_size=32",
                "logger=csv_only",
                "interventions.ks=[]",
                f"output_dir={run_dir}",
                f"cache_dir={CACHE}",
            ],
        )
    metrics = train_run(cfg)
    assert metrics["test/concept_acc"] >= 0.99, metrics  # the cell reader reads the 27 checks
    assert metrics["test/task_acc"] >= 0.97, metrics

    model, dm, _ = load_run(run_dir, CACHE)
    acfg = AutomateConfig(
        checkpoint=str(run_dir),
        method="ltt",
        target_accuracy=TARGET,
        delta=0.1,
        ks=[0, 1, 3],
        cache_dir=CACHE,
    )
    report = automate(model, dm, acfg)
    cal = report["calibration"]
    assert cal["guaranteed"] and cal["bound"] >= TARGET and cal["n_cal"] == N_CAL
    by_k = {r["k"]: r for r in report["results"]}
    assert by_k[0]["n"] == N_TEST
    assert by_k[0]["selective_acc"] >= TARGET, by_k[0]  # the calibrated threshold holds on test data
    assert by_k[0]["coverage"] > 0.5, by_k[0]  # and still automates most boards
    for k in (1, 3):  # oracle rescues are re-scored with the same tau
        assert by_k[k]["coverage"] >= by_k[0]["coverage"] and by_k[k]["selective_acc"] >= TARGET, by_k[k]
