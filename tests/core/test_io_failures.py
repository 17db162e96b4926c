"""File-system failures: a full disk (an ``RLIMIT_FSIZE`` limit on the process) never leaves a
truncated checkpoint or cache file, and parallel runs never share a result directory."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from cbm.core import atomic, forkserver
from cbm.core.atomic import WriteError, atomic_dir, atomic_write, clean_orphans, temp_path

SMALL = ["data.modality=tabular", "data.n_train=300", "data.n_calib=100", "data.n_test=100"]


def limited(limit: int):
    def preexec() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return preexec


def cli(prog: str, *args: str, cwd: Path, limit: int | None = None) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / prog
    return subprocess.run(
        [str(exe), *args], cwd=cwd, capture_output=True, text=True, timeout=600,
        preexec_fn=limited(limit) if limit else None, env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )  # fmt: skip


def test_atomic_write_failure_keeps_the_old_file_and_no_temp(tmp_path):
    target = tmp_path / "metrics.json"
    target.write_text("old")

    def half_then_fail(f):
        f.write(b"new but incomplete")
        raise OSError(28, "No space left on device")

    with pytest.raises(WriteError, match=r"cannot write .*metrics.json: no space left on device"):
        atomic_write(target, half_then_fail)
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]


def test_orphan_temps_of_dead_writers_are_cleaned(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    orphan = temp_path(tmp_path / "best.ckpt").name.replace(f".{os.getpid()}.", f".{pid}.")
    (tmp_path / orphan).write_bytes(b"half")
    live = temp_path(tmp_path / "last.ckpt")  # this process is alive: its temp file stays
    live.write_bytes(b"in progress")
    assert clean_orphans(tmp_path) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [live.name]


def write_dir(path: Path, text: str) -> None:
    with atomic_dir(path) as d:
        (d / "weights.txt").write_text(text)


def read_dir(path: Path) -> str:
    return (path / "weights.txt").read_text()


def kill_inside_atomic_dir(path: Path, text: str, at: str) -> None:
    """A writer of ``path`` killed (``os._exit``, no clean-up runs) ``at`` one step of atomic_dir:
    ``"aside"`` after the fallback moved the previous directory aside, ``"swapped"`` after the swap."""
    code = f"""
import os, sys
from pathlib import Path
from cbm.core import forkserver
from cbm.core import atomic
if {at!r} == "aside":
    atomic._renameat2 = lambda: None
    real = os.replace
    def replace(a, b):
        real(a, b)
        if ".old." in str(b):
            os._exit(137)
    atomic.os.replace = replace
else:
    swap = atomic._exchange
    atomic._exchange = lambda a, b: swap(a, b) and os._exit(137)
with atomic.atomic_dir(Path({str(path)!r})) as d:
    (d / "weights.txt").write_text({text!r})
