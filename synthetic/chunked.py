"""Images rendered chunk by chunk into a memory-mapped ``.npy``: datasets larger than memory.

:func:`render_to_npy` fills ``<path>.partial`` (a ``.npy`` opened with ``numpy.lib.format.open_memmap``)
``chunk`` rows at a time from ``render(a, b) -> uint8 [b-a, ...]`` (positioned writes, fsync-ed);
after each chunk ``<path>.progress.json`` records the rows done (atomically). When every row is done the
partial file is renamed to ``path``. A killed run leaves the partial file and its progress: the
next call with the same key resumes after the last recorded chunk (a chunk that was being written
is simply written again), and no reader ever opens a partial file. Peak memory is one chunk.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from cbm.core.atomic import ensure_dir, write_json_atomic

log = logging.getLogger(__name__)

PARTIAL = ".partial"
PROGRESS = ".progress.json"


def _progress(path: Path) -> Path:
    return path.with_name(path.name + PROGRESS)


def _partial(path: Path) -> Path:
    return path.with_name(path.name + PARTIAL)


def render_to_npy(
    path: str | Path,
    shape: tuple[int, ...],
    render: Callable[[int, int], np.ndarray],
    chunk: int,
    key: str,
    dtype: Any = np.uint8,
    on_chunk: Callable[[int, int], None] | None = None,
    skip: Callable[[int, int], None] | None = None,
) -> np.ndarray:
    """The finished array at ``path`` (memory-mapped, read-only), rendering what is missing.

    ``render(a, b)`` gives rows ``a:b``; ``skip(a, b)`` (optional) is called instead for rows a
    resumed run already has, for renderers whose random streams must advance in order (pixel noise);
    ``on_chunk(b, n)`` reports progress. ``key`` identifies what is rendered (a partial file of
    another key is discarded).
    """
    path = Path(path)
    ensure_dir(path.parent)
    if path.exists():
        arr = np.load(path, mmap_mode="r")
        if arr.shape == tuple(shape) and arr.dtype == np.dtype(dtype):
            return arr
        log.warning("%s holds shape %s %s, expected %s: rendering again", path, arr.shape, arr.dtype, shape)
        path.unlink()
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    partial, progress = _partial(path), _progress(path)
    n = int(shape[0])
    done = 0
    if partial.exists() and progress.exists():
        try:
            state = json.loads(progress.read_text())
            if state.get("key") == key and tuple(state.get("shape", ())) == tuple(shape):
                done = int(state["done"])
        except (OSError, ValueError, KeyError):
            done = 0
    row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * np.dtype(dtype).itemsize
    if done == 0 or not partial.exists():
        done = 0
        header = np.lib.format.open_memmap(partial, mode="w+", dtype=dtype, shape=tuple(shape))  # header + sparse file
        del header
    else:
        log.info("%s: resuming after %d of %d rows", path, done, n)
        if skip is not None:
            for a in range(0, done, chunk):
                skip(a, min(done, a + chunk))
    offset = partial.stat().st_size - n * row_bytes  # the .npy header's length
    # plain positioned writes, not a writable map: written pages never count in this process's memory
    with open(partial, "r+b") as f:
        for a in range(done, n, chunk):
            b = min(n, a + chunk)
            block = np.ascontiguousarray(render(a, b), dtype=dtype)
            if block.shape != (b - a, *shape[1:]):
                raise ValueError(f"render({a}, {b}) gave shape {block.shape}, expected {(b - a, *shape[1:])}")
            os.pwrite(f.fileno(), memoryview(block).cast("B"), offset + a * row_bytes)
            os.fsync(f.fileno())
            write_json_atomic(progress, {"key": key, "shape": list(shape), "done": b})
            if on_chunk is not None:
                on_chunk(b, n)
    os.replace(partial, path)
    progress.unlink(missing_ok=True)
    return np.load(path, mmap_mode="r")
