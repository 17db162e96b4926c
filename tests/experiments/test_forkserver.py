"""The fork server: a forked cell behaves as the ``python -m`` process it replaces (argv, environment,
working directory, output file, exit status) and dies with the server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from handshake import alive, wait_exit, wait_for

from cbm.core import forkserver

pytestmark = pytest.mark.skipif(not forkserver.available(), reason="fork server: Linux only")

#: A module the cells run: prints what it sees, then exits as its first argument says.
CELL = textwrap.dedent("""\
    import os, sys, threading
    import torch
    print("argv", sys.argv[1:], "orig", sys.orig_argv[1:3], "cwd", os.getcwd(), flush=True)
    print("env", os.environ.get("CELL_VAR"), "threads", torch.get_num_threads(), "parent", os.environ.get("CBM_PARENT_PID"))
    print("session", os.getsid(0) == os.getpid(), "stdin", sys.stdin.read() == "")
    how = sys.argv[1]
    if how == "sleep":
        from cbm.core import lifeline
        lifeline.die_with_parent()
        print("sleeping", flush=True)
        threading.Event().wait()  # alive until killed
    if how == "raise":
        raise ValueError("broken cell")
    if how == "message":
        sys.exit("cbm-x: error: one line")
    if how == "code":
        sys.exit(3)
    if how == "exit-hook":
        import atexit
        atexit.register(lambda: print("exit hook ran", flush=True))
    """)


@pytest.fixture
def server(tmp_path):
    (tmp_path / "mod").mkdir()
    (tmp_path / "mod" / "cellmod.py").write_text(CELL)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "mod")}
    srv = forkserver.ForkServer(env=env, preload=("torch",))
    yield srv, env
    srv.proc.kill()  # whatever a failed test left: its cells die with the server
    srv.proc.wait()


def run(srv, env, tmp_path: Path, how: str, **extra) -> tuple[int, str]:
    out = tmp_path / f"{how}.txt"
    cell = srv.start([sys.executable, "-m", "cellmod", how, "x=1"], out, {**env, "OMP_NUM_THREADS": "1", **extra}, cwd=str(tmp_path))
    return cell.wait(), out.read_text()


def test_a_forked_cell_runs_as_python_dash_m_would(server, tmp_path):
    srv, env = server
    code, text = run(srv, env, tmp_path, "ok", CELL_VAR="seen")
    assert code == 0, text
    assert f"argv ['ok', 'x=1'] orig ['-m', 'cellmod'] cwd {tmp_path}" in text
    assert f"env seen threads 1 parent {srv.proc.pid}" in text  # its own environment; it dies with the server
    assert "session True stdin True" in text
    code, text = run(srv, env, tmp_path, "raise")
    assert code == 1 and "Traceback" in text and "ValueError: broken cell" in text
    code, text = run(srv, env, tmp_path, "message")
    assert code == 1 and text.rstrip().endswith("cbm-x: error: one line")
    assert run(srv, env, tmp_path, "code")[0] == 3
    code, text = run(srv, env, tmp_path, "exit-hook")
    assert code == 0 and "exit hook ran" in text
    # the same module run as a process: the same status and lines
    res = subprocess.run([sys.executable, "-m", "cellmod", "message"], env={**env, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
    assert res.returncode == 1 and res.stderr.rstrip().endswith("cbm-x: error: one line")
    srv.close()  # no more cells: the server exits cleanly
    assert srv.proc.returncode == 0


def test_cells_die_with_the_server_and_a_dead_server_fails_new_cells(server, tmp_path):
    srv, env = server
    out = tmp_path / "sleep.txt"
    cell = srv.start([sys.executable, "-m", "cellmod", "sleep"], out, env, cwd=str(tmp_path))
    pid = cell.wait_started()
    wait_for(lambda: out.is_file() and "sleeping" in out.read_text(), 60, "the cell to start sleeping")
    os.kill(srv.proc.pid, signal.SIGKILL)  # the server only: its cell must follow
    assert cell.wait() != 0  # reported failed: the server is gone
    wait_exit(pid, 10, "the cell to die with its server")
    assert not alive(pid)
    late = srv.start([sys.executable, "-m", "cellmod", "ok"], tmp_path / "late.txt", env)
    assert late.wait() == forkserver.START_FAILED


def test_only_modules_are_forked(server, tmp_path):
    srv, env = server
    with pytest.raises(ValueError, match="runs modules"):
        srv.start([sys.executable, "script.py"], tmp_path / "o.txt", env)
