"""EDCT items from files: real photographs, each with its own question, optional answer choices and
ground truth.

Where (``items.path``, by ``items.format``):

* ``jsonl``: one JSON object per line; image paths relative to the file's folder;
* ``folder``: the images of a folder (``*.png``, ``*.jpg``, ``*.jpeg``, ``*.webp``), with the Hugging
  Face ``imagefolder`` sidecar ``metadata.jsonl`` (``file_name`` + the row's fields) when present;
  without it every image takes the run's ``question`` / ``options``;
* ``hf``: a Hugging Face ``datasets`` dataset saved with ``save_to_disk`` (an ``Image`` column);
* ``auto``: ``jsonl`` for a file, ``hf`` for a folder holding ``dataset_info.json``, else ``folder``.

What a row says (``items.shape``), read into ``{image, question, options, truth}``:

* ``generic``: ``image``, ``question`` (else the run's), ``options`` (a list; else the run's),
  ``answer`` (the ground truth, optional), ``id`` (optional);
* ``okvqa``: ``image`` / ``image_path``, ``question``, ``answers`` (strings or ``{"answer": ...}``; the
  most frequent is the truth); open-ended: no options;
* ``drivelm``: ``image`` / ``image_path`` / ``image_paths`` (the first; a mapping's first value),
  ``question`` / ``Q``, ``answer`` / ``A``; open-ended;
* ``3dsrbench``: ``image`` / ``image_path`` / ``image_url`` (a local path), ``question``, the choices
  ``A``..``D`` (those present) as options, ``answer`` a letter (or the choice's text).

Every image path is resolved inside the data folder (no absolute path, no ``..``, no link out of
it) and read under the pixel limit; a bad row is one line naming the file and row. The answer is
open-ended when a row has no options (and the run sets none): the VLM's answer is then its free text,
compared across edits after normalisation (case, articles, punctuation).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image

from cbm.core.safe_paths import inside

FORMATS = ("auto", "jsonl", "folder", "hf")
SHAPES = ("generic", "okvqa", "drivelm", "3dsrbench")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")
#: Sidecar of an image folder (the Hugging Face ``imagefolder`` convention).
METADATA = "metadata.jsonl"
CHOICE_LETTERS = ("A", "B", "C", "D", "E", "F")


@dataclass
class FileItem:
    """One item read from files: its id, image source (a path inside the data folder, or an image),
    question, options (``None``: open-ended or the run's) and ground truth (``None``: unknown)."""

    id: str
    image: Path | Image.Image
    question: str | None
    options: list[str] | None
    truth: str | None


class ItemsError(ValueError):
    """A data file or row that cannot be read (one line)."""


def _first(row: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for k in keys:
        if row.get(k) not in (None, "", [], {}):
            return row[k]
    return None


def _text(value: Any, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise ItemsError(f"{what} must be a string, got {type(value).__name__}")
    text = " ".join(str(value).split())
    return text or None


def read_row(row: dict[str, Any], shape: str) -> dict[str, Any]:
    """``{image, question, options, truth, id}`` of one row in ``shape`` (``ItemsError`` names the problem)."""
    if not isinstance(row, dict):
        raise ItemsError(f"a row must be a JSON object, got {type(row).__name__}")
    out: dict[str, Any] = {"id": _text(_first(row, ("id", "question_id", "qid", "sample_id", "index")), "id")}
    if shape == "generic":
        image = _first(row, ("image", "image_path", "file_name"))
        question = _text(_first(row, ("question",)), "question")
        options = row.get("options", row.get("choices"))
        truth = _text(_first(row, ("answer", "label", "truth")), "answer")
    elif shape == "okvqa":
        image = _first(row, ("image", "image_path", "file_name"))
        question = _text(_first(row, ("question",)), "question")
        answers = row.get("answers") or []
        if not isinstance(answers, list):
            raise ItemsError("answers must be a list")
        words = [_text(a.get("answer") if isinstance(a, dict) else a, "answers[]") for a in answers]
        counts = Counter(w.lower() for w in words if w)
        options, truth = None, (counts.most_common(1)[0][0] if counts else None)
    elif shape == "drivelm":
        image = _first(row, ("image", "image_path", "image_paths", "file_name"))
        if isinstance(image, dict):
            image = next(iter(image.values()), None)
        if isinstance(image, list):
            image = image[0] if image else None
        question = _text(_first(row, ("question", "Q")), "question")
        options, truth = None, _text(_first(row, ("answer", "A")), "answer")
    elif shape == "3dsrbench":
        image = _first(row, ("image", "image_path", "image_url", "file_name"))
        question = _text(_first(row, ("question",)), "question")
        letters = [c for c in CHOICE_LETTERS if _text(row.get(c), c) is not None]
        options = [_text(row[c], c) for c in letters]
        answer = _text(_first(row, ("answer", "label")), "answer")
        truth = options[letters.index(answer.upper())] if answer and answer.upper() in letters else answer
    else:  # pragma: no cover - checked by the config
        raise ItemsError(f"unknown shape {shape!r}")
    if image is None:
        raise ItemsError("no image (an image path, or an Image column)")
    if options is not None:
        if not isinstance(options, list) or len(options) < 2 or not all(isinstance(o, (str, int, float)) for o in options):
            raise ItemsError(f"options must be a list of at least two answers, got {str(options)[:60]}")
        options = [" ".join(str(o).split()) for o in options]
        if len({o.lower() for o in options}) < len(options) or not all(options):
            raise ItemsError(f"options must be distinct and non-empty, got {options}")
        if truth is not None and truth.lower() not in {o.lower() for o in options}:
            raise ItemsError(f"answer {truth!r} is not one of the options {options}")
    return {**out, "image": image, "question": question, "options": options, "truth": truth}


def _image_source(value: Any, root: Path, what: str) -> Path | Image.Image:
    """A row's image: a PIL image (a ``datasets`` Image column), ``{"path": ...}`` / ``{"bytes": ...}``, or a
    relative path resolved inside ``root``."""
    if isinstance(value, Image.Image):
        return value
    if isinstance(value, dict):
        if value.get("bytes"):
            import io

            return Image.open(io.BytesIO(value["bytes"]))
        value = value.get("path")
    if not isinstance(value, str) or not value.strip():
        raise ItemsError(f"{what} must be a relative path, got {str(value)[:60]!r}")
    if "://" in value:
        raise ItemsError(f"{what} {value!r} is a URL; download it and give the local path (nothing is fetched)")
    try:
        return inside(root, root / value, f"{what} {value!r}")
    except ValueError as err:
        raise ItemsError(str(err)) from None


def _jsonl_rows(path: Path) -> list[tuple[str, dict[str, Any]]]:
    rows = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise ItemsError(f"{path}: cannot read ({type(err).__name__}: {err})") from None
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append((f"{path.name}:{i}", json.loads(line)))
        except json.JSONDecodeError as err:
            raise ItemsError(f"{path}:{i}: not JSON ({err.msg})") from None
    return rows


def read_items(path: str | Path, fmt: str = "auto", shape: str = "generic") -> list[FileItem]:
    """Every item of the data at ``path`` (see the module docstring), in file order."""
    p = Path(path)
    if not p.exists():
        raise ItemsError(f"items.path: nothing at {str(path)!r}")
    if fmt == "auto":
        fmt = "jsonl" if p.is_file() else "hf" if (p / "dataset_info.json").is_file() else "folder"
    root = p.parent if p.is_file() else p
    raw: list[tuple[str, dict[str, Any]]]
    if fmt == "jsonl":
        if not p.is_file():
            raise ItemsError(f"items.path: {p} is not a JSONL file")
        raw = _jsonl_rows(p)
    elif fmt == "folder":
        if not p.is_dir():
            raise ItemsError(f"items.path: {p} is not a folder")
        if (p / METADATA).is_file():
            raw = [(w, {"image": r.get("file_name"), **r}) if isinstance(r, dict) else (w, r) for w, r in _jsonl_rows(p / METADATA)]
        else:
            files = sorted(f for f in p.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES and f.is_file())
            raw = [(f.name, {"image": f.name, "id": f.stem}) for f in files]
    elif fmt == "hf":
        try:
            from datasets import load_from_disk

            ds = load_from_disk(str(p))
        except Exception as err:  # noqa: BLE001 - whatever datasets raises on a folder that is not a dataset
            raise ItemsError(f"items.path: {p} is not a saved datasets dataset ({type(err).__name__}: {err})") from None
        if hasattr(ds, "keys") and not hasattr(ds, "features"):  # a DatasetDict: its first split
            ds = ds[next(iter(ds.keys()))]
        raw = [(f"row {i}", dict(r)) for i, r in enumerate(ds)]
    else:
        raise ItemsError(f"items.format: unknown format {fmt!r} (choose from: {', '.join(FORMATS)})")
    if not raw:
        raise ItemsError(f"items.path: no items in {p}")
    out, seen = [], set()
    for where, row in raw:
        try:
            r = read_row(row, shape)
            image = _image_source(r["image"], root, "image")
        except ItemsError as err:
            raise ItemsError(f"{p} ({where}): {err}") from None
        iid = r["id"] or re.sub(r"\W+", "-", where).strip("-")
        if iid in seen:
            raise ItemsError(f"{p} ({where}): item id {iid!r} given twice")
        seen.add(iid)
        out.append(FileItem(iid, image, r["question"], r["options"], r["truth"]))
    return out
