"""Shared fixtures: compose the real Hydra config with small, CPU-only overrides; and the checks
that no test leaks state into the next (signals, cwd, environment, torch's globals) or writes
outside its own ``tmp_path``."""

from __future__ import annotations

import os
import signal
from pathlib import Path

# One thread per test process: pytest-xdist runs one worker per core, and oversubscribed
# OpenMP threads slow small torch ops 10-25x on 2 cores. Subprocesses inherit this.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402

from cbm.core.common import CONF_DIR  # noqa: E402

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


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]):
    """Longest tests first, after every other plugin ordered the items (pytest-randomly's shuffle):
    a stable sort, so everything else keeps the random order."""
    result = yield
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(getattr(item, "originalname", item.name), len(rank)))
    return result


# ----------------------------------------------------------------------------- isolation
#: Signals whose handler a test could leave changed (SIGKILL / SIGSTOP cannot be handled).
HANDLED = [s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP) and s < signal.SIGRTMIN]


def process_state() -> dict[str, object]:
    """What one test must leave as it found it: every signal's handler, the main thread's signal
    mask, the working directory."""
    return {
        "handlers": {signal.Signals(s).name: signal.getsignal(s) for s in HANDLED},
        "mask": sorted(signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "cwd": os.getcwd(),
    }


@pytest.fixture(autouse=True)
def isolated():
    """Checked, not assumed: a test that changes a signal handler, the signal mask or the working
    directory fails (the next test would run in its state). The environment and torch's global
    switches are put back after every test: product code run in-process sets them legitimately
    (Lightning's ``seed_everything`` and ``deterministic`` write ``PL_GLOBAL_SEED``,
    ``CUBLAS_WORKSPACE_CONFIG`` and turn deterministic algorithms on)."""
    before = process_state()
    env = dict(os.environ)
    torch_state = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled(), torch.get_default_dtype()
    yield
    after = process_state()
    os.environ.clear()
    os.environ.update(env)
    torch.set_num_threads(torch_state[0])
    torch.use_deterministic_algorithms(torch_state[1])
    torch.set_default_dtype(torch_state[2])
    changed = {k: {n: (v, after[k][n]) for n, v in before[k].items() if after[k][n] != v} if k == "handlers" else (before[k], after[k])
               for k in before if before[k] != after[k]}  # fmt: skip
    if changed:
        for name, (handler, _) in changed.get("handlers", {}).items():
            signal.signal(signal.Signals[name], handler if handler is not None else signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, before["mask"])
        os.chdir(before["cwd"])
        pytest.fail(f"the test leaked process state into the next test: {changed}", pytrace=False)


#: Where a test may not leave files: the checkout it runs in (it writes under its own ``tmp_path``).
CHECKOUT = Path(__file__).resolve().parent.parent
#: Entries of the checkout that tools (not tests) make.
#: (``.benchmarks``: an empty storage folder the slow suite's third-party tools make in the working
#: directory, as pytest-benchmark names it; none of our code or tests names it.)
TOOL_OUTPUT = {".git", ".venv", ".pytest_cache", ".ruff_cache", "__pycache__", "cbm.egg-info", "site", ".cache", ".whl",
               ".benchmarks"}  # fmt: skip


def checkout_files() -> set[str]:
    """Every file and folder of the checkout, but what tools make there (the venv, caches)."""
    found: set[str] = set()
    for root, dirs, files in os.walk(CHECKOUT):
        dirs[:] = [d for d in dirs if d not in TOOL_OUTPUT and not d.endswith(".egg-info")]
        rel = Path(root).relative_to(CHECKOUT)
        found.update(str(rel / n) for n in (*dirs, *files) if not n.endswith((".pyc", ".pyo")))
    return found


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # the controller (or a run without xdist)
        session.config.stash[CHECKOUT_KEY] = checkout_files()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.config.stash.get(CHECKOUT_KEY, None)
    if before is None:
        return
    new = sorted(checkout_files() - before)
    if new:
        session.config.get_terminal_writer().line(f"tests wrote into the checkout (they must write under tmp_path): {new[:20]}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


CHECKOUT_KEY = pytest.StashKey[set]()
