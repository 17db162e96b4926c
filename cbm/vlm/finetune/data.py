"""Counterfactual question/answer rows for fine-tuning: one JSON object per line.

Fields: ``image`` (path, relative to the JSONL file's folder or absolute), ``question``, ``answer``,
``split`` (``original`` | ``counterfactual``), ``pair_id`` (a string or an integer; an original and
its counterfactual share it), optional ``mask`` (path of the changed-pixel mask, the image's size,
non-zero = changed) and ``meta`` (an object, anything in it). Every field is type-checked; a bad
row (not JSON, not an object, a missing, unknown or mistyped field, an empty answer, an unknown
split, a second row of the same pair and split, a missing or unreadable image, an image over the
pixel limit, a mask of another size) is reported with its line number and skipped
(``on_bad="skip"``) or rejects the file (``on_bad="error"``): it never reaches training, where it
would crash mid-epoch. Image sizes are read from the header (:func:`cbm.vlm.images.load_image`), so
a decompression bomb is refused before a pixel is decoded; an image under the limit is decoded once,
so a truncated or corrupt one is a bad row here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cbm.vlm.finetune.config import ON_BAD
from cbm.vlm.images import MAX_IMAGE_PIXELS, ImageError, PixelLimitError, load_image

SPLITS = ("original", "counterfactual")
REQUIRED = ("image", "question", "answer", "split", "pair_id")
FIELDS = (*REQUIRED, "mask", "meta")


@dataclass
class QARow:
    image: str
    question: str
    answer: str
    split: str
    pair_id: str
    mask: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    line: int = 0

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("line")
        if out["mask"] is None:
            out.pop("mask")
        if not out["meta"]:
            out.pop("meta")
        return out


@dataclass
class BadRow:
    line: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


class BadDataError(ValueError):
    """The JSONL file has bad rows and ``on_bad="error"`` (or no usable row is left)."""


def _resolve(base: Path, p: str) -> Path:
    q = Path(p).expanduser()
    return q if q.is_absolute() else base / q


def image_size(path: Path, what: str, max_pixels: int = MAX_IMAGE_PIXELS) -> tuple[int, int] | str:
    """``(width, height)`` of an image file under ``max_pixels`` (checked from the header, before
    decoding) that decodes, or why it is unusable (one line)."""
    if not path.exists():
        return f"{what} not found: {path}"
    if not path.is_file():
        return f"{what} {path} is not a file"
    try:
        with load_image(path, max_pixels, f"{what} {path}") as im:
            w, h = im.size
    except PixelLimitError as err:
        return str(err)
    except ImageError as err:
        return f"unreadable {what} {path} ({err.reason[:160]})"
    if w < 1 or h < 1:
        return f"{what} {path} is empty ({w}x{h})"
    return w, h


def _check(obj: Any, base: Path, line: int, max_pixels: int) -> QARow | BadRow:
    if not isinstance(obj, dict):
        return BadRow(line, f"expected a JSON object, got {type(obj).__name__}")
    missing = [k for k in REQUIRED if k not in obj]
    if missing:
        return BadRow(line, f"missing field(s) {missing}")
    unknown = sorted(set(obj) - set(FIELDS))
    if unknown:
        return BadRow(line, f"unknown field(s) {unknown} (fields: {', '.join(FIELDS)}; put anything else in 'meta')")
    for k in ("image", "question", "answer", "split"):
        if not isinstance(obj[k], str):
            return BadRow(line, f"'{k}' must be a string, got {type(obj[k]).__name__}")
    pid = obj["pair_id"]
    if isinstance(pid, bool) or not isinstance(pid, str | int) or (isinstance(pid, str) and not pid.strip()):
        return BadRow(line, f"'pair_id' must be a non-empty string or an integer, got {pid!r}"[:160])
    if obj.get("mask") is not None and (not isinstance(obj["mask"], str) or not obj["mask"]):
        return BadRow(line, f"'mask' must be a path (a string) or null, got {type(obj['mask']).__name__}")
    if obj.get("meta") is not None and not isinstance(obj["meta"], dict):
        return BadRow(line, f"'meta' must be an object, got {type(obj['meta']).__name__}")
    if not obj["answer"].strip():
        return BadRow(line, "empty answer")
    if not obj["question"].strip():
        return BadRow(line, "empty question")
    if not obj["image"]:
        return BadRow(line, "empty 'image' path")
    if obj["split"] not in SPLITS:
        return BadRow(line, f"unknown split '{obj['split'][:40]}' (expected one of {list(SPLITS)})")
    img = _resolve(base, obj["image"])
    size = image_size(img, "image", max_pixels)
    if isinstance(size, str):
        return BadRow(line, size)
    mask = obj.get("mask")
    if mask is not None:
        mp = _resolve(base, mask)
        msize = image_size(mp, "mask", max_pixels)
        if isinstance(msize, str):
            return BadRow(line, msize)
        if msize != size:
            return BadRow(line, f"mask {mp} is {msize[0]}x{msize[1]}, the image {size[0]}x{size[1]} (a mask marks the image's changed pixels)")
        mask = str(mp)
    return QARow(str(img), obj["question"], obj["answer"].strip(), obj["split"], str(pid), mask, dict(obj.get("meta") or {}), line)


def _parse(raw: bytes, line: int) -> Any:
    """One line's JSON value, or the :class:`BadRow` saying why it is none."""
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        return BadRow(line, f"not UTF-8 text (byte {err.start + 1})")
    except json.JSONDecodeError as err:
        return BadRow(line, f"not JSON ({err.msg} at column {err.colno})")
    except RecursionError:
        return BadRow(line, "not JSON this reader accepts (nested too deeply)")


