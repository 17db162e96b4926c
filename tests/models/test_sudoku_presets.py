"""Board presets of every architecture (``conf/model/<arch>_sudoku.yaml``): each composes from the
real config, builds on the ``sudoku_cells`` reader, and (slow) a short run on a few hundred 18 px
handwritten boards gets the 27 checks well above chance and the label above the majority class.

``CBM_CACHE_DIR`` reuses generated boards between runs of the slow tests.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from cbm.core.paths import CONF_DIR
from cbm.experiments.train import validate
from cbm.models import build_model
from cbm.models.backbones_sudoku import SudokuCellReader
from synthetic.registry import data_info
from synthetic.sudoku import generate

CACHE = os.environ.get("CBM_CACHE_DIR", str(Path(__file__).resolve().parents[2] / ".cache" / "cbm"))
PRESETS = ["cbm_sudoku", "cem_sudoku", "probcbm_sudoku", "ecbm_sudoku", "blackbox_sudoku"]
#: A few hundred boards; valid and invalid boards are balanced, so the majority class is 50%.
SMALL = ["data.n_train=800", "data.n_val=100", "data.n_calib=0", "data.n_test=300", "data.n_mip_seeds=8"]


def compose_preset(tmp: Path, preset: str, *overrides: str, cache: str | Path | None = None):
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(
            "train",
            overrides=[
                f"model={preset}",
                "trainer=cpu_smoke",
                "logger=csv_only",
                f"output_dir={tmp}",
                f"cache_dir={cache or tmp / 'cache'}",
                *overrides,
            ],
        )


@pytest.mark.parametrize("data", ["sudoku", "sudoku_18px"])
@pytest.mark.parametrize("preset", PRESETS)
def test_preset_composes_and_builds_on_the_board_reader(tmp_path, preset, data):
    tiny = ["data.n_train=6", "data.n_val=2", "data.n_calib=0", "data.n_test=2", "data.n_mip_seeds=1"]
    cfg = compose_preset(tmp_path, preset, f"data={data}", *tiny)
    _, data_cfg, model_cfg = validate(cfg)
    assert model_cfg["backbone"]["name"] == "sudoku_cells" and model_cfg["backbone"]["aux_weight"] > 0
    model = build_model(model_cfg, data_info(generate(data_cfg), data_cfg))
    assert isinstance(model.backbone, SudokuCellReader)
    if preset != "blackbox_sudoku" and preset != "cbm_sudoku":
        assert model_cfg["concept_input"] != "features" and model.concept_input_dim() == 27


#: The short run: 800 boards, batch 32 (25 steps an epoch), per-preset epochs and floors
#: (task accuracy, concept accuracy, concept AUROC), set well below the values measured on one CPU
#: thread. The test boards are written in glyphs no training board uses (data.glyph_bank=per_split,
#: the default since the shared bank leaked test glyphs into training), so the reader meets unseen
#: handwriting: measured 2026-12-04 after that change. ProbCBM's class predictor (distances to class
#: prototypes) learns the AND of the 27 checks far more slowly than the MLP heads, hence its lower task floor.
SHORT = ["batch_size=32", "interventions.ks=[]", "data=sudoku_18px", *SMALL]
RUNS = {
    "cbm_sudoku": (8, 0.8, 0.9, 0.98),  # measured 86.0 / 93.7 / 99.39
    "cem_sudoku": (12, 0.85, 0.9, 0.96),  # 12 epochs: 89.0 / 96.5 / 98.9 (8 epochs gave 90.7 on one machine, 75.7 on another)
    "probcbm_sudoku": (20, 0.7, 0.92, 0.95),  # 79.7 / 96.2 / 97.8
    "ecbm_sudoku": (8, 0.84, 0.9, 0.92),  # 89.7 / 93.9 / 95.1
}
# blackbox_sudoku is only composed and built here: an MLP over the 729 digit log-probabilities does
# not find the AND of the 27 group checks in a short run (measured 47.7% after 8 epochs of 800
# boards; the concept models read the validity layer), so a short-run threshold would not hold.


@pytest.mark.slow
@pytest.mark.parametrize("preset", sorted(RUNS))
def test_short_run_on_18px_boards_learns_the_checks_and_the_label(tmp_path, preset, one_thread):
    from cbm.experiments.train import run

    epochs, task, concept, auroc = RUNS[preset]
    m = run(compose_preset(tmp_path, preset, *SHORT, f"trainer.max_epochs={epochs}", cache=CACHE))
    assert m["test/task_acc"] >= task, m  # majority class: 0.50
    if concept is not None:
        # 86% of the checks hold, so accuracy alone is weak: the ranking (AUROC) is asserted too
        assert m["test/concept_acc"] >= concept and m["test/concept_auroc"] >= auroc, m
