"""Kill and resume: ``cbm-train`` killed with SIGKILL at random steps, or while writing a checkpoint,
then ``cbm-train resume=<run dir>``, ends with exactly the metrics of an uninterrupted run.

Faults are injected from a ``sitecustomize`` module on the child's ``PYTHONPATH`` (the product code
has no test hooks): it counts optimiser steps, or ``torch.save`` calls, and kills its own process.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from forked import run_forked

from cbm.core import forkserver

#: CEM on tabular robots: RandInt draws random masks every step, so the RNG state matters.
ARGS = [
    "model=cem", "data.modality=tabular", "data.n_train=1500", "data.n_calib=0", "data.n_test=1000",
    "trainer.max_epochs=5", "logger=csv_only", "trainer.enable_progress_bar=false", "batch_size=100",
]  # fmt: skip
STEPS_PER_EPOCH = 12  # 1,200 training robots / batch 100
METRIC_KEYS = ("test/task_acc", "test/concept_acc", "test/concept_auroc", "test/task_loss", "oracle_random")

SITECUSTOMIZE = '''
import os, signal
import torch
# Read at call time, not at import: the commands fork from a server that imported this module once.
_count = [0]
def _die():
    os.kill(os.getpid(), signal.SIGKILL)
_orig_step = torch.optim.Adam.step
def step(self, *a, **k):
    if os.environ.get("CBM_KILL_AT_STEP"):
        _count[0] += 1
        if _count[0] == int(os.environ["CBM_KILL_AT_STEP"]):
            _die()
    return _orig_step(self, *a, **k)
torch.optim.Adam.step = step
_orig_save = torch.save
def save(obj, f, *a, **k):
    if os.environ.get("CBM_KILL_IN_SAVE"):
        _count[0] += 1
        if _count[0] == int(os.environ["CBM_KILL_IN_SAVE"]) and hasattr(f, "write"):
            f.write(b"half a checkpoint" * 4096)
            f.flush()
            _die()
    return _orig_save(obj, f, *a, **k)
torch.save = save
'''


def cbm_train(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``cbm-train args`` with the fault hooks: forked from a server started under them where the OS
    can (no 10-20 s of imports per command), else a fresh process."""
    hooks = tmp_path / "hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
    full_env = {**os.environ, "PYTHONPATH": str(hooks), **(env or {})}
    if forkserver.available():
        return run_forked("cbm-train", list(args), tmp_path, full_env)
    exe = Path(sys.executable).parent / "cbm-train"
    return subprocess.run([str(exe), *args], cwd=tmp_path, capture_output=True, text=True, timeout=600, env=full_env)


def metrics(run_dir: Path) -> dict:
    m = json.loads((run_dir / "metrics.json").read_text())
    return {k: m[k] for k in METRIC_KEYS}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("resume")
    res = cbm_train(tmp, *ARGS, f"cache_dir={tmp / 'cache'}", f"hydra.run.dir={tmp / 'ref'}")
    assert res.returncode == 0, res.stderr[-2000:]
    return tmp, metrics(tmp / "ref")


def kill_and_resume(tmp: Path, name: str, env: dict[str, str]) -> Path:
    run_dir = tmp / name
    killed = cbm_train(tmp, *ARGS, f"cache_dir={tmp / 'cache'}", f"hydra.run.dir={run_dir}", env=env)
    assert killed.returncode == -9, killed.stderr[-2000:]  # SIGKILL, no metrics written
    assert not (run_dir / "metrics.json").exists()
    resumed = cbm_train(tmp, f"resume={run_dir}")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    return run_dir


#: Three kill points drawn once at random from the 60 steps of the run (not the first epoch: a run
#: killed before its first checkpoint has nothing to resume and is simply started again).
KILL_STEPS = sorted(random.Random(2026).sample(range(STEPS_PER_EPOCH + 1, 5 * STEPS_PER_EPOCH), 3))


@pytest.mark.slow
@pytest.mark.parametrize("step", KILL_STEPS)
def test_killed_at_a_random_step_resumes_to_identical_metrics(reference, step):
    tmp, ref = reference
    run_dir = kill_and_resume(tmp, f"kill-step-{step}", {"CBM_KILL_AT_STEP": str(step)})
    assert metrics(run_dir) == ref
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]


