"""``cbm-experiment`` under hostile use: two runs on one folder, a ``kill -9`` of the parent, a
``cbm-train`` pointed at a running cell; and the pieces that make them safe (:mod:`runlock`,
:mod:`lifeline`, the quoting of ``train=[...]`` overrides)."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from handshake import alive, wait_exit, wait_for
from signaltest import hostile_argv

from cbm.core import cells, lifeline, runlock
from cbm.core.common import remove_if_unused
from cbm.core.overrides import quote_items, split_argv, with_search_path

BIN = Path(sys.executable).parent
#: Long enough that the cell is still running while a test kills, interrupts or races it: a forked
#: cell starts at once, and the racing command needs a few seconds to be refused.
EPOCHS = 50
#: One tiny tabular training cell (no black box, no analyses): the fastest whole experiment.
PRESET = f"""\
# @package _global_
name: tiny
settings:
  tab: [data.modality=tabular, data.n_train=300, data.n_calib=100, data.n_test=100]
models:
  cbm: [model=cbm]
blackbox: null
train: [trainer=cpu_smoke, logger=csv_only, trainer.max_epochs={EPOCHS}]
"""


# ----------------------------------------------------------------------------- helpers
def hold_in_child(directory: Path) -> subprocess.Popen:
    """A process that holds ``directory``'s lock until killed (it prints once it does)."""
    code = f"from cbm.core import runlock; import threading; runlock.acquire({str(directory)!r}); print('held', flush=True); threading.Event().wait()"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    if proc.stdout.readline().strip() != "held":
        proc.kill()
        proc.wait()
        raise AssertionError("the lock holder did not start")
    return proc


@pytest.fixture
def spawned():
    """``spawned(cmd, **popen_kwargs)``: a process in its own session, killed with its whole group at
    the end of the test whatever happened (``spawned.track(pid)`` adds another group, e.g. a cell's)."""
    groups: list[int] = []

    def spawn(cmd: list[str], **kwargs) -> subprocess.Popen:
        proc = subprocess.Popen(cmd, start_new_session=True, **kwargs)
        groups.append(proc.pid)
        procs.append(proc)
        return proc

    procs: list[subprocess.Popen] = []
    spawn.track = groups.append  # type: ignore[attr-defined]
    yield spawn
    for pid in groups:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:  # gone already
            pass
    for proc in procs:
        try:
            proc.communicate(timeout=30)  # reap it and close its pipes
        except (subprocess.TimeoutExpired, ValueError):
            pass


@pytest.fixture
def preset(tmp_path) -> Path:
    d = tmp_path / "conf"
    (d / "experiment").mkdir(parents=True)
    (d / "experiment" / "tiny.yaml").write_text(PRESET)
    return d


def experiment_cmd(preset: Path, out: Path, cache: Path) -> list[str]:
    return [str(BIN / "cbm-experiment"), "--config-dir", str(preset), "+experiment=tiny", f"output_dir={out}", f"cache_dir={cache}"]


def cell_dir(out: Path) -> Path:
    return out / "tab" / "cbm" / "seed0" / "train"


