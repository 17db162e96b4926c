"""EDCT item records and the run they belong to: their shape, how one is read back, and the run's
settings fingerprint (``run.json``). Shared by the pipeline (resume) and the fine-tuning builder
(``data.build=edct``), so both trust a record on the same grounds.

A record is read back only when its sha256 seal matches (:mod:`cbm.vlm.sealed`) *and* it has the
shape every reader relies on (:func:`valid_record`: types, step indices ``1..n`` in order, each
judged step with the sha256 of its image). The seal catches an edit, not a forger who recomputes
it; so the pipeline also derives every parsed value again from the stored reply texts, and the
builder checks every image it exports against the sha256 the record holds.

Settings: an EDCT ``output_dir`` is one run's table (``results.json`` names one VLM, LLM and
judge, and the fine-tuning builder exports every item under ``items/``), so items made with
other settings must not be mixed in, nor silently overwritten. ``run.json`` (sealed) holds
:func:`settings_parts` of the run that wrote the directory; a rerun with other settings is
refused in one line (:func:`check_run`), and every record carries the digest of those parts
(``run``): a record without it, or with another one, is not this run's and is redone.
"""

from __future__ import annotations

import hashlib
import io
import logging
from pathlib import Path
from typing import Any

from cbm.core.atomic import atomic_write, write_json_atomic
from cbm.core.validation import conforms
from cbm.vlm.sealed import CHANGED, OLDER, client_identity, digest, open_sealed, read_json, seal

log = logging.getLogger("cbm.vlm")

#: The sealed settings file of a run directory.
RUN_FILE = "run.json"
#: Bump when the meaning of a record changes: runs written before then are refused (run.json) or redone (records).
RUN_VERSION = 1

ERRORS = [str]
#: A VLM's answer; two-turn protocol (``turns`` 2): ``reply`` is turn 1's, ``explain`` holds turn 2's.
ANSWER = {"answer": (str, None), "explanation": (str, None), "reply": str, "errors": ERRORS, "?scores": [float], "?turns": int,
          "?explain": {"reply": str, "errors": ERRORS}}  # fmt: skip
VERDICT = {"ac": (bool, None), "ef": (bool, None), "score": (int, None), "reply": str, "errors": ERRORS}
EDIT = {"concept": str, "keep": str, "change": str, "how": str, "constraints": str, "target": (str, None)}
STEP = {"index": int, "concept": str, "instruction": EDIT, "edit_text": str, "?status": str, "?reason": str, "?requery": ANSWER,
        "?judge": VERDICT, "?judge2": VERDICT, "?answer_changed": (bool, None), "?known_change": bool, "?truth": str,
        "?meta_row": ([int], None), "?meta_board": [[int]], "?image_sha256": str, "?mask_sha256": str, "?excluded": str, "?edit_type": str,
        "?verify": {"passed": bool, "in_ratio": float, "out_ratio": float, "reason": str}}  # fmt: skip
JUDGED_STEP = {**STEP, "requery": ANSWER, "judge": VERDICT, "answer_changed": (bool, None), "image_sha256": str}
#: What the readers use of a saved record (extra keys are kept; values of these keys must fit).
RECORD = {"id": str, "status": str, "?run": str, "?image_sha256": str, "?error": str, "?truth": str, "?question": str,
          "?baseline": ANSWER, "?concepts": {"concepts": [str], "reply": str, "errors": ERRORS},
          "?chain": {"edits": [EDIT], "reply": str, "errors": ERRORS}, "?steps": [STEP]}  # fmt: skip
HEX = frozenset("0123456789abcdef")


