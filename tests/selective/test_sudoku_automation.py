"""Acceptance: a CBM on the easy (50 px, printed) Sudoku boards, calibrated with LTT on the
calibration split, reaches >= 95% selective accuracy on the test split.

Slow (trains a model on rendered boards); run with ``pytest -m slow``. ``CBM_CACHE_DIR``
reuses generated boards between runs.
"""

import os
from pathlib import Path

import pytest

pytest.importorskip("synthetic.sudoku")
pytest.importorskip("cbm.models.backbones_sudoku")

from hydra import compose, initialize_config_dir  # noqa: E402

from cbm.experiments.automate import AutomateConfig, automate  # noqa: E402
from cbm.experiments.common import CONF_DIR  # noqa: E402
from cbm.experiments.train import run as train_run  # noqa: E402
from cbm.training.checkpoint import load_run  # noqa: E402

pytestmark = pytest.mark.slow

CACHE = os.environ.get("CBM_CACHE_DIR", str(Path(__file__).resolve().parents[2] / ".cache" / "cbm"))
TARGET = 0.95


def test_calibrated_sudoku_50px_cbm_reaches_the_target_on_test(tmp_path):
    run_dir = tmp_path / "train"
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[
                "data=sudoku_50px",
                "model=cbm",
                "model.training=joint",
                "model.backbone.name=sudoku_cells",
                "trainer=cpu_smoke",
                "trainer.accelerator=auto",
                "trainer.max_epochs=10",
                "logger=csv_only",
                "interventions.ks=[0]",
                f"output_dir={run_dir}",
                f"cache_dir={CACHE}",
            ],
        )
    train_run(cfg)

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
    assert cal["guaranteed"] and cal["bound"] >= TARGET and cal["n_cal"] == 1000
    by_k = {r["k"]: r for r in report["results"]}
    assert by_k[0]["n"] == 2000
    assert by_k[0]["selective_acc"] >= TARGET, by_k[0]  # the calibrated threshold holds on test data
    assert by_k[0]["coverage"] > 0.5, by_k[0]  # and still automates most boards
    for k in (1, 3):  # oracle rescues are re-scored with the same tau
        assert by_k[k]["coverage"] >= by_k[0]["coverage"] and by_k[k]["selective_acc"] >= TARGET, by_k[k]
