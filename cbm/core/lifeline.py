"""Cells die with their ``cbm-experiment``: no orphan keeps writing into a cell after its parent is gone,
and :class:`Running` stops the live ones when the experiment is interrupted.

The parent starts every cell in its own session (so stopping a cell stops the cell's whole
process group) and names itself in ``CBM_PARENT_PID``. The cell, first thing in its ``main``,
calls :func:`die_with_parent`: on Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` makes the kernel kill
it when the parent dies, even by ``kill -9``; elsewhere a watchdog thread polls the parent pid.
Either way a parent that died before the call is noticed at once (the cell was re-parented) and the
cell exits with one line on stderr. Once armed, the cell names *itself* in ``CBM_PARENT_PID``: the
processes it starts (the other ranks DDP relaunches with the same command, any cbm command) inherit
the variable and die with the cell, instead of finding a pid that is not their parent.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

#: Environment variable naming the pid a cell must not outlive.
PARENT_ENV = "CBM_PARENT_PID"
#: Seconds between the watchdog's checks where ``prctl`` is not available.
POLL_S = 1.0
PR_SET_PDEATHSIG = 1

_armed = False


def _prctl_deathsig() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _orphaned(parent: int) -> bool:
    return os.getppid() != parent


def _exit_orphaned(parent: int) -> None:
    print(f"cbm: parent {parent} is gone; exiting ({PARENT_ENV}={parent})", file=sys.stderr, flush=True)
    os._exit(137)


def _watchdog(parent: int) -> None:
    while not _orphaned(parent):
        time.sleep(POLL_S)
    _exit_orphaned(parent)


def die_with_parent() -> None:
    """In a cell (``CBM_PARENT_PID`` set): be killed when that parent dies. A no-op elsewhere."""
    global _armed
    value = os.environ.get(PARENT_ENV, "")
    if _armed or not value.isdigit():
        return
    _armed = True
    parent = int(value)
    if not _prctl_deathsig():
        threading.Thread(target=_watchdog, args=(parent,), daemon=True, name="cbm-lifeline").start()
    if _orphaned(parent):  # the parent died before the death signal was armed, or a stale variable
        _exit_orphaned(parent)
    os.environ[PARENT_ENV] = str(os.getpid())  # what this process starts dies with it, not with its parent


def start(cmd: list[str], out_path: Path, env: dict[str, str]) -> subprocess.Popen:
    """Start a cell: its own session, stdout and stderr into ``out_path``, bound to this process."""
    with open(out_path, "w") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**env, PARENT_ENV: str(os.getpid())},
                                start_new_session=True)  # fmt: skip
