"""Counterfactual Q/A sets with exact ground truth, from the synthetic renderers and from EDCT runs.

Robots: for each robot and each asked part, the original image with its question and answer and
the exact counterfactual (that part flipped to the other answer and re-rendered) with the flipped
answer and the exact changed-pixel mask. Sudoku boards: "Which digit is in row R, column C?" on
the original and on the board with that one digit changed. EDCT: every judged step's
counterfactual with the true label of the edited item (synthetic runs), paired with its original.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from cbm.core.atomic import atomic_write
from cbm.core.safe_paths import slug
from cbm.vlm.finetune.data import QARow, write_rows
from cbm.vlm.finetune.questions import ROBOT_QUESTIONS, SUDOKU_QUESTIONS, RobotQuestion  # noqa: F401

#: Generator settings a build starts from (``data.source`` overrides them).
SOURCE_DEFAULTS: dict[str, dict[str, Any]] = {"robot": {"name": "robot", "image_size": 64, "n_train": 10, "n_calib": 0},
                                              "sudoku": {"name": "sudoku", "n_train": 20, "n_val": 4, "n_calib": 0}}  # fmt: skip


def generator_config(kind: str, n: int, source: dict[str, Any] | None) -> Any:
    """The robot / Sudoku generator config of a built set: the defaults, ``n`` test items, then
    ``source`` (``data.source``); a bad setting is one line naming ``data.source``."""
    from cbm.core.validation import ConfigError
    from synthetic.registry import data_config

    src = dict(source or {})
    if "name" in src and src["name"] != kind:
        raise ValueError(f"data.source.name: '{src['name']}' contradicts data.build={kind} (leave it out)")
    if "n_test" in src:
        raise ValueError("data.source.n_test: the number of items is data.n (leave it out)")
    if src.get("modality", "image") != "image":
        raise ValueError(f"data.source.modality: counterfactual pairs are images, not '{src['modality']}'")
    try:
        return data_config({**SOURCE_DEFAULTS[kind], "n_test": n, **src})
    except (ConfigError, ValueError) as err:
        raise ValueError(f"data.source: {str(err).removeprefix('data: ')}") from None


def _png(path: Path, image: Image.Image) -> str:
    atomic_write(path, lambda f: image.save(f, format="PNG"))
    return str(path)


def robot_pairs(cfg: Any, out_dir: str | Path, n: int, parts: Sequence[str] = ("knees", "feet", "mouth"), split: str = "test",
                cache_dir: str | None = None, start: int = 0) -> list[QARow]:  # fmt: skip
    """``2 * n * len(parts)`` rows (fewer where a part is invisible): images and masks written under
    ``out_dir``; ``meta`` holds the part, attribute values and robot position."""
    from cbm.vlm.editors import EditInstruction, RobotEditor, robot_items
    from cbm.vlm.editors.synthetic import ROBOT_PARTS
    from synthetic.robot.attributes import META_INDEX

    unknown = sorted(set(parts) - set(ROBOT_QUESTIONS))
    if unknown:
        raise ValueError(f"robot parts {unknown} have no question (choose from: {', '.join(ROBOT_QUESTIONS)})")
    out = Path(out_dir)
    editor = RobotEditor(cfg)
    rows: list[QARow] = []
    for item in robot_items(editor.cfg, split, np.arange(start, start + n), cache_dir=cache_dir):
        pos = item.meta["position"]
        orig = _png(out / "images" / f"robot{pos:05d}.png", item.image)
        for key in parts:
            q = ROBOT_QUESTIONS[key]
            part = q.part or key
            attr = ROBOT_PARTS[part]
            value = int(item.meta["row"][META_INDEX[attr]])
            idx = value // q.grouped if q.grouped else value
            target = q.answers[1 - idx] if q.grouped else None  # sub-types: flip the group (flat <-> pointy)
            res = editor.edit(item, EditInstruction(part, target=target))
            if not res.mask.any():  # the part is not visible: no counterfactual to learn from
                continue
            pid = f"robot{pos:05d}-{key}"
            cf = _png(out / "images" / f"{pid}-cf.png", res.image)
            mask = _png(out / "masks" / f"{pid}.png", Image.fromarray(res.mask.astype(np.uint8) * 255))
            new = int(res.meta["row"][META_INDEX[attr]])
            new_idx = new // q.grouped if q.grouped else new
            meta = {"part": part, "question": key, "attribute": attr, "position": int(pos)}
            rows.append(QARow(orig, q.question, q.answers[idx], "original", pid, mask, {**meta, "value": value}))
            rows.append(QARow(cf, q.question, q.answers[new_idx], "counterfactual", pid, mask, {**meta, "value": new}))
    return rows


def sudoku_pairs(cfg: Any, out_dir: str | Path, n: int, cells_per_board: int = 2, split: str = "test", cache_dir: str | None = None,
                 seed: int = 0, questions: Sequence[str] = ("digit",)) -> list[QARow]:  # fmt: skip
    """``2 * n * cells_per_board * len(questions)`` rows about a cell whose digit changes (seeded
    choice among the filled cells): ``digit`` "Which digit is in row R, column C?", ``row_valid``
    "Is row R valid?" (each digit 1-9 once), before and after."""
    from cbm.vlm.editors import EditInstruction, SudokuEditor, sudoku_items
    from synthetic.sudoku.checker import check_board

    unknown = sorted(set(questions) - set(SUDOKU_QUESTIONS))
    if unknown:
        raise ValueError(f"Sudoku questions {unknown} unknown (choose from: {', '.join(SUDOKU_QUESTIONS)})")

    out = Path(out_dir)
    editor = SudokuEditor(cfg)
    rng = np.random.default_rng(seed)
    rows: list[QARow] = []
    for item in sudoku_items(editor.cfg, split, np.arange(n), cache_dir=cache_dir):
        pos = item.meta["position"]
        board = np.asarray(item.meta["board"])
        orig = _png(out / "images" / f"board{pos:05d}.png", item.image)
        filled = np.argwhere(board > 0)
        for r, c in filled[rng.choice(len(filled), size=min(cells_per_board, len(filled)), replace=False)]:
            r, c = int(r) + 1, int(c) + 1
            res = editor.edit(item, EditInstruction(f"row {r} column {c}"))
            pid = f"board{pos:05d}-r{r}c{c}"
            cf = _png(out / "images" / f"{pid}-cf.png", res.image)
            mask = _png(out / "masks" / f"{pid}.png", Image.fromarray(res.mask.astype(np.uint8) * 255))
            meta = {"row": r, "col": c, "position": int(pos)}
            for kind in questions:
                if kind == "digit":
                    q, a0, a1 = f"Which digit is in row {r}, column {c}? Answer with the digit.", str(res.changed["from"]), str(res.changed["to"])
                else:  # the 27 checks are rows 1-9, columns 1-9, boxes 1-9
                    q = f"Is row {r} of this Sudoku valid (each digit 1-9 exactly once)? Answer yes or no."
                    a0, a1 = ("yes" if bool(check_board(b)[r - 1]) else "no" for b in (board, np.asarray(res.meta["board"])))
                qid = pid if kind == "digit" else f"{pid}-{kind}"
                rows.append(QARow(orig, q, a0, "original", qid, mask, {**meta, "question": kind}))
                rows.append(QARow(cf, q, a1, "counterfactual", qid, mask, {**meta, "question": kind}))
    return rows


def edct_pairs(run_dir: str | Path, question: str | None = None, max_image_pixels: int | None = None) -> list[QARow]:
    """Rows from a ``cbm-edct`` run: each item's original (answer = its true label) paired with every
    judged step's counterfactual, the step's mask as the mask. The counterfactual's answer is the
    edited item's true label (synthetic items); for photographs, whose edit has no ground truth,
    the re-queried answer of a verified edit that the judge found consistent with the edited scene
    (AC; rows marked ``label: judge``). Items without a truth, and items excluded from scoring (an
    edit not verified), are skipped.

    The run is read as ``cbm-edct`` resumes it (:mod:`cbm.vlm.edct.records`): every record sealed
    and of the record's shape (step indices integers ``1..n``, so a file name made from one stays
    in the item's folder), made by the run its ``run.json`` describes; every image exported is the
    one the record's sha256 names, read under ``max_image_pixels`` (default: ``cbm-edct``'s). Any
    problem is one line naming the file (the training data is never built from a changed run)."""
    from cbm.vlm.edct.metrics import exclusion
    from cbm.vlm.edct.records import RUN_FILE, RUN_VERSION, RecordProblem, read_record, read_run, run_id

    run_dir = Path(run_dir)
    if max_image_pixels is None:
        from cbm.vlm.edct.config import EDCTConfig

        max_image_pixels = EDCTConfig.max_image_pixels
    if question is None and not (run_dir / "results.json").is_file():
        raise ValueError(f"{run_dir}: not a cbm-edct run directory (no results.json)")
    where = "data.source.run_dir"
    older = f"was written by an older version of cbm-edct; rerun cbm-edct on {run_dir}"
    items = run_dir / "items"
    run: str | None = None
    rows: list[QARow] = []
    for rec_path in sorted(items.glob("*/record.json")):
        try:
            rec = read_record(rec_path)
        except RecordProblem as err:
            why = {"unreadable": f"is not a readable EDCT record ({str(err).removeprefix(f'{rec_path}: ')})",
                   "older": f"{older} (no digest)", "changed": "changed since cbm-edct wrote it",
                   "shape": "changed since cbm-edct wrote it (not an EDCT item record)"}[err.kind]  # fmt: skip
            raise ValueError(f"{where}: {rec_path} {why}") from None
        if run is None:  # the run's settings, once there is a record to check against them
            try:
                body = read_run(run_dir)
            except ValueError as err:
                raise ValueError(f"{where}: {err}") from None
            if body is None:
                raise ValueError(f"{where}: {run_dir} {older} (no {RUN_FILE})")
            run = run_id(body["parts"]) if body["version"] == RUN_VERSION else ""
        if "run" not in rec:
            raise ValueError(f"{where}: {rec_path} {older} (no settings fingerprint)")
        if rec["run"] != run:
            raise ValueError(f"{where}: {rec_path} was made by another cbm-edct run than {run_dir / RUN_FILE} describes; rerun cbm-edct on {run_dir}")
        d = rec_path.parent
        if d.name != slug(rec["id"]) or d.is_symlink():
            raise ValueError(f"{where}: {rec_path} is item {rec['id']!r}'s record in another item's folder")
        if not isinstance(rec.get("truth"), str) or exclusion(rec) is not None:  # no truth, or an edit not verified
            continue
        q = question or rec.get("question") or "Which class is this?"
        labelled = [(s, answer) for s in rec.get("steps", []) if s.get("status") == "judged" and (answer := _counterfactual_answer(s)) is not None]
        if not labelled:
            continue
        orig = _written_png(d / "original.png", rec.get("image_sha256"), max_image_pixels)
        for s, answer in labelled:
            i = s["index"]  # an int, 1..n (valid_record)
            pid = f"{rec['id']}-step{i}"
            cf = _written_png(d / f"step{i}.png", s["image_sha256"], max_image_pixels)
            m = _written_png(d / f"step{i}_mask.png", s["mask_sha256"], max_image_pixels) if "mask_sha256" in s else None
            source = "truth" if "truth" in s else "judge"
            rows.append(QARow(orig, q, rec["truth"], "original", pid, m, {"edct_item": rec["id"]}))
            rows.append(QARow(cf, q, answer, "counterfactual", pid, m, {"edct_item": rec["id"], "concept": s.get("concept"), "label": source}))
    if not rows:
        raise ValueError(f"{where}: {run_dir} has no judged, verified steps with a known answer to export")
    return rows


def _counterfactual_answer(step: dict[str, Any]) -> str | None:
    """A judged step's counterfactual answer: the edited item's true label (exact editors), else
    (photographs under a free-form editor, whose edit was verified) the re-queried answer when
    the judge found it consistent with the edited scene (AC); ``None``: nothing to train on."""
    if isinstance(step.get("truth"), str):
        return step["truth"]
    verified = (step.get("verify") or {}).get("passed") is True
    answer = (step.get("requery") or {}).get("answer")
    return answer if verified and (step.get("judge") or {}).get("ac") is True and isinstance(answer, str) else None


def _written_png(path: Path, sha256: str | None, max_pixels: int) -> str:
    """``path`` when it holds the image ``cbm-edct`` wrote there (its sha256) and decodes under
    ``max_pixels``; else one line."""
    from cbm.vlm.images import load_image

    where = "data.source.run_dir"
    if sha256 is None:
        raise ValueError(f"{where}: {path.parent / 'record.json'} was written by an older version of cbm-edct (no image sha256)")
    try:
        if not path.is_file() or path.stat().st_size > 4 * max_pixels + 2**20:  # cbm-edct writes 8-bit RGB / grey PNGs
            raise ValueError(f"{where}: {path} changed since cbm-edct wrote it")
        data = path.read_bytes()
    except OSError as err:
        raise ValueError(f"{where}: {path}: cannot read ({err.strerror or type(err).__name__})") from None
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ValueError(f"{where}: {path} changed since cbm-edct wrote it")
    load_image(data, max_pixels, f"{where}: {path}")  # one line for an image over the limit or that does not decode
    return str(path)


def build(kind: str, out_dir: str | Path, **kwargs: Any) -> Path:
    """Build a set (``robot`` | ``sudoku`` | ``edct``) into ``out_dir/pairs.jsonl`` (returned)."""
    makers = {"robot": robot_pairs, "sudoku": sudoku_pairs}
    out = Path(out_dir)
    if kind == "edct":
        rows = edct_pairs(**kwargs)
    elif kind in makers:
        rows = makers[kind](out_dir=out, **kwargs)
    else:
        raise ValueError(f"unknown counterfactual set '{kind}' (choose from: robot, sudoku, edct)")
    return write_rows(out / "pairs.jsonl", rows)
