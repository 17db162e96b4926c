"""Stopping a command at once: Ctrl-C and SIGTERM, whatever the process inherited, and a thread pool
the main thread waits on without losing either.

Three things stood between a signal and a stopped command:

- **An inherited disposition.** A background job of a non-interactive shell (``make test &``, a CI
  runner, a job script) starts with SIGINT *ignored*, and Python keeps it so; a library may leave it
  ignored too (Lightning does after it handles a Ctrl-C). :func:`stop_signals` takes both signals for
  the command's duration, whatever came before, and gives the old handlers back afterwards.
- **The thread the kernel picks.** Linux may hand a process-directed signal to any thread, and Python
  runs the handler only in the main thread when it next executes Python code. A main thread blocked in
  ``Future.result()`` would notice only when the task ends (a cell's whole training). :func:`drain`
  wakes every :data:`POLL_S` seconds and, on any exception, cancels what has not started.
- **A scheduler's pre-emption.** SIGTERM (SLURM, Kubernetes, ``kill``) raises :class:`Terminated`, so
  the command stops like a Ctrl-C, says so, and exits 143: a scheduler never reads it as a success.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from contextlib import contextmanager
from functools import wraps
from typing import Any, NoReturn

#: Seconds the main thread waits on the pool before it checks for a signal again: a Ctrl-C the
#: kernel hands to a worker thread stops the command within this (plus scheduling) time.
POLL_S = 0.1

#: Exit codes of a stopped command (128 + the signal's number, as a shell reports a killed process).
EXIT_INTERRUPTED = 128 + signal.SIGINT
EXIT_TERMINATED = 128 + signal.SIGTERM


class Terminated(BaseException):
    """SIGTERM arrived: the command stops like a Ctrl-C (a ``BaseException``, so no ``except
    Exception`` in a library swallows it) and exits with :data:`EXIT_TERMINATED`."""


def _raise_terminated(signum: int, frame: Any) -> NoReturn:
    raise Terminated()


@contextmanager
def stop_signals() -> Iterator[None]:
    """Within the block, SIGINT raises ``KeyboardInterrupt`` and SIGTERM raises :class:`Terminated` in
    the main thread, and neither is blocked there, whatever the process inherited or a library set
    before; on exit the previous handlers and mask come back (nothing leaks to a caller). Outside the
    main thread (where Python cannot set handlers) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    taken = (signal.SIGINT, signal.SIGTERM)
    old = {s: signal.getsignal(s) for s in taken}
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, taken)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def stop_code(err: BaseException) -> int:
    """The exit code of a command stopped by ``err`` (a Ctrl-C or a SIGTERM)."""
    return EXIT_TERMINATED if isinstance(err, Terminated) else EXIT_INTERRUPTED


def stopped(prog: str, err: BaseException, hint: str = "") -> NoReturn:
    """Say in one line that ``prog`` was stopped and by what (``hint``: what to do next), then exit with
    :func:`stop_code`."""
    what = "terminated (SIGTERM)" if isinstance(err, Terminated) else "interrupted"
    print(f"{prog}: {what}" + (f"; {hint}" if hint else ""), file=sys.stderr)
    sys.exit(stop_code(err))


def stoppable(prog: str) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    """Decorator of a command's ``main()``: it runs under :func:`stop_signals`, and a Ctrl-C or SIGTERM
    that reaches it is one line (:func:`stopped`) and exit 130 / 143, never a traceback."""

    def deco(main: Callable[[], Any]) -> Callable[[], Any]:
        @wraps(main)
        def run() -> Any:
            with stop_signals():
                try:
                    return main()
                except (KeyboardInterrupt, Terminated) as err:
                    stopped(prog, err)

        return run

    return deco


def drain(pool: Executor, futures: Iterable[Future], on_done: Callable[[Future], Any] | None = None,
          poll_s: float = POLL_S) -> None:  # fmt: skip
    """Call ``on_done(future)`` for each future as it finishes (default: ``future.result()``, so a
    task's error is raised here). On any exception, a Ctrl-C or SIGTERM included, the tasks not
    started yet are cancelled (``pool.shutdown(cancel_futures=True)``) and the exception propagates."""
    pending = set(futures)
    try:
        while pending:
            done, pending = wait(pending, timeout=poll_s, return_when=FIRST_COMPLETED)
            for fut in done:
                (on_done or Future.result)(fut)
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
