"""Shared fixtures: compose the real Hydra config with small, CPU-only overrides."""

from __future__ import annotations

import os

# One thread per test process: pytest-xdist runs one worker per core, and oversubscribed
# OpenMP threads slow small torch ops 10-25x on 2 cores. Subprocesses inherit this.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402

from cbm.experiments.common import CONF_DIR  # noqa: E402

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory):
    """One dataset cache for the whole session (generation is deterministic)."""
    return tmp_path_factory.mktemp("cbm-cache")


@pytest.fixture
def compose_train(tmp_path, shared_cache):
    """``compose_train(*overrides)`` -> the composed ``train`` config writing into ``tmp_path``."""

    def _compose(*overrides: str, config_name: str = "train"):
        base = [f"output_dir={tmp_path}", f"cache_dir={shared_cache}", "trainer=cpu_smoke", "logger=csv_only"]
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            return compose(config_name=config_name, overrides=[*base, *overrides])

    return _compose


@pytest.fixture
def one_thread():
    """Tiny models gain nothing from intra-op threads; on a busy machine the OpenMP barriers dominate."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


#: The longest tests (``pytest -m slow --durations=30`` on 2 workers: 35-130 s each), started first so
#: the run never ends on one worker alone with a two-minute test (longest-processing-time first).
LONGEST_FIRST = (
    "test_smoke_preset_makes_its_table_and_a_rerun_skips_every_cell",
    "test_an_independent_cbm_resumes_with_its_solved_head_and_an_older_run_with_its_gradient_head",
    "test_calibrated_sudoku_50px_cbm_reaches_the_target_on_test",
    "test_short_run_on_18px_boards_learns_the_checks_and_the_label",
    "test_cbm_on_50px_printed_boards_reaches_the_stated_accuracies",
    "test_diagnostics_of_a_decision_support_smoke_experiment",
    "test_eight_parallel_intervene_runs_keep_eight_result_directories",
    "test_diagnostics_of_an_alignment_smoke_experiment",
    "test_joblib_sweep_shares_one_sweep_dir_and_reports_the_swept_setting",
    "test_kill_9_of_the_parent_leaves_no_orphan_and_a_rerun_finishes",
    "test_image_cbm_demo_config",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest tests first (a stable sort: everything else keeps its order)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(getattr(item, "originalname", item.name), len(rank)))
