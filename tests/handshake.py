"""Waiting for another process's state: the one place the tests wait on something they cannot be
handed an event for (a file another process writes, a process that exits).

A test never sleeps for a fixed time hoping a state is reached: it waits for the state itself, with a
deadline that only a broken run reaches. Where the other side is in the test's own process, it hands
over a ``threading.Event`` or a pipe instead.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

#: Seconds between two looks at a state another process changes (files, /proc): how soon the wait
#: notices it, not how long anything is given to happen.
LOOK_S = 0.05


def wait_for(predicate: Callable[[], T], timeout: float, what: str) -> T:
    """The first truthy value of ``predicate()``; ``AssertionError`` naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(LOOK_S)  # the interval between two looks at the state (see LOOK_S)


def wait_exit(pid: int, timeout: float, what: str) -> None:
    """Wait until the process ``pid`` has exited (a zombie counts: it runs no more), through a pidfd
    where the kernel has them."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfd here, or the process is gone already
        wait_for(lambda: not alive(pid), timeout, what)
        return
    try:
        if not select.select([fd], [], [], timeout)[0]:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
    finally:
        os.close(fd)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().split(") ")[-1][:1] != "Z"
    except OSError:
        return False


def read_until(stream, marker: str, timeout: float) -> str:
    """What a child wrote on ``stream`` (a pipe) up to and including ``marker``, its hand-shake; read
    from the file descriptor itself, so nothing waits in a Python buffer that ``select`` cannot see."""
    fd = stream.fileno()
    seen = b""
    deadline = time.monotonic() + timeout
    while marker.encode() not in seen:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise AssertionError(f"no {marker!r} from the child within {timeout} s; it wrote: {seen.decode(errors='replace')[-2000:]}")
        chunk = os.read(fd, 65536)
        if not chunk:
            raise AssertionError(f"the child closed its output before {marker!r}; it wrote: {seen.decode(errors='replace')[-2000:]}")
        seen += chunk
    return seen.decode(errors="replace")