def csv_rows(cell: Path) -> list[dict]:
    with open(cell / "csv" / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def assert_complete(out: Path) -> None:
    """Every cell done, and the cell's CSV log holds every epoch (a validation and a training row
    each) and the test row: nothing was lost to a second writer."""
    manifest = json.loads((out / "experiment.json").read_text())
    assert [c["status"] for c in manifest["cells"]] == ["done"]
    rows = csv_rows(cell_dir(out))
    assert len(rows) == 2 * EPOCHS + 1, rows
    assert sorted({int(r["epoch"]) for r in rows if r["val/task_acc"]}) == list(range(EPOCHS))
    assert sum(1 for r in rows if r["test/task_acc"]) == 1


# ----------------------------------------------------------------------------- the lock
def test_lock_is_exclusive_names_its_holder_and_dies_with_it(tmp_path):
    proc = hold_in_child(tmp_path)
    try:
        info = runlock.holder(tmp_path)
        assert info is not None and info["pid"] == proc.pid and info["host"] and info["started"]
        with pytest.raises(runlock.Busy, match=rf"{tmp_path} is in use by pid {proc.pid} on .* since .*\(python -c"):
            runlock.acquire(tmp_path)
        remove_if_unused(tmp_path)  # another command's directory is never cleaned up by a refused one
        assert (tmp_path / runlock.LOCK_NAME).is_file()
    finally:
        proc.kill()
        proc.wait()
    assert runlock.holder(tmp_path) is None  # the kernel dropped the dead owner's lock
    with runlock.hold(tmp_path):
        runlock.acquire(tmp_path)  # re-entrant in one process
        runlock.release(tmp_path)
        assert runlock.holder(tmp_path) is None  # this process's own lock does not block it
        assert json.loads((tmp_path / runlock.LOCK_NAME).read_text())["pid"] == os.getpid()


def test_a_forked_child_neither_keeps_nor_releases_its_parents_lock(tmp_path):
    """A DataLoader worker is a fork of the cell: it must not keep the directory locked once the cell
    is dead (the flock belongs to the open file both share), nor release it while the cell lives."""
    code = (f"import os, sys, threading; from cbm.core import runlock; d = {str(tmp_path)!r}; runlock.acquire(d)\n"
            "if os.fork() == 0:\n"
            "    runlock.release(d); print(runlock.holds(d), flush=True)\n"
            "threading.Event().wait()  # alive until killed")  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "False"  # the child holds nothing; its release was a no-op
        info = runlock.holder(tmp_path)
        assert info is not None and info["pid"] == proc.pid  # the parent still holds it
        proc.kill()  # the owner only: its forked child lives on
        proc.wait()
        assert runlock.holder(tmp_path) is None  # the child's copy was closed: the kernel dropped the lock
    finally:
        os.killpg(proc.pid, signal.SIGKILL)


def holder_seen_by_another_process(directory: Path) -> dict | None:
    code = f"import json; from cbm.core import runlock; print(json.dumps(runlock.holder({str(directory)!r})))"
    return json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout)


def test_a_lock_file_removed_while_waiting_for_it_is_taken_anew(tmp_path, monkeypatch):
    """remove_if_unused deletes a run directory (its .lock too) between another process's open and
    flock: that process must not hold a lock on the deleted file while a third takes the new one."""
    real, calls = runlock._try_lock, []

    def removed_meanwhile(fd: int) -> bool:
        if not calls:
            (tmp_path / runlock.LOCK_NAME).unlink()
        calls.append(fd)
        return real(fd)

    monkeypatch.setattr(runlock, "_try_lock", removed_meanwhile)
    with runlock.hold(tmp_path):
        assert len(calls) == 2  # the first lock was on the removed file: dropped, the new file taken
        fd = runlock._held[str(tmp_path.resolve())][0]
        assert os.fstat(fd).st_ino == (tmp_path / runlock.LOCK_NAME).stat().st_ino
        info = holder_seen_by_another_process(tmp_path)
        assert info is not None and info["pid"] == os.getpid()
    assert holder_seen_by_another_process(tmp_path) is None


def test_a_failed_run_directory_is_removed_under_its_lock(tmp_path, monkeypatch):
    """No command can take the lock of a directory while remove_if_unused deletes it (it holds the
    lock until the lock file is gone); a directory in use, or with work in it, stays."""
    from cbm.core import common

    run = tmp_path / "outputs" / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / "train.log").write_text("")
    (run / runlock.LOCK_NAME).write_text("")
    monkeypatch.chdir(tmp_path)
    tried = []
    real = common.shutil.rmtree

    def rmtree(path, **kwargs):
        code = f"from cbm.core import runlock\ntry:\n runlock.acquire({str(run)!r}); print('taken')\nexcept runlock.Busy: print('busy')"
        tried.append(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout.strip())
        return real(path, **kwargs)

    monkeypatch.setattr(common.shutil, "rmtree", rmtree)
    remove_if_unused(run)
    assert tried == ["busy"] and not (tmp_path / "outputs").exists()  # the folder Hydra made for it too
    (run / ".hydra").mkdir(parents=True)
    (run / "checkpoints").mkdir()
    remove_if_unused(run)  # work in it: kept
    assert sorted(p.name for p in run.iterdir()) == [".hydra", runlock.LOCK_NAME, "checkpoints"]
    monkeypatch.setenv("LOCAL_RANK", "1")
    (run / "checkpoints").rmdir()
    remove_if_unused(run)  # a secondary rank never removes rank zero's directory
    assert (run / ".hydra").is_dir()


