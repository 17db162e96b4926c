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
