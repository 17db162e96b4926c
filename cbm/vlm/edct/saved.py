"""A saved EDCT reply read back into its parsed record (a resumed run re-parses what it has instead of
asking again), and the small text helpers the pipeline and the rebuild share."""

from __future__ import annotations

import logging
import re
from dataclasses import asdict
from typing import Any

import numpy as np

from cbm.vlm.edct.parse import (
    parse_answer,
    parse_answer_only,
    parse_concepts,
    parse_edit_chain,
    parse_explanation,
    parse_verdict,
)

log = logging.getLogger("cbm.vlm")

#: Item statuses a rerun keeps (``done`` = chain finished); ``error`` (the endpoint failed after its
#: retries) is picked up again where it stopped.

#: ``baseline_turns`` of the paper's protocol (the explanation asked in a second turn).
TWO_TURNS = 2

def _plain(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return obj


def options_text(options: list[str]) -> str:
    """The options as the prompts show them; none: an open-ended question."""
    return ", ".join(options) if options else "none given (open-ended: answer in a few words)"


def same_answer(a: str, b: str) -> bool:
    """Whether two answers say the same (case, articles, punctuation and spacing ignored)."""
    def norm(x: str) -> str:
        return " ".join(w for w in re.sub(r"[^\w\s]", " ", x.lower()).split() if w not in ("a", "an", "the"))

    return norm(a) == norm(b)


def _with_reask(saved: dict[str, Any], parse: Any, usable: Any) -> dict[str, Any]:
    """A stage's record from its replies: the first reply parsed; when it is not usable and a
    re-ask was made, the re-ask's parse, with the first one's errors kept as ``first_errors``."""
    out = {**parse(saved["reply"]), "reply": saved["reply"]}
    if isinstance(saved.get("reask"), str):
        out["reask"] = saved["reask"]
        if not usable(out):
            first = out["errors"]
            out = {**parse(saved["reask"]), "reply": saved["reply"], "reask": saved["reask"], "first_errors": first}
    return out


def _answer(saved: dict[str, Any], options: list[str]) -> dict[str, Any]:
    """A stored answer derived again from its reply (or its re-ask; option scores, from a local
    model, kept). A two-turn record (``turns`` 2) takes the answer from turn 1 (``reply``) and the
    explanation from turn 2 (``explain``, absent when turn 1 gave no answer); its ``errors`` are
    turn 1's, turn 2's are in ``explain``."""
    if saved.get("turns") == TWO_TURNS:
        out = {**_answer_turn(saved, options), "explanation": None, "turns": TWO_TURNS}
        if isinstance(saved.get("explain"), dict):
            out["explain"] = _explain_turn(saved["explain"])
            out["explanation"] = out["explain"]["explanation"]
    else:
        def parse(reply: str) -> dict[str, Any]:
            p = parse_answer(reply, options)
            return {"answer": p.answer, "explanation": p.explanation, "errors": [str(e) for e in p.errors]}

        out = _with_reask(saved, parse, lambda o: o["answer"] is not None)
    if "scores" in saved and len(saved["scores"]) == len(options):
        out["scores"] = saved["scores"]
    return out


def _answer_turn(saved: dict[str, Any], options: list[str]) -> dict[str, Any]:
    """Turn 1 of the two-turn protocol: the answer alone, from its reply or re-ask."""
    def parse(reply: str) -> dict[str, Any]:
        a = parse_answer_only(reply, options)
        return {"answer": a.value, "errors": [] if a.error is None else [str(a.error)]}

    return _with_reask(saved, parse, lambda o: o["answer"] is not None)


def _explain_turn(saved: dict[str, Any]) -> dict[str, Any]:
    """Turn 2 of the two-turn protocol: the explanation, from its reply or re-ask."""
    def parse(reply: str) -> dict[str, Any]:
        explanation, err = parse_explanation(reply)
        return {"explanation": explanation, "errors": [] if err is None else [str(err)]}

    return _with_reask(saved, parse, lambda o: o["explanation"] is not None)


def _verdict(saved: dict[str, Any]) -> dict[str, Any]:
    """The judge's verdict parsed from its reply or re-ask (``score`` 1-5 or ``None``, never another value)."""
    def parse(reply: str) -> dict[str, Any]:
        v = parse_verdict(reply)
        return {"ac": v.ac, "ef": v.ef, "score": v.score, "errors": [str(e) for e in v.errors]}

    return _with_reask(saved, parse, lambda o: not o["errors"])


def _concepts(saved: dict[str, Any], k: int) -> dict[str, Any]:
    def parse(reply: str) -> dict[str, Any]:
        concepts, errors = parse_concepts(reply, k)
        return {"concepts": concepts, "errors": [str(e) for e in errors]}

    return _with_reask(saved, parse, lambda o: bool(o["concepts"]) or not o["errors"])


def _chain(saved: dict[str, Any], concepts: list[str]) -> dict[str, Any]:
    def parse(reply: str) -> dict[str, Any]:
        chain, errors = parse_edit_chain(reply, concepts)
        return {"edits": [asdict(e) for e in chain], "errors": [str(e) for e in errors]}

    return _with_reask(saved, parse, lambda o: bool(o["edits"]))


def _step_meta(meta: Any, step: dict[str, Any]) -> Any:
    """The item's ``meta`` as a step left it: its attribute row (robots) or board (Sudoku) from the
    record; the item's own when the step recorded neither (an editor without ground truth);
    ``None`` when the recorded one does not fit the item."""
    for key, field in (("row", "meta_row"), ("board", "meta_board")):
        if step.get(field) is not None:
            if not isinstance(meta, dict) or key not in meta:
                return None
            value = np.asarray(step[field], dtype=np.int64)
            if value.shape != np.shape(meta[key]):
                return None
            meta = {**meta, key: value}
    return meta