def test_windows_unlocks_the_byte_it_locked(tmp_path, monkeypatch):
    """msvcrt.locking works at the current file position, which writing the owner info moved."""
    seen = []

    class FakeMsvcrt:
        LK_NBLCK, LK_UNLCK = "lock", "unlock"

        @staticmethod
        def locking(fd: int, mode: str, n: int) -> None:
            seen.append((mode, os.lseek(fd, 0, os.SEEK_CUR), n))

    monkeypatch.setattr(runlock, "fcntl", None)
    monkeypatch.setattr(runlock, "msvcrt", FakeMsvcrt, raising=False)
    with runlock.hold(tmp_path):
        assert (tmp_path / runlock.LOCK_NAME).stat().st_size > 0
    assert seen == [("lock", 0, 1), ("unlock", 0, 1)]


def test_a_cell_dies_with_its_parent(tmp_path, spawned):
    """``kill -9`` of the parent: the kernel kills the cell (PR_SET_PDEATHSIG), no orphan remains."""
    child = "from cbm.core.lifeline import die_with_parent; import threading; die_with_parent(); print('armed', flush=True); threading.Event().wait()"
    parent = textwrap.dedent(f"""
        import sys, threading
        from pathlib import Path
        from cbm.core import lifeline
        proc = lifeline.start([sys.executable, "-c", {child!r}], Path({str(tmp_path / 'out.txt')!r}), dict(__import__("os").environ))
        print(proc.pid, flush=True)
        threading.Event().wait()  # alive until the test kills it
    """)
    p = spawned([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    cell = int(p.stdout.readline())
    spawned.track(cell)  # its own session: killed at the end even if the death signal failed
    wait_for(lambda: (tmp_path / "out.txt").read_text().strip() == "armed", 60, "the cell to arm its death signal")
    assert alive(cell) and os.getpgid(cell) == cell  # its own process group
    p.send_signal(signal.SIGKILL)
    p.wait()
    wait_for(lambda: not alive(cell), 10, "the orphaned cell to die")


def test_what_a_cell_starts_runs_normally_and_dies_with_the_cell(tmp_path, spawned):
    """A process the cell starts (DDP's other ranks, any cbm command) inherits CBM_PARENT_PID: it
    names the cell, so the process runs (it is no orphan) and is bound to the cell."""
    grandchild = ("import os, sys; from cbm.core.lifeline import die_with_parent, PARENT_ENV; die_with_parent(); "
                  "print('grandchild ran', os.environ[PARENT_ENV] == str(os.getpid()), flush=True)")  # fmt: skip
    cell = textwrap.dedent(f"""
        import os, subprocess, sys
        from cbm.core.lifeline import die_with_parent, PARENT_ENV
        die_with_parent()
        assert os.environ[PARENT_ENV] == str(os.getpid())
        res = subprocess.run([sys.executable, "-c", {grandchild!r}], capture_output=True, text=True)
        print(res.returncode, res.stdout.strip(), repr(res.stderr.strip()), flush=True)
    """)
    proc = lifeline.start([sys.executable, "-c", cell], tmp_path / "out.txt", dict(os.environ))
    spawned.track(proc.pid)
    assert proc.wait(timeout=120) == 0, (tmp_path / "out.txt").read_text()
    assert (tmp_path / "out.txt").read_text().strip() == "0 grandchild ran True ''"


def test_a_stale_parent_variable_is_one_line_and_a_failure(tmp_path):
    """A shell that kept CBM_PARENT_PID of a finished experiment: the command says why it stops."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    code = "from cbm.core.lifeline import die_with_parent; die_with_parent(); print('ran')"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, lifeline.PARENT_ENV: str(dead.pid)})  # fmt: skip
    assert res.returncode != 0 and res.stdout == ""
    assert res.stderr.strip().splitlines() == [f"cbm: parent {dead.pid} is gone; exiting ({lifeline.PARENT_ENV}={dead.pid})"]


def test_stop_kills_the_cell_group(tmp_path):
    proc = lifeline.start([sys.executable, "-c", "import threading; threading.Event().wait()"], tmp_path / "out.txt", dict(os.environ))
    cells.stop(proc)
    assert proc.returncode == -signal.SIGKILL and not alive(proc.pid)


# ----------------------------------------------------------------------------- the command line
@pytest.mark.parametrize("given, hydra", [
    ("train=[trainer.max_epochs=20]", "train=['trainer.max_epochs=20']"),
    ("train=[trainer=cpu_smoke, trainer.max_epochs=2]", "train=['trainer=cpu_smoke', 'trainer.max_epochs=2']"),
    ("settings={noisy: [data.concept_noise=0.2], b: [model=cem]}", "settings={noisy: ['data.concept_noise=0.2'], b: ['model=cem']}"),
    ("settings.x=[data=robot,data.occlude=[knees]]", "settings.x=['data=robot','data.occlude=[knees]']"),
    ("train=[cache_dir=${oc.env:X,y}]", "train=['cache_dir=${oc.env:X,y}']"),
    ("train=[a=it's]", "train=[\"a=it's\"]"),
    ("train=['trainer.max_epochs=20']", "train=['trainer.max_epochs=20']"),  # already quoted: kept
    ("seeds=[0,1,2]", "seeds=[0,1,2]"),
    ("model=[cbm", "model=[cbm"),  # not mended by quoting: kept (and refused as a bad override)
])  # fmt: skip
def test_list_items_holding_overrides_are_quoted(given, hydra):
    assert quote_items(given) == hydra


def test_config_dir_flags_reach_the_precheck(tmp_path):
    cmd = split_argv(["-m", "--config-dir", "a", "x=1", "--config-dir=b", "-cd", "c"])
    assert cmd.overrides == ["x=1"] and cmd.config_dirs == ["a", "b", "c"] and cmd.multirun and not cmd.other_flags
    assert split_argv(["--cfg", "job"]).other_flags == ["--cfg"]
    over = with_search_path(["x=1", "hydra.searchpath=[file:///q]"], [str(tmp_path)])
    assert over == ["x=1", f"hydra.searchpath=['file://{tmp_path}','file:///q']"]


# ----------------------------------------------------------------------------- whole experiments
@pytest.mark.slow
def test_a_second_experiment_on_the_same_folder_is_refused_and_nothing_is_lost(tmp_path, preset, shared_cache, spawned):
    out = tmp_path / "exp"
    first = spawned(experiment_cmd(preset, out, shared_cache), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cell = wait_for(lambda: runlock.holder(cell_dir(out)), 300, "the training cell to start")
    # the cell is held still while the two others start (SIGSTOP keeps its lock): under load a short
    # cell could otherwise finish before they look, and they would meet a finished run instead
    os.kill(int(cell["pid"]), signal.SIGSTOP)
    try:
        second = subprocess.run(experiment_cmd(preset, out, shared_cache), capture_output=True, text=True, timeout=300)
        # a cbm-train by hand into the running cell is refused the same way, naming the cell
        by_hand = subprocess.run([str(BIN / "cbm-train"), "data.modality=tabular", f"hydra.run.dir={cell_dir(out)}",
                                  f"cache_dir={shared_cache}"], capture_output=True, text=True, timeout=300)  # fmt: skip
    finally:
        os.kill(int(cell["pid"]), signal.SIGCONT)
    stdout, stderr = first.communicate(timeout=600)
    assert first.returncode == 0, stdout[-2000:] + stderr[-2000:]
    for res, holder in ((second, f"pid {first.pid} "), (by_hand, "cbm.experiments.train")):
        err = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(err) == 1 and "Traceback" not in res.stderr, res.stderr[-2000:]
        assert " is in use by pid " in err[0] and holder in err[0], err[0]
    assert_complete(out)


@pytest.mark.slow
def test_kill_9_of_the_parent_leaves_no_orphan_and_a_rerun_finishes(tmp_path, preset, shared_cache, spawned):
    out = tmp_path / "exp"
    parent = spawned(experiment_cmd(preset, out, shared_cache), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    info = wait_for(lambda: runlock.holder(cell_dir(out)), 300, "the training cell to start")
    cell = int(info["pid"])
    spawned.track(cell)  # the cell's own session
    assert cell != parent.pid and alive(cell)
    parent.send_signal(signal.SIGKILL)  # the parent only
    parent.wait()
    wait_for(lambda: not alive(cell), 10, "the orphaned cell to die")
    assert runlock.holder(cell_dir(out)) is None and runlock.holder(out) is None
    again = subprocess.run(experiment_cmd(preset, out, shared_cache), capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert_complete(out)


def test_a_killed_attempt_is_cleared_before_the_cell_starts_afresh(tmp_path):
    """A training killed after its first best.ckpt but before last.ckpt cannot resume, and cbm-train
    would refuse its directory ('already holds a run'): the rerun clears what it left."""
    from cbm.experiments.experiment import clear_leftovers
    from cbm.experiments.plan import Cell

    cell = Cell("train", "tab", "cbm", 0, tmp_path / "cell", ["model=cbm", "seed=0"])
    (cell.dir / "checkpoints").mkdir(parents=True)
    (cell.dir / "checkpoints" / "best.ckpt").write_bytes(b"x")
    (cell.dir / "config.yaml").write_text("seed: 0\n")
    (cell.dir / "cell.json").write_text(json.dumps({"fingerprint": cell.fingerprint()}))
    assert cell.state() == "fresh"
    clear_leftovers(cell)
    assert sorted(p.name for p in cell.dir.iterdir()) == ["cell.json"]


def test_the_other_ranks_of_a_ddp_run_share_rank_zeros_lock(tmp_path, monkeypatch):
    """DDP relaunches the command with rank zero's hydra.run.dir: those ranks are not refused."""
    proc = hold_in_child(tmp_path)
    try:
        monkeypatch.setenv("LOCAL_RANK", "1")
        runlock.check_free(tmp_path)
        with runlock.hold(tmp_path):
            pass
        monkeypatch.setenv("LOCAL_RANK", "0")
        with pytest.raises(runlock.Busy):
            runlock.check_free(tmp_path)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("how", ["CBM_NO_PRECHECK", "-cn"])
def test_a_busy_run_directory_is_refused_before_hydra_writes_into_it(tmp_path, how):
    """With the precheck skipped (a cell's CBM_NO_PRECHECK, a Hydra flag such as -cn) the running
    command's .hydra/ files are still never overwritten: the busy directory is refused first."""
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("the running command's\n")
    env = {**os.environ, "CBM_NO_PRECHECK": "1"} if how == "CBM_NO_PRECHECK" else dict(os.environ)
    flags = ["-cn", "train"] if how == "-cn" else []
    proc = hold_in_child(run)
    try:
        res = subprocess.run([str(BIN / "cbm-train"), *flags, "data.modality=tabular", f"hydra.run.dir={run}"],
                             capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
    finally:
        proc.kill()
        proc.wait()
    err = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(err) == 1, res.stderr[-2000:]
    assert err[0].startswith(f"cbm-train: error: {run} is in use by pid {proc.pid} "), err[0]
    assert sorted(p.name for p in run.rglob("*")) == [".hydra", runlock.LOCK_NAME, "config.yaml"]
    assert (run / ".hydra" / "config.yaml").read_text() == "the running command's\n"


def test_the_busy_check_before_hydra_lets_other_ranks_in(tmp_path, monkeypatch):
    """A cell's relaunch under DDP (LOCAL_RANK=1, rank zero's hydra.run.dir) is no refusal; a
    command Hydra answers without a job (--cfg) writes nothing and is not checked."""
    from cbm.core.cli import check_not_busy

    run = tmp_path / "7"
    run.mkdir()
    proc = hold_in_child(run)
    try:
        with pytest.raises(runlock.Busy, match=f"^{run} is in use by pid {proc.pid} "):
            check_not_busy("train", [f"hydra.run.dir={run}"])
        with pytest.raises(runlock.Busy):  # a run directory made of interpolations: composed
            check_not_busy("train", ["seed=7", f"hydra.run.dir={tmp_path}/${{seed}}"])
        check_not_busy("train", ["--cfg", "job", f"hydra.run.dir={run}"])
        check_not_busy("train", ["-m", f"hydra.run.dir={run}"])
        monkeypatch.setenv("LOCAL_RANK", "1")
        check_not_busy("train", [f"hydra.run.dir={run}"])
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code", "what"), [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated (SIGTERM)")])
def test_ctrl_c_stops_the_running_cell_with_one_line(tmp_path, preset, shared_cache, spawned, sig, code, what):
    """Started the way a shell starts a background job (SIGINT inherited ignored): a SIGINT (or a
    scheduler's SIGTERM) still stops the experiment and its running cell, with one line and exit 130
    (143)."""
    out = tmp_path / "exp"
    # a cell that cannot finish before the signal (50 epochs of 240 rows could, on a loaded machine)
    (preset / "experiment" / "long.yaml").write_text(PRESET.replace("name: tiny", "name: long").replace(f"max_epochs={EPOCHS}", "max_epochs=100000"))
    cmd = [a.replace("+experiment=tiny", "+experiment=long") for a in experiment_cmd(preset, out, shared_cache)]
    parent = spawned(hostile_argv(*cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    info = wait_for(lambda: runlock.holder(cell_dir(out)), 300, "the training cell to start")
    spawned.track(int(info["pid"]))
    # signalled once the cell trains
    wait_for(lambda: (cell_dir(out) / "csv" / "metrics.csv").is_file(), 300, "the cell to train")
    parent.send_signal(sig)
    _, stderr = parent.communicate(timeout=60)
    assert parent.returncode == code and stderr.strip().splitlines() == [
        f"cbm-experiment: {what}; the running cells were stopped (rerun the same command to go on)"], stderr[-2000:]
    wait_exit(int(info["pid"]), 10, "the cell to stop")


#: ``cbm-experiment``'s cell loop with one cell that "trains" until the experiment stops it; the cell
#: sends SIGINT to its own worker thread once the main thread waits on the cells (hand-shake: drain's
#: ``wait`` sets an event). Prints the delay from the signal to the cells being stopped.
WORKER_SIGINT = """
    import json, signal, sys, threading, time
    from types import SimpleNamespace
    import cbm.core.concurrency as cc
    from cbm.core import cells
    from cbm.experiments import experiment

    waiting, stopped, sent = threading.Event(), threading.Event(), []
    real_wait = cc.wait

    def wait(*args, **kwargs):
        waiting.set()  # the main thread waits on the cells now
        return real_wait(*args, **kwargs)

    cc.wait = wait

    class Running(cells.Running):
        def stop_all(self):
            stopped.set()
            self.stopped_at = time.monotonic()
            super().stop_all()

    def cell_that_trains(cell, threads, root, running):
        assert waiting.wait(60)
        sent.append(time.monotonic())
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # the signal lands on this worker
        assert stopped.wait(60)  # "training" until the experiment stops its cells
        return {"key": cell.key, "status": "failed", "seconds": None, "note": ""}

    experiment.run_cell = cell_that_trains
    cells = [SimpleNamespace(key="c", stage="train", setting="s", model="m", seed=0)]
    running = Running()
    with cc.stop_signals():  # what every command's main runs under
        try:
            experiment._execute(cells, 1, sys.argv[1], {}, lambda: None, running)
        except KeyboardInterrupt:
            print(json.dumps({"delay": running.stopped_at - sent[0], "stopping": running.stopping}))
"""


def test_a_ctrl_c_the_kernel_hands_to_a_worker_thread_stops_the_experiment_within_a_second(tmp_path):
    """Linux may deliver a process-directed SIGINT to any thread; Python runs the handler only in the
    main thread, when it next runs Python code. A main thread blocked on a cell's future would not
    notice it until the cell ended (a long training: never, for the user); it must within a second,
    also in a process that inherited SIGINT ignored (a background job: the CI failure of f96431e)."""
    res = subprocess.run([*hostile_argv("-c", textwrap.dedent(WORKER_SIGINT)), str(tmp_path)], capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert res.returncode == 0 and res.stdout, res.stderr[-2000:]
    out = json.loads(res.stdout)
    assert out["stopping"] and out["delay"] < 1.0, out
