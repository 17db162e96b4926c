"""Waiting on a thread pool from the main thread without losing a Ctrl-C.

Linux may hand a process-directed SIGINT to any thread, and Python runs the handler only in the main
thread when it next executes Python code. A main thread blocked in ``Future.result()`` or
``as_completed`` would raise ``KeyboardInterrupt`` only when the next task ends (a cell's whole
training), and a ``with ThreadPoolExecutor`` block would then still run every queued task before
exiting. :func:`drain` wakes every :data:`POLL_S` seconds and, on any exception, cancels what has not
started, so a Ctrl-C stops the command at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from typing import Any

#: Seconds the main thread waits on the pool before checking for a signal again.
POLL_S = 0.5


def drain(pool: Executor, futures: Iterable[Future], on_done: Callable[[Future], Any] | None = None,
          poll_s: float = POLL_S) -> None:  # fmt: skip
    """Call ``on_done(future)`` for each future as it finishes (default: ``future.result()``, so a
    task's error is raised here). On any exception, a Ctrl-C included, the tasks not started yet are
    cancelled (``pool.shutdown(cancel_futures=True)``) and the exception propagates."""
    pending = set(futures)
    try:
        while pending:
            done, pending = wait(pending, timeout=poll_s, return_when=FIRST_COMPLETED)
            for fut in done:
                (on_done or Future.result)(fut)
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
