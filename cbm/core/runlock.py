"""One process per run directory: an exclusive lock on ``<dir>/.lock``.

Two commands writing into one directory (two ``cbm-experiment`` runs on one ``output_dir``, a
``cbm-train hydra.run.dir=...`` on a cell an experiment is running) would interleave their CSV
logs and checkpoints. Every Hydra app therefore holds the lock of its run directory while its
task runs, and ``cbm-experiment`` that of its ``output_dir``. The lock is an ``flock`` (POSIX) or
``msvcrt`` byte lock, which the kernel drops when its process dies, so a killed owner never
blocks a rerun; the owner's pid, host, start time and command are written into the file for the
refusal line and are advisory only. A lock won on a file that was removed meanwhile (a failed
run's directory cleaned up) locks nothing: it is dropped and the file now there taken instead.
The other ranks of a multi-process run work in rank zero's
directory under its lock (:func:`secondary_rank`).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]
    import msvcrt

#: The lock file every locked directory holds.
LOCK_NAME = ".lock"
#: Longest command shown in the refusal line.
COMMAND_CHARS = 160
#: How long an acquisition retries before it reports the directory busy (a probe by another
#: process holds the lock for microseconds).
RETRY_S = 0.5
#: How often an acquisition reopens a lock file that was removed while it waited for it.
REOPENS = 5

#: Directories this process holds: resolved path -> (file descriptor, nesting count).
_held: dict[str, list[int]] = {}


def _forget_in_child() -> None:
    """A forked child (a DataLoader worker) closes its copies of the held lock descriptors and holds
    nothing: an flock belongs to the open file, so a child's copy would keep the directory locked
    after its owner died, and a child's unlock would release the owner's lock."""
    for fd, _ in _held.values():
        try:
            os.close(fd)
        except OSError:  # pragma: no cover - already closed
            pass
    _held.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


#: Environment variables naming a process's rank in a multi-process job (Lightning, torchrun, SLURM, MPI).
RANK_VARS = ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID", "PMI_RANK", "OMPI_COMM_WORLD_RANK")


def secondary_rank() -> bool:
    """A rank other than zero of a multi-process run: it shares rank zero's run directory (DDP
    relaunches the command with the same ``hydra.run.dir``), so it neither takes nor checks the lock."""
    return any(os.environ.get(v, "0").strip() not in ("", "0") for v in RANK_VARS)


class Busy(ValueError):
    """Another live process holds the directory (one line naming it)."""


def _key(directory: str | Path) -> str:
    return str(Path(directory).resolve())


def _try_lock(fd: int) -> bool:
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        else:  # pragma: no cover
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        return True
    except OSError:
        return False


def _unlock(fd: int) -> None:
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
        else:  # msvcrt unlocks the bytes at the current position, which the owner info moved
            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
    finally:
        os.close(fd)


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``fd`` is still the file at ``path`` (not one removed, or replaced, since it was opened)."""
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


def _command() -> str:
    """This process's command line as typed: ``cbm-experiment ...`` or ``python -m cbm.experiments.train ...``."""
    parts = list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])
    if len(parts) > 1 and Path(parts[1]).name.startswith("cbm-"):  # a console script
        return " ".join([Path(parts[1]).name, *parts[2:]])
    return " ".join(["python", *parts[1:]])


def _owner() -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": _command()}  # fmt: skip


def _read_owner(path: Path) -> dict[str, Any]:
    try:
        info = json.loads(path.read_text())
        return info if isinstance(info, dict) else {}
    except (OSError, ValueError):
        return {}


def describe(info: dict[str, Any]) -> str:
    """``pid 123 on host since 2025-01-01 12:00:00 (cbm-experiment +experiment=x)``."""
    if not info:
        return "another process (owner unknown)"
    cmd = str(info.get("command", ""))
    cmd = cmd if len(cmd) <= COMMAND_CHARS else cmd[: COMMAND_CHARS - 3] + "..."
    return f"pid {info.get('pid', '?')} on {info.get('host', '?')} since {info.get('started', '?')} ({cmd})"


def holder(directory: str | Path) -> dict[str, Any] | None:
    """The owner of ``directory``'s lock when another live process holds it, else ``None``
    (no lock file, a lock left by a dead process, or one this process holds)."""
    path = Path(directory) / LOCK_NAME
    if _key(directory) in _held or not path.is_file():
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        else:  # pragma: no cover
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    except OSError:
        os.close(fd)
        return _read_owner(path)
    _unlock(fd)
    return None


def busy_line(directory: str | Path, info: dict[str, Any], advice: str) -> str:
    return f"{directory} is in use by {describe(info)}: {advice}"


def holds(directory: str | Path) -> bool:
    """Whether this process holds ``directory``'s lock."""
    return _key(directory) in _held


def acquire(directory: str | Path, advice: str = "wait for it to finish or choose another directory",
            retry_s: float = RETRY_S) -> None:  # fmt: skip
    """Hold ``directory``'s lock (re-entrant in one process); :class:`Busy` when a live process
    holds it (after ``retry_s``). The directory must exist. A secondary rank takes nothing (it
    works under rank zero's)."""
    if secondary_rank():
        return
    key = _key(directory)
    if key in _held:
        _held[key][1] += 1
        return
    path = Path(directory) / LOCK_NAME
    deadline = time.monotonic() + retry_s
    for _ in range(REOPENS):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        while not _try_lock(fd):
            if time.monotonic() > deadline:
                os.close(fd)
                raise Busy(busy_line(directory, _read_owner(path), advice))
            time.sleep(0.02)
        if _same_file(fd, path):
            break
        _unlock(fd)  # the file was removed while this waited (remove_if_unused): a lock on nothing
    else:
        raise Busy(busy_line(directory, _read_owner(path), advice))
    os.ftruncate(fd, 0)
    os.write(fd, json.dumps(_owner()).encode())
    _held[key] = [fd, 1]


def release(directory: str | Path) -> None:
    """Let go of a lock :func:`acquire` took (the file stays: removing it would race a waiter)."""
    key = _key(directory)
    entry = _held.get(key)
    if entry is None:
        return
    entry[1] -= 1
    if entry[1] == 0:
        del _held[key]
        _unlock(entry[0])


@contextmanager
def hold(directory: str | Path, advice: str = "wait for it to finish or choose another directory"):
    """``with hold(dir): ...`` -- the directory's lock for the block."""
    acquire(directory, advice)
    try:
        yield
    finally:
        release(directory)


def check_free(directory: str | Path, advice: str = "wait for it to finish or choose another directory") -> None:
    """:class:`Busy` when another live process holds ``directory`` (a probe; takes nothing). Rank
    zero's lock is no refusal for the other ranks of its run."""
    info = None if secondary_rank() else holder(directory)
    if info is not None:
        raise Busy(busy_line(directory, info, advice))
