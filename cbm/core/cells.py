"""The cells of an experiment that run now: started as processes or forked from the fork server,
stopped together (a Ctrl-C, a SIGTERM), and no new one started once stopping began."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from pathlib import Path

from cbm.core.forkserver import ForkedCell, ForkServer
from cbm.core.lifeline import start


def stop(proc: subprocess.Popen | ForkedCell) -> None:
    """Kill a running cell and everything in its process group."""
    started = getattr(proc, "wait_started", None)  # a forked cell: its pid comes from the server
    if started is not None and started() is None:
        return  # the server ended it before it started
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (OSError, AttributeError):  # no process groups (Windows) or already gone
        proc.kill()
    proc.wait()


class Running:
    """The cell processes alive now, so an interrupted experiment stops them (and starts no more).
    With a :class:`~cbm.core.forkserver.ForkServer` the cells are forked from it (no import
    cost per cell), else each is a fresh ``python -m`` process."""

    def __init__(self, server: ForkServer | None = None) -> None:
        self.procs: set[subprocess.Popen | ForkedCell] = set()
        self.lock = threading.Lock()
        self.stopping = False
        self.server = server

    def start(self, cmd: list[str], out: Path, env: dict[str, str]) -> subprocess.Popen | ForkedCell | None:
        # The calling thread must stay alive, blocked in :meth:`wait`, while the cell runs:
        # PR_SET_PDEATHSIG fires when the parent *thread* that forked the cell exits, not the process.
        with self.lock:
            if self.stopping:
                return None
            proc = self.server.start(cmd, out, env) if self.server is not None else start(cmd, out, env)
            self.procs.add(proc)
            return proc

    def wait(self, proc: subprocess.Popen | ForkedCell) -> int:
        code = proc.wait()
        with self.lock:
            self.procs.discard(proc)
        return code

    def stop_all(self) -> None:
        with self.lock:
            self.stopping = True
            procs = list(self.procs)
        for proc in procs:
            stop(proc)
