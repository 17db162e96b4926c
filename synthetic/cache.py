"""On-disk cache of generated datasets, keyed by a hash of the generator config.

Writes are atomic (temp file in the same directory + ``os.replace``) and guarded
by a file lock, so parallel sweep jobs share one cache safely; a corrupted or
truncated cache file is detected on load and regenerated.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock

log = logging.getLogger(__name__)

#: Bump when a generator's output changes for the same config.
CACHE_VERSION = 1


def config_hash(cfg: dict[str, Any]) -> str:
    """Stable 16-hex-digit fingerprint of a JSON-serialisable config."""
    blob = json.dumps({"v": CACHE_VERSION, "cfg": cfg}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def make_temp(path: Path) -> tuple[int, str]:
    """A temp file beside ``path`` (same filesystem, so ``os.replace`` is atomic) with the
    permissions a plain ``open`` would give (``mkstemp`` alone makes it owner-only)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    os.chmod(tmp, 0o666 & ~_umask())
    return fd, tmp


def atomic_save_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Save ``arrays`` to ``path`` so that readers never see a partial file."""
    fd, tmp = make_temp(path)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _try_load(path: Path) -> dict[str, np.ndarray] | None:
    try:
        with np.load(path, allow_pickle=False) as f:
            return {k: f[k] for k in f.files}
    except Exception as err:  # truncated zip, bad CRC, wrong format ...
        log.warning("cache file %s is unreadable (%s); regenerating", path, err)
        return None


def cached_arrays(
    cfg: dict[str, Any],
    build: Callable[[], dict[str, np.ndarray]],
    cache_dir: str | Path | None,
    prefix: str = "data",
) -> dict[str, np.ndarray]:
    """Return ``build()``'s arrays, from ``cache_dir`` when a valid entry exists.

    ``cache_dir=None`` disables caching.
    """
    if cache_dir is None:
        return build()
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / f"{prefix}-{config_hash(cfg)}.npz"
    with FileLock(str(path) + ".lock"):
        if path.exists():
            arrays = _try_load(path)
            if arrays is not None:
                return arrays
        arrays = build()
        atomic_save_npz(path, arrays)
        with open(path.with_suffix(".json.tmp"), "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True, default=str)
        os.replace(path.with_suffix(".json.tmp"), path.with_suffix(".json"))
        return arrays
