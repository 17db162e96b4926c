"""Helpers shared by the benchmark scripts (run as ``python benchmarks/bench_*.py``)."""

from __future__ import annotations

import time
from collections.abc import Callable


def single_thread() -> None:
    """Measure single-threaded: one torch thread (numpy threads are pinned by the scripts' env)."""
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:  # the generators themselves do not need torch
        pass


def best_rate(fn: Callable[[], object], n: int, repeats: int) -> float:
    """Items per second of ``fn()`` producing ``n`` items, best of ``repeats`` runs."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return n / best