"""
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 137


def exchange_works_here(tmp_path: Path) -> bool:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    try:
        return atomic._exchange(tmp_path / "a", tmp_path / "b")
    finally:
        (tmp_path / "a").rmdir()
        (tmp_path / "b").rmdir()


def test_atomic_dir_swaps_the_previous_directory_in_one_step(tmp_path, monkeypatch):
    if not exchange_works_here(tmp_path):
        pytest.skip("no renameat2(RENAME_EXCHANGE) on this system / file system")
    target = tmp_path / "adapter"
    write_dir(target, "v1")
    moved = []
    real = os.replace
    monkeypatch.setattr(atomic.os, "replace", lambda a, b: (moved.append((a, b)), real(a, b)))
    write_dir(target, "v2")
    assert read_dir(target) == "v2" and moved == []  # never moved aside: the target always existed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter"]


def test_atomic_dir_without_the_swap_moves_the_previous_aside_and_removes_it(tmp_path, monkeypatch):
    monkeypatch.setattr(atomic, "_renameat2", lambda: None)
    target = tmp_path / "adapter"
    write_dir(target, "v1")
    write_dir(target, "v2")
    assert read_dir(target) == "v2" and sorted(p.name for p in tmp_path.iterdir()) == ["adapter"]
    with pytest.raises(RuntimeError):
        with atomic_dir(target) as d:
            (d / "weights.txt").write_text("v3")
            raise RuntimeError("the block failed")
    assert read_dir(target) == "v2" and sorted(p.name for p in tmp_path.iterdir()) == ["adapter"]


def test_a_writer_killed_between_the_two_renames_loses_nothing(tmp_path):
    """The fallback's moment without ``path``: the previous directory waits aside (not a temp name,
    so no clean-up deletes it) and the next atomic_dir puts it back before anything else."""
    target = tmp_path / "adapter"
    write_dir(target, "v1")
    kill_inside_atomic_dir(target, "v2", "aside")
    assert not target.exists()
    clean_orphans(tmp_path)  # what any other writer in the folder runs first
    aside = [p.name for p in tmp_path.iterdir()]
    assert len(aside) == 1 and aside[0].startswith(".adapter.old."), aside
    with pytest.raises(RuntimeError):
        with atomic_dir(target):
            raise RuntimeError("the next write fails too")
    assert read_dir(target) == "v1" and sorted(p.name for p in tmp_path.iterdir()) == ["adapter"]
    write_dir(target, "v3")
    assert read_dir(target) == "v3" and sorted(p.name for p in tmp_path.iterdir()) == ["adapter"]


def test_a_writer_killed_after_the_swap_leaves_the_new_directory(tmp_path):
    if not exchange_works_here(tmp_path):
        pytest.skip("no renameat2(RENAME_EXCHANGE) on this system / file system")
    target = tmp_path / "adapter"
    write_dir(target, "v1")
    kill_inside_atomic_dir(target, "v2", "swapped")
    assert read_dir(target) == "v2"  # the previous one waits under a temp name of the dead writer
    assert clean_orphans(tmp_path) == 1 and sorted(p.name for p in tmp_path.iterdir()) == ["adapter"]


@pytest.mark.slow
def test_full_disk_during_training_leaves_no_truncated_checkpoint(tmp_path):
    cache = tmp_path / "cache"
    warm = cli("cbm-data", "info", *SMALL, f"cache_dir={cache}", cwd=tmp_path)  # the data fit under the limit
    assert warm.returncode == 0, warm.stderr
    run_dir = tmp_path / "run"
    res = cli("cbm-train", *SMALL, "logger=csv_only", f"cache_dir={cache}", f"hydra.run.dir={run_dir}",
              cwd=tmp_path, limit=150_000)  # fmt: skip
    err = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(err) == 1, res.stderr[-3000:]
    assert "best.ckpt: file too large" in err[0]
    written = [p for p in tmp_path.rglob("*") if p.suffix in (".ckpt", ".tmp") or p.name.endswith(".tmp")]
    assert written == []  # no truncated checkpoint, no temp file
    assert not (run_dir / "metrics.json").exists()


@pytest.mark.slow
def test_full_disk_while_caching_data_only_costs_the_caching(tmp_path):
    cache = tmp_path / "cache"
    res = cli("cbm-data", "info", *SMALL, f"cache_dir={cache}", cwd=tmp_path, limit=20_000)
    assert res.returncode == 0, res.stderr
    assert "train:    240 samples" in res.stdout
    assert "the data are not cached" in res.stderr and "file too large" in res.stderr
    assert sorted(p.name for p in cache.iterdir() if not p.name.endswith(".lock")) == []  # nothing half-written


#: Intervene runs started at once (more than the 2 cores: they overlap for sure).
N_PARALLEL = 4


@pytest.mark.slow
def test_parallel_intervene_runs_keep_a_result_directory_each(tmp_path):
    """Four runs started at once (one second's timestamp): four result directories, none overwritten."""
    run_dir = tmp_path / "run"
    res = cli("cbm-train", *SMALL, "logger=csv_only", "trainer.max_epochs=1", f"cache_dir={tmp_path / 'c'}",
              f"hydra.run.dir={run_dir}", cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    args = [[f"checkpoint={run_dir}", f"seed={s}", f"cache_dir={tmp_path / 'c'}", "policy=[random]", "intervener=[oracle]",
             "ks=[0,1]"] for s in range(N_PARALLEL)]  # fmt: skip
    if forkserver.available():  # the processes forked at once from one warm server (no import cost each)
        server = forkserver.ForkServer()
        try:
            cells = [server.start([sys.executable, "-m", "cbm.experiments.intervene", *a], tmp_path / f"out{i}.txt",
                                  dict(os.environ), cwd=str(tmp_path)) for i, a in enumerate(args)]  # fmt: skip
            codes = [c.wait(600) for c in cells]
        finally:
            server.close()
        assert codes == [0] * N_PARALLEL, [(tmp_path / f"out{i}.txt").read_text()[-1500:] for i in range(N_PARALLEL)]
    else:
        exe = Path(sys.executable).parent / "cbm-intervene"
        procs = [subprocess.Popen([str(exe), *a], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for a in args]  # fmt: skip
        errors = [p.communicate(timeout=600)[1] for p in procs]
        assert all(p.returncode == 0 for p in procs), errors
    dirs = sorted((tmp_path / "outputs" / "intervene").iterdir())
    assert len(dirs) == N_PARALLEL and all((d / "results.csv").exists() for d in dirs)
    seeds = sorted(int(next(ln for ln in (d / "results.json").read_text().splitlines() if '"seed"' in ln).split(":")[1].strip(" ,"))
                   for d in dirs)  # fmt: skip
    assert seeds == list(range(N_PARALLEL))


def test_checkpoint_write_failure_inside_torch_save_is_the_os_error():
    """torch's zip writer wraps a failed write in a RuntimeError; the checkpoint path re-raises the
    write's own OSError (which the atomic write turns into one line naming the file)."""
    import io

    import torch

    from cbm.training.checkpoint import _save_reporting_os_errors

    class Full(io.BytesIO):
        def write(self, data):
            if self.tell() + len(memoryview(data)) > 4096:
                raise OSError(27, "File too large")
            return super().write(data)

    with pytest.raises(OSError, match="File too large") as caught:
        _save_reporting_os_errors({"w": torch.zeros(50_000)}, Full())
    assert caught.type is OSError and caught.value.errno == 27