def is_sha256(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 64 and set(value) <= HEX


def valid_record(rec: Any, item_id: str | None = None) -> bool:
    """Whether a record read back has the shape every reader relies on (so even a record whose
    digest was recomputed cannot feed a wrong type, a path or a step out of order to them), and is
    item ``item_id``'s (any item's when ``None``): step ``i`` has index ``i`` (an ``int``, never a
    string that becomes a file name), a judged step the sha256 of its image."""
    if not conforms(rec, RECORD) or (item_id is not None and rec["id"] != item_id):
        return False
    if any(set(e) != set(EDIT) for e in rec.get("chain", {}).get("edits", [])):
        return False
    if "image_sha256" in rec and not is_sha256(rec["image_sha256"]):
        return False
    for i, s in enumerate(rec.get("steps", []), 1):
        if s["index"] != i or any(k in s and not is_sha256(s[k]) for k in ("image_sha256", "mask_sha256")):
            return False
        if s.get("status") == "judged" and not conforms(s, JUDGED_STEP):
            return False
    return True


class RecordProblem(ValueError):
    """Why a record cannot be read back: ``kind`` is ``unreadable``, ``older`` (no digest),
    ``changed`` (its digest does not match) or ``shape`` (not a record of this item)."""

    def __init__(self, kind: str, line: str):
        super().__init__(line)
        self.kind = kind


def read_record(path: str | Path, item_id: str | None = None) -> dict[str, Any]:
    """The record in ``path``, sealed and of the right shape (:func:`valid_record`); else
    :class:`RecordProblem` with one line saying why."""
    try:
        raw = read_json(path)
    except ValueError as err:
        raise RecordProblem("unreadable", str(err)) from None
    rec, why = open_sealed(raw)
    if rec is None:
        raise RecordProblem("older" if why == OLDER else "changed", f"{path}: {why}")
    if not valid_record(rec, item_id):
        raise RecordProblem("shape", f"{path}: {CHANGED} or is not {'this item' if item_id else 'an EDCT item'}'s record")
    return rec


def load_record(path: str | Path, item_id: str | None = None) -> dict[str, Any] | None:
    """:func:`read_record`, or ``None`` with a warning (the pipeline then redoes the item)."""
    try:
        return read_record(path, item_id)
    except RecordProblem as err:
        log.warning("edct: %s; the item is redone", err)
        return None


def save_record(path: str | Path, rec: dict[str, Any]) -> None:
    write_json_atomic(Path(path), seal(rec))


def png_bytes(image: Any) -> bytes:
    """A PIL image as PNG bytes."""
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def write_png(path: str | Path, image: Any) -> str:
    """Write ``image`` as PNG (atomic); the sha256 of the bytes written (kept in the record, so a
    resumed run, or the fine-tuning builder, reads back only the image it wrote)."""
    data = png_bytes(image)
    atomic_write(Path(path), lambda f: f.write(data))
    return hashlib.sha256(data).hexdigest()


def write_item(run_dir: str | Path, item_id: str, truth: str, original: Any, steps: list[tuple[Any, str, str]],
               question: str | None = None) -> Path:  # fmt: skip
    """Write a finished item as ``cbm-edct`` would: its original image (true label ``truth``) and one
    judged step per ``(counterfactual image, its true label, the edited concept)``, with no
    replies, under the run of ``run_dir/run.json`` (written when absent). For tests and examples
    that need a run directory without running the pipeline; returns the record's path."""
    from cbm.core.safe_paths import slug

    run = Path(run_dir)
    body = read_run(run)
    if body is None:
        body = {"version": RUN_VERSION, "parts": {"example": digest("example")}}
        write_json_atomic(run / RUN_FILE, seal(body))
    d = run / "items" / slug(item_id)
    none = {"reply": "", "errors": []}
    rec: dict[str, Any] = {"id": item_id, "status": "done", "run": run_id(body["parts"]), "truth": truth,
                           "image_sha256": write_png(d / "original.png", original), "steps": []}  # fmt: skip
    if question is not None:
        rec["question"] = question
    for i, (image, label, concept) in enumerate(steps, 1):
        edit = {"concept": concept, "keep": "", "change": "", "how": "", "constraints": "", "target": None}
        rec["steps"].append({"index": i, "concept": concept, "instruction": edit, "edit_text": "", "status": "judged",
                             "truth": label, "known_change": label != truth, "image_sha256": write_png(d / f"step{i}.png", image),
                             "requery": {"answer": None, "explanation": None, **none}, "answer_changed": None,
                             "judge": {"ac": None, "ef": None, "score": None, **none}})  # fmt: skip
    assert valid_record(rec, item_id)
    save_record(d / "record.json", rec)
    return d / "record.json"


# ------------------------------------------------------------------ the run's settings
#: How a refusal names a part of :func:`settings_parts`.
PART_NAMES = {"vlm": "vlm", "llm": "llm", "judge": "judge", "judge2": "judge2", "prompts": "prompts",
              "task": "question, options, answer_by, baseline_turns, k or reask", "editor": "editor, segmenter or verify settings", "data": "data"}  # fmt: skip


def settings_parts(cfg: Any, clients: Any) -> dict[str, str]:
    """Digests of what shapes an item's record: each client's endpoint, model, sampling parameters
    and system prompt (:func:`~cbm.vlm.sealed.client_identity`), the prompts, the question and
    options, the editor / segmenter / verifier settings, and the data (the items' images). Not the
    number or sample of items, workers, progress, bootstrap, limits, human scores or stability runs
    (they change no record). ``baseline_turns`` and the two-turn prompts enter only a two-turn run's
    digest, so a one-turn run written before the knob existed (it was one-turn) resumes with
    ``baseline_turns=1`` and is refused, in one line naming ``task``, with the default 2."""
    from cbm.vlm.edct.config import TWO_TURN_PROMPTS

    two = getattr(cfg, "baseline_turns", 1) == 2
    used = {k: v for k, v in dict(cfg.prompts).items() if two or k not in TWO_TURN_PROMPTS}
    task = {"question": cfg.question, "options": cfg.options, "answer_by": cfg.answer_by, "k": cfg.k, "reask": cfg.reask}
    ident = {role: None if getattr(clients, role) is None else digest(client_identity(getattr(clients, role)))
             for role in ("vlm", "llm", "judge", "judge2")}  # fmt: skip
    return {
        **ident,
        "prompts": digest(used),
        "task": digest({**task, "baseline_turns": 2} if two else task),
        "editor": digest({"editor": dict(cfg.editor), "segmenter": cfg.segmenter, "verify": dict(cfg.verify),
                          "verify_retries": cfg.verify_retries, "gate_exact_edits": cfg.gate_exact_edits,
                          "score_unverified": cfg.score_unverified}),
        "data": digest({"data": dict(cfg.data), "split": cfg.items.split} if cfg.items.source != "files" else
                       {"files": files_fingerprint(cfg.items)}),
    }  # fmt: skip


def files_fingerprint(items: Any) -> dict[str, Any]:
    """What identifies file items: the path, format, shape and the sha256 of the index (the JSONL
    file or an image folder's sidecar; a dataset's state file); each image is sealed in its record."""
    p = Path(items.path)
    index = p if p.is_file() else next((p / n for n in ("metadata.jsonl", "state.json", "dataset_info.json") if (p / n).is_file()), None)
    sha = hashlib.sha256(index.read_bytes()).hexdigest() if index is not None else None
    return {"path": str(p.resolve()), "format": items.format, "shape": items.shape, "index_sha256": sha}


def run_id(parts: dict[str, Any]) -> str:
    """The digest every record of a run carries (``run``)."""
    return digest({"version": RUN_VERSION, "parts": parts})


def read_run(run_dir: str | Path) -> dict[str, Any] | None:
    """The body of ``run_dir/run.json`` (``version``, ``parts``), ``None`` when there is none;
    ``ValueError`` (one line) when it is unreadable or changed since it was written."""
    path = Path(run_dir) / RUN_FILE
    if not path.exists():
        return None
    body, why = open_sealed(read_json(path))
    if body is None or not conforms(body, {"version": int, "parts": dict}):
        raise ValueError(f"{path}: {why or 'not a cbm-edct run file'}")
    return body


def check_run(run_dir: str | Path, parts: dict[str, str]) -> str:
    """The run id of ``parts``, after making sure ``run_dir`` holds no run made with other
    settings (``ValueError``, one line, naming what differs); ``run.json`` written when absent.
    A directory of an older version (items, no ``run.json``) is taken over: its records carry no
    run id, so each is redone."""
    path = Path(run_dir) / RUN_FILE
    try:
        body = read_run(run_dir)
    except ValueError as err:
        raise ValueError(f"output_dir: {err}; delete it to redo the run's items with these settings, or choose another output_dir") from None
    if body is None:
        write_json_atomic(path, seal({"version": RUN_VERSION, "parts": parts}))
    elif body != {"version": RUN_VERSION, "parts": parts}:
        old = body["parts"] if body["version"] == RUN_VERSION else {}
        diff = [PART_NAMES.get(k, k) for k in parts if old.get(k) != parts[k]] or ["version"]
        raise ValueError(f"output_dir: {Path(run_dir)} holds a cbm-edct run made with other settings ({', '.join(diff)}); choose "
                         f"another output_dir, or delete {path} to redo its items with these settings")  # fmt: skip
    return run_id(parts)
