"""``cbm.concurrency.drain``: results as they finish, errors raised, and a Ctrl-C that stops at once
and starts nothing more, even when the kernel hands the signal to a worker thread."""

from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from cbm.concurrency import POLL_S, drain


def test_every_result_reaches_on_done_and_a_task_error_is_raised():
    seen = []
    with ThreadPoolExecutor(2) as pool:
        drain(pool, [pool.submit(lambda i=i: i * i) for i in range(10)], lambda f: seen.append(f.result()))
    assert sorted(seen) == [i * i for i in range(10)]
    with ThreadPoolExecutor(2) as pool, pytest.raises(ZeroDivisionError):
        drain(pool, [pool.submit(lambda: 1 / 0)])


def test_a_ctrl_c_on_a_worker_thread_stops_the_pool_and_starts_nothing_more():
    started = []

    def task(i: int) -> None:
        started.append(i)
        if i == 0:
            time.sleep(1)  # the main thread is waiting on the pool by now
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # the signal lands on this worker
        time.sleep(0.5)

    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt), ThreadPoolExecutor(1) as pool:
        drain(pool, [pool.submit(task, i) for i in range(20)])
    assert time.monotonic() - t0 < 1.5 + 2 * POLL_S + 1  # not the 10.5 s the queue would take
    assert len(started) <= 2, started  # the queued tasks were cancelled, not run