@pytest.mark.slow
def test_killed_while_writing_a_checkpoint_resumes_to_identical_metrics(reference):
    """torch.save call 6 is the third epoch's second file: half of it is written, then SIGKILL. The
    atomic write leaves the previous checkpoint in place and the half file as an orphan temp."""
    tmp, ref = reference
    run_dir = tmp / "kill-save"
    killed = cbm_train(tmp, *ARGS, f"cache_dir={tmp / 'cache'}", f"hydra.run.dir={run_dir}", env={"CBM_KILL_IN_SAVE": "6"})
    assert killed.returncode == -9
    ckpts = run_dir / "checkpoints"
    assert any(p.name.endswith(".tmp") for p in ckpts.iterdir())  # the half-written file never became a .ckpt
    import torch

    for p in ckpts.glob("*.ckpt"):
        torch.load(p, weights_only=True)  # every .ckpt present is complete
    resumed = cbm_train(tmp, f"resume={run_dir}")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert metrics(run_dir) == ref
    assert sorted(p.name for p in ckpts.iterdir()) == ["best.ckpt", "last.ckpt"]  # the orphan was cleaned


def test_resume_refusals_are_one_line(tmp_path):
    from cbm.experiments.train import RESUMABLE

    (tmp_path / "empty").mkdir()
    cases = {
        str(tmp_path / "missing"): "not a cbm-train run directory",
        str(tmp_path / "empty"): "not a cbm-train run directory",
    }
    for target, message in cases.items():
        res = cbm_train(tmp_path, f"resume={target}")
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1 and message in lines[0], res.stderr
    run_dir = tmp_path / "started"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("seed: 0\n")
    res = cbm_train(tmp_path, f"resume={run_dir}")
    assert res.returncode == 2 and "no checkpoints/last.ckpt" in res.stderr
    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"x")
    res = cbm_train(tmp_path, f"resume={run_dir}", "model.lr=1")
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "cannot change a resumed run" in res.stderr
    assert "trainer.max_epochs" in RESUMABLE


def test_rerunning_into_a_used_directory_is_refused(compose_train, tmp_path):
    from cbm.experiments.train import run

    small = ["data.modality=tabular", "data.n_train=300", "data.n_calib=0", "data.n_test=200"]
    run(compose_train(*small))
    before = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    with pytest.raises(ValueError, match="already holds a run"):
        run(compose_train(*small))
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == before  # nothing stale was added


@pytest.mark.slow
def test_an_independent_cbm_resumes_with_its_solved_head_and_an_older_run_with_its_gradient_head(tmp_path):
    """The default CBM (independent, head solved by L-BFGS and frozen) resumes to the metrics of an
    uninterrupted run; a run whose config predates ``head.solver`` (its checkpoint's optimiser holds
    the head's parameter group) resumes the way it started, by gradient."""
    args = ["model=cbm", "data.modality=tabular", "data.n_train=1200", "data.n_calib=0", "data.n_test=500",
            "trainer.max_epochs=3", "logger=csv_only", "trainer.enable_progress_bar=false", "batch_size=100",
            f"cache_dir={tmp_path / 'cache'}"]  # fmt: skip
    ref = cbm_train(tmp_path, *args, f"hydra.run.dir={tmp_path / 'ref'}")
    assert ref.returncode == 0, ref.stderr[-2000:]
    killed = cbm_train(tmp_path, *args, f"hydra.run.dir={tmp_path / 'lbfgs'}", env={"CBM_KILL_AT_STEP": "15"})
    assert killed.returncode == -9, killed.stderr[-2000:]
    resumed = cbm_train(tmp_path, f"resume={tmp_path / 'lbfgs'}")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert metrics(tmp_path / "lbfgs") == metrics(tmp_path / "ref")

    old = tmp_path / "old"
    killed = cbm_train(tmp_path, *args, "model.head.solver=gradient", f"hydra.run.dir={old}", env={"CBM_KILL_AT_STEP": "15"})
    assert killed.returncode == -9, killed.stderr[-2000:]
    cfg = (old / "config.yaml").read_text()
    assert "solver: gradient" in cfg
    (old / "config.yaml").write_text(cfg.replace("    solver: gradient\n", ""))  # as an older version wrote it
    assert "solver:" not in (old / "config.yaml").read_text()
    resumed = cbm_train(tmp_path, f"resume={old}")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads((old / "metrics.json").read_text())["test/task_acc"] > 0.5
