"""Requested dataset sizes against this machine's memory and disk, before anything is generated.

``data.n_train=100000000000`` would otherwise die deep in NumPy with a ``MemoryError`` (or be
killed by the kernel) after minutes; every data config states a rough ``footprint(storage)`` and
:func:`check_footprint` refuses one that cannot fit with one line naming the knobs to turn.
The estimates are lower bounds (the inputs plus a small per-row overhead), so a refused request
certainly does not fit; one that passes may still be slow.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from cbm.core.safe_paths import existing_ancestor


def human_bytes(n: float) -> str:
    """``1536`` -> ``1.5 KiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"  # pragma: no cover


def _cgroup_limit() -> int | None:
    """The memory limit of this process's cgroup (v2 or v1), if one is set."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:
            return int(text)
    return None


def memory_bytes() -> int | None:
    """Physical memory this process may use (``None`` where it cannot be read)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None
    limit = _cgroup_limit()
    return min(total, limit) if limit else total


def free_disk_bytes(directory: str | Path) -> int | None:
    """Free space of the file system ``directory`` is (or would be created) on."""
    try:
        return shutil.disk_usage(existing_ancestor(directory)).free
    except OSError:
        return None


def check_footprint(cfg: Any, storage: str = "memory", cache_dir: str | Path | None = None) -> None:
    """``ValueError`` with one line when the dataset ``cfg`` (any config with ``footprint``) cannot
    fit in memory, or its on-disk images (``storage="disk"``) on ``cache_dir``'s file system."""
    need = cfg.footprint(storage)
    what = f"{need['rows']:,} {need['unit']} ({need['form']}, data_storage={storage})"
    have = memory_bytes()
    if have is not None and need["memory"] > have:
        hint = " or data_storage=disk" if need["disk_possible"] and storage == "memory" else ""
        raise ValueError(f"data: {what} need at least {human_bytes(need['memory'])} of memory, this machine has "
                         f"{human_bytes(have)}: lower data.{', data.'.join(need['knobs'])}{hint}")  # fmt: skip
    if need["disk"] and cache_dir is not None:
        free = free_disk_bytes(cache_dir)
        if free is not None and need["disk"] > free:
            raise ValueError(f"data: {what} need at least {human_bytes(need['disk'])} of disk in cache_dir "
                             f"({cache_dir}), which has {human_bytes(free)} free: lower data.{', data.'.join(need['knobs'])}")  # fmt: skip
