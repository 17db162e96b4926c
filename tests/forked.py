"""Run a console script the way the tests need many times over: forked from a server that imported
torch and Lightning once (:mod:`cbm.core.forkserver`), in its own process, without the
10-20 s of imports a fresh interpreter pays per command on a small CPU."""

from __future__ import annotations

import atexit
import subprocess
import sys
import tempfile
from importlib.metadata import entry_points
from pathlib import Path

from cbm.core import forkserver

#: One fork server per test process and ``PYTHONPATH`` (see :func:`run_forked`), started at the first case.
_servers: dict[str, forkserver.ForkServer] = {}


def run_forked(prog: str, args: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    """``prog args`` as a process forked from a server that imported torch and Lightning once: the
    console script's module run as ``__main__`` in its own process (environment, working directory,
    stdout, stderr and exit status its own), without the 10-20 s of imports per case. A
    ``PYTHONPATH`` in ``env`` (a ``sitecustomize`` that must run at interpreter start, as the network
    guard does) gets its own server started with it, so every fork inherits what it installed."""
    module = next(e.value.split(":")[0] for e in entry_points(group="console_scripts") if e.name == prog)
    path = env.get("PYTHONPATH", "")
    server = _servers.get(path)
    if server is None or server.proc.poll() is not None:
        server = _servers[path] = forkserver.ForkServer(env=dict(env) if path else None)
        atexit.register(server.proc.kill)
    with tempfile.TemporaryDirectory() as tmp:
        out, err = Path(tmp) / "out", Path(tmp) / "err"
        cell = server.start([sys.executable, "-m", module, *args], out, env, cwd=str(cwd), err=err)
        try:
            code = cell.wait(timeout)
        except subprocess.TimeoutExpired:
            cell.kill()
            raise
        return subprocess.CompletedProcess([prog, *args], code, out.read_text(errors="replace"), err.read_text(errors="replace"))
