"""Counterfactual question/answer rows for fine-tuning: one JSON object per line.

Fields: ``image`` (path, relative to the JSONL file's folder or absolute), ``question``, ``answer``,
``split`` (``original`` | ``counterfactual``), ``pair_id`` (an original and its counterfactual
share it), optional ``mask`` (path of the changed-pixel mask, PNG, non-zero = changed) and
``meta`` (anything). A bad row (not JSON, a missing field, an unreadable image, an empty answer,
an unknown split) is reported with its line number and skipped (``on_bad="skip"``) or rejects
the file (``on_bad="error"``): it never reaches training, where it would crash mid-epoch.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

SPLITS = ("original", "counterfactual")
REQUIRED = ("image", "question", "answer", "split", "pair_id")
ON_BAD = ("skip", "error")


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


def _check(obj: Any, base: Path, line: int) -> QARow | BadRow:
    if not isinstance(obj, dict):
        return BadRow(line, f"expected a JSON object, got {type(obj).__name__}")
    missing = [k for k in REQUIRED if k not in obj]
    if missing:
        return BadRow(line, f"missing field(s) {missing}")
    for k in ("image", "question", "answer", "split"):
        if not isinstance(obj[k], str):
            return BadRow(line, f"'{k}' must be a string")
    if not obj["answer"].strip():
        return BadRow(line, "empty answer")
    if not obj["question"].strip():
        return BadRow(line, "empty question")
    if obj["split"] not in SPLITS:
        return BadRow(line, f"unknown split '{obj['split']}' (expected one of {list(SPLITS)})")
    img = _resolve(base, obj["image"])
    try:
        with Image.open(img) as im:
            im.verify()
    except (OSError, SyntaxError, ValueError) as err:
        return BadRow(line, f"unreadable image {img} ({type(err).__name__})")
    mask = obj.get("mask")
    if mask is not None:
        mp = _resolve(base, str(mask))
        try:
            with Image.open(mp) as m:
                m.verify()
        except (OSError, SyntaxError, ValueError) as err:
            return BadRow(line, f"unreadable mask {mp} ({type(err).__name__})")
        mask = str(mp)
    return QARow(str(img), obj["question"], obj["answer"].strip(), obj["split"], str(obj["pair_id"]), mask, dict(obj.get("meta") or {}), line)


def load_rows(path: str | Path, on_bad: str = "skip") -> tuple[list[QARow], list[BadRow]]:
    """Every usable row of ``path`` and every bad one (line numbers from 1); image and mask paths
    come back absolute. ``on_bad="error"`` raises :class:`BadDataError` naming the first bad rows."""
    if on_bad not in ON_BAD:
        raise ValueError(f"on_bad must be one of {list(ON_BAD)}, got '{on_bad}'")
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise BadDataError(f"cannot read {path}: {err.strerror or err}") from None
    rows: list[QARow] = []
    bad: list[BadRow] = []
    for i, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as err:
            bad.append(BadRow(i, f"not JSON ({err.msg} at column {err.colno})"))
            continue
        got = _check(obj, path.parent, i)
        (bad if isinstance(got, BadRow) else rows).append(got)  # type: ignore[arg-type]
    if bad and on_bad == "error":
        shown = "; ".join(map(str, bad[:3])) + (f"; ... {len(bad) - 3} more" if len(bad) > 3 else "")
        raise BadDataError(f"{path}: {len(bad)} bad row(s): {shown}")
    if not rows:
        raise BadDataError(f"{path}: no usable row" + (f" ({len(bad)} bad: {bad[0]})" if bad else ""))
    return rows, bad


def write_rows(path: str | Path, rows: Iterable[QARow]) -> Path:
    """The rows as JSONL (atomic), image and mask paths relative to the file's folder when inside it."""
    from synthetic.atomic import write_text_atomic

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