def load_rows(path: str | Path, on_bad: str = "skip", max_pixels: int = MAX_IMAGE_PIXELS) -> tuple[list[QARow], list[BadRow]]:
    """Every usable row of ``path`` and every bad one (line numbers from 1); image and mask paths
    come back absolute. ``on_bad="error"`` raises :class:`BadDataError` naming the first bad rows."""
    if on_bad not in ON_BAD:
        raise ValueError(f"on_bad must be one of {list(ON_BAD)}, got '{on_bad}'")
    path = Path(path)
    if not path.exists():
        raise BadDataError(f"data.jsonl: no file at {path}")
    if not path.is_file():
        raise BadDataError(f"data.jsonl: {path} is not a regular file")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise BadDataError(f"data.jsonl: cannot read {path}: {err.strerror or err}") from None
    rows: list[QARow] = []
    bad: list[BadRow] = []
    first: dict[tuple[str, str], int] = {}
    for i, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        got = _parse(raw, i)
        if not isinstance(got, BadRow):
            got = _check(got, path.parent, i, max_pixels)
        if isinstance(got, QARow):
            key = (got.pair_id, got.split)
            if key in first:
                got = BadRow(i, f"a second {got.split} of pair_id '{got.pair_id[:60]}' (the first is on line {first[key]})")
            else:
                first[key] = i
        (bad if isinstance(got, BadRow) else rows).append(got)  # type: ignore[arg-type]
    if bad and on_bad == "error":
        shown = "; ".join(map(str, bad[:3])) + (f"; ... {len(bad) - 3} more" if len(bad) > 3 else "")
        raise BadDataError(f"{path}: {len(bad)} bad row(s): {shown}")
    if not rows:
        why = f" ({len(bad)} bad: {bad[0]})" if bad else (" (the file is empty)" if not data.strip() else "")
        raise BadDataError(f"{path}: no usable row{why}")
    return rows, bad


def split_pairs(rows: Sequence[QARow], eval_fraction: float, seed: int) -> tuple[list[QARow], list[QARow]]:
    """Train / evaluation rows, split by original image: an original and its counterfactuals stay
    together, and pairs that share an original (several edits of one photograph or robot) are held
    out together, so no image the evaluation asks about was seen in training."""
    group: dict[str, str] = {}  # pair_id -> the original image it starts from (else the pair itself)
    for r in rows:
        if r.split == "original":
            group[r.pair_id] = str(Path(r.image).resolve()) if r.image else r.pair_id
    for r in rows:
        group.setdefault(r.pair_id, r.pair_id)
    ids = sorted(set(group.values()))
    rng = np.random.default_rng(seed)
    n_eval = max(1, int(round(eval_fraction * len(ids))))
    if n_eval >= len(ids):
        raise ValueError(f"data: {len(ids)} original image(s) cannot be split into training and evaluation (eval_fraction={eval_fraction})")
    held = set(rng.choice(ids, n_eval, replace=False).tolist())
    return [r for r in rows if group[r.pair_id] not in held], [r for r in rows if group[r.pair_id] in held]


def write_rows(path: str | Path, rows: Iterable[QARow]) -> Path:
    """The rows as JSONL (atomic), image and mask paths relative to the file's folder when inside it."""
    from cbm.core.atomic import write_text_atomic

    path = Path(path)
    lines = []
    for r in rows:
        obj = r.to_json()
        for k in ("image", "mask"):
            if k in obj:
                p = Path(obj[k])
                try:
                    obj[k] = str(p.resolve().relative_to(path.parent.resolve()))
                except ValueError:
                    obj[k] = str(p)
        lines.append(json.dumps(obj, ensure_ascii=False))
    return write_text_atomic(path, "\n".join(lines) + "\n")
