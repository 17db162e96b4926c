"""Reading a dataset's published files: one clear line naming the file for anything wrong with them.

Every reader of :mod:`synthetic.real` goes through these, so a missing file, a malformed line or an
image that does not open is reported the same way (:class:`LayoutError`, a ``ConfigError``: the
commands print it as one line and exit 2) before any training starts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from cbm.core.validation import ConfigError


class LayoutError(ConfigError):
    """A dataset's files are missing or not in the published layout."""


def need_file(base: Path, rel: str, dataset: str) -> Path:
    """``base / rel``, which must be a readable file."""
    path = base / rel
    if not path.is_file():
        raise LayoutError(f"{dataset}: missing {path} (data.root must hold the dataset as published; see docs/guides/real-data.md)")
    return path


def read_columns(path: Path, dataset: str, n_min: int, parse: Sequence[Callable[[str], object]]) -> list[list[object]]:
    """Whitespace-separated lines of ``path`` with at least ``n_min`` fields, the first ``len(parse)``
    fields converted by ``parse`` (extra fields ignored: some published files carry them); an empty file
    or a bad line is a :class:`LayoutError` naming the file and line."""
    rows: list[list[object]] = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            fields = line.split()
            if len(fields) < n_min:
                raise LayoutError(f"{dataset}: {path} line {i}: expected {n_min} fields, got {len(fields)}: {line.strip()[:80]!r}")
            try:
                rows.append([fn(v) for fn, v in zip(parse, fields)])
            except ValueError:
                raise LayoutError(f"{dataset}: {path} line {i}: not in the published format: {line.strip()[:80]!r}") from None
    if not rows:
        raise LayoutError(f"{dataset}: {path} is empty")
    return rows


def named_rows(path: Path, dataset: str) -> tuple[np.ndarray, list[str]]:
    """``<id> <name with no spaces>`` lines (``images.txt``, ``classes.txt``, ``attributes.txt``):
    the ids (must be 1..n in order) and the names."""
    rows = read_columns(path, dataset, 2, (int, str))
    ids = np.array([r[0] for r in rows], dtype=np.int64)
    if not np.array_equal(ids, np.arange(1, len(ids) + 1)):
        bad = int(np.flatnonzero(ids != np.arange(1, len(ids) + 1))[0])
        raise LayoutError(f"{dataset}: {path}: ids must run 1..{len(ids)} in order; row {bad + 1} has id {ids[bad]}")
    return ids, [str(r[1]) for r in rows]


def id_table(path: Path, dataset: str, n: int, what: str) -> np.ndarray:
    """``<id> <integer>`` lines for ids 1..n, in id order (each id exactly once)."""
    rows = read_columns(path, dataset, 2, (int, int))
    ids = np.array([r[0] for r in rows], dtype=np.int64)
    vals = np.array([r[1] for r in rows], dtype=np.int64)
    if len(ids) != n or not np.array_equal(np.sort(ids), np.arange(1, n + 1)):
        outside = ids[(ids < 1) | (ids > n)]
        why = f"id {int(outside[0])} is not an image id (1..{n})" if len(outside) else f"{len(ids)} rows for {n} images (each id once)"
        raise LayoutError(f"{dataset}: {path}: {why}")
    out = np.empty(n, dtype=np.int64)
    out[ids - 1] = vals
    return out


def load_image(path: Path, size: int, dataset: str) -> np.ndarray:
    """``uint8 [size, size, 3]``: the image's shorter side resized to ``size`` (bilinear) and the
    centre cropped; an image that does not open is a :class:`LayoutError` naming it."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            im = im.convert("RGB")
            w, h = im.size
            s = size / min(w, h)
            im = im.resize((max(size, round(w * s)), max(size, round(h * s))), Image.Resampling.BILINEAR)
            w, h = im.size
            left, top = (w - size) // 2, (h - size) // 2
            return np.asarray(im.crop((left, top, left + size, top + size)), dtype=np.uint8)
    except FileNotFoundError:
        raise LayoutError(f"{dataset}: missing image {path}") from None
    except (UnidentifiedImageError, OSError) as err:
        raise LayoutError(f"{dataset}: image {path} does not open ({type(err).__name__})") from None
