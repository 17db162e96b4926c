"""On-disk cache of generated datasets, keyed by a hash of the generator config.

Writes are atomic (:mod:`cbm.core.atomic`) and guarded by a file lock, so parallel
sweep jobs share one cache safely. Each file stores its key: a corrupted or truncated
file, a file of another config or one missing an array is detected on load and
regenerated; temp files of killed writers are removed on the next access.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock

from cbm.core.atomic import (
    WriteError,
    clean_orphans,
    describe,
    ensure_dir,
    save_npz_atomic,
    write_json_atomic,
)
from synthetic.base import SyntheticData

log = logging.getLogger(__name__)

#: Bump when a generator's output changes for the same config.
CACHE_VERSION = 1


def config_hash(cfg: dict[str, Any]) -> str:
    """Stable 16-hex-digit fingerprint of a JSON-serialisable config."""
    blob = json.dumps({"v": CACHE_VERSION, "cfg": cfg}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


#: Array in every cache file holding its key, so a file of another config is never served.
KEY_ARRAY = "__cache_key__"


def _try_load(path: Path, key: str, required: Collection[str]) -> dict[str, np.ndarray] | None:
    """The entry's arrays, or ``None`` (with a warning) when it is unreadable, of another
    config, or lacks an array the caller needs."""
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
    except Exception as err:  # truncated zip, bad CRC, wrong format ...
        log.warning("cache file %s is unreadable (%s); regenerating", path, err)
        return None
    stored = str(arrays.pop(KEY_ARRAY, ""))
    missing = [k for k in required if k not in arrays]
    if stored != key or missing:
        why = f"it holds another config ({stored or 'no key'})" if stored != key else f"it lacks {missing}"
        log.warning("cache file %s is not this dataset: %s; regenerating", path, why)
        return None
    return arrays


def cached_arrays(
    cfg: dict[str, Any],
    build: Callable[[], dict[str, np.ndarray]],
    cache_dir: str | Path | None,
    prefix: str = "data",
    required: Collection[str] = (),
) -> dict[str, np.ndarray]:
    """Return ``build()``'s arrays, from ``cache_dir`` when a valid entry exists.

    ``cache_dir=None`` disables caching. A cache directory that cannot be written (read-only,
    full) only costs the caching: the data are built in memory and a warning says why.
    ``required``: arrays a valid entry must hold.
    """
    if cache_dir is None:
        return build()
    cache_dir = ensure_dir(cache_dir)
    clean_orphans(cache_dir)
    key = config_hash(cfg)
    path = cache_dir / f"{prefix}-{key}.npz"
    try:
        lock = FileLock(str(path) + ".lock")
        lock.acquire()
    except OSError as err:  # read-only cache: readable entries still serve
        arrays = _try_load(path, key, required) if path.exists() else None
        if arrays is None:
            log.warning("%s; the data are not cached", describe(err, path.parent, "use cache directory"))
            arrays = build()
        return arrays
    try:
        if path.exists():
            arrays = _try_load(path, key, required)
            if arrays is not None:
                return arrays
        arrays = build()
        try:
            save_npz_atomic(path, {**arrays, KEY_ARRAY: np.array(key)})
            write_json_atomic(path.with_suffix(".json"), cfg)
        except WriteError as err:
            log.warning("%s; the data are not cached", err)
        return arrays
    finally:
        lock.release()


#: Where expensive building blocks shared across configs (glyph banks, MIP-solved grids) are cached:
#: the data cache of the dataset being generated (``None``: memory only).
_AUX_DIR: ContextVar[str | None] = ContextVar("cbm_aux_cache_dir", default=None)


@contextmanager
def aux_cache(cache_dir: str | Path | None) -> Iterator[None]:
    """Within the block, :func:`cached_block` stores its arrays under ``cache_dir`` (per thread / task)."""
    token = _AUX_DIR.set(None if cache_dir is None else str(cache_dir))
    try:
        yield
    finally:
        _AUX_DIR.reset(token)


def cached_block(key: dict[str, Any], build: Callable[[], np.ndarray], prefix: str) -> np.ndarray:
    """``build()``'s array through the auxiliary cache set by :func:`aux_cache` (atomic, locked,
    keyed and validated like datasets); without one, just ``build()``."""
    return cached_arrays(key, lambda: {"block": build()}, _AUX_DIR.get(), prefix=prefix, required=("block",))["block"]


def cached_block_arrays(key: dict[str, Any], build: Callable[[], dict[str, np.ndarray]], prefix: str,
                        required: Collection[str] = ()) -> dict[str, np.ndarray]:  # fmt: skip
    """Several arrays through the auxiliary cache set by :func:`aux_cache` (as :func:`cached_block`);
    without one, just ``build()``. What a run computes once and other runs reuse (a trained OCR)."""
    return cached_arrays(key, build, _AUX_DIR.get(), prefix=prefix, required=required)


def cached_without_images(
    key: dict[str, Any],
    build: Callable[[], SyntheticData],
    images: Callable[[dict[str, np.ndarray]], Any],
    cache_dir: str | Path | None,
    prefix: str,
) -> SyntheticData:
    """A dataset whose images live elsewhere (a memory-mapped ``.npy``, or rendered per batch):
    every array but ``x`` through the cache as ``<prefix>-<hash>.npz``, so a later load reads the
    labels, concepts and attributes instead of recomputing them. ``build()`` makes the whole
    dataset (its ``x`` already disk-backed or lazy); ``images(arrays)`` gives ``x`` from the cached
    arrays (opens the finished file, resumes an unfinished one, or renders lazily)."""
    made: dict[str, Any] = {}

    def build_rest() -> dict[str, np.ndarray]:
        data = build()
        made["x"] = data.x
        arrays = data.to_arrays()
        arrays.pop("x")
        return arrays

    required = [k for k in SyntheticData.ARRAY_KEYS if k != "x"]
    rest = cached_arrays({**key, "arrays": "all but x"}, build_rest, cache_dir, prefix=prefix, required=required)
    x = made["x"] if "x" in made else images(rest)
    return SyntheticData.from_arrays({**rest, "x": x})
