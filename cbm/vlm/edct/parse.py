"""Parsers of the EDCT stages' replies. Each returns the parsed value and a list of
:class:`~cbm.vlm.tags.ParseError` (recorded per item, counted per stage); none raises."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from cbm.vlm.editors.base import EditInstruction
from cbm.vlm.tags import ParseError, parse_choice, parse_tag

_CONCEPT = re.compile(r"<concept\b[^>]*>(.*?)</concept\s*>", re.IGNORECASE | re.DOTALL)
_EDIT = re.compile(r"<edit\b[^>]*>(.*?)</edit\s*>", re.IGNORECASE | re.DOTALL)
EDIT_FIELDS = ("concept", "keep", "change", "how", "constraints")
YES_NO = ("yes", "no")
RUBRIC = tuple(str(i) for i in range(1, 6))


@dataclass
class Answer:
    """A VLM's answer (one of the options, or ``None``) and its explanation (or ``None``)."""

    answer: str | None
    explanation: str | None
    errors: list[ParseError]


def parse_answer(reply: str, options: Sequence[str]) -> Answer:
    a = parse_choice(reply, "answer", options)
    e = parse_tag(reply, "explanation")
    return Answer(a.value, e.value, [err for err in (a.error, e.error) if err is not None])


def _norm(text: str) -> str:
    return " ".join(text.lower().split()).strip(" .;:,")


def parse_concepts(reply: str, k: int) -> tuple[list[str], list[ParseError]]:
    """Up to ``k`` distinct cited concepts in reply order (``<concept>`` tags); duplicates (case and
    whitespace insensitive) and empty tags are dropped; an opened but unclosed tag is an error."""
    errors: list[ParseError] = []
    seen, out = set(), []
    for raw in _CONCEPT.findall(reply or ""):
        name = " ".join(raw.split())
        if not name:
            errors.append(ParseError("empty", "an empty <concept> tag"))
        elif _norm(name) not in seen:
            seen.add(_norm(name))
            out.append(name)
    opened = len(re.findall(r"<concept\b", reply or "", re.IGNORECASE))
    closed = len(re.findall(r"</concept\s*>", reply or "", re.IGNORECASE))
    if opened > closed:
        errors.append(ParseError("unclosed", "<concept> opened but not closed"))
    if not out and not errors and not re.search(r"<none\s*/?>", reply or "", re.IGNORECASE):
        errors.append(ParseError("missing", "no <concept> tag"))
    return out[:k], errors


def parse_edit_chain(reply: str, concepts: Sequence[str]) -> tuple[list[EditInstruction], list[ParseError]]:
    """One :class:`EditInstruction` per ``<edit>`` block, in order; a block without ``<concept>``
    takes the concept at its position; fewer blocks than concepts is an error (the chain is cut)."""
    errors: list[ParseError] = []
    chain = []
    for i, block in enumerate(_EDIT.findall(reply or "")):
        fields = {}
        for f in (*EDIT_FIELDS, "target"):
            r = parse_tag(block, f)
            fields[f] = r.value or ""
        if not fields["concept"]:
            if i >= len(concepts):
                errors.append(ParseError("not_in_options", f"edit {i + 1} has no concept and there are only {len(concepts)} concepts"))
                continue
            fields["concept"] = concepts[i]
        chain.append(EditInstruction(fields["concept"], fields["keep"], fields["change"], fields["how"], fields["constraints"],
                                     fields["target"] or None))  # fmt: skip
    if len(chain) < len(concepts):
        kind = "unclosed" if re.search(r"<edit\b", reply or "", re.IGNORECASE) and not _EDIT.search(reply or "") else "missing"
        errors.append(ParseError(kind, f"{len(chain)} edit(s) for {len(concepts)} concept(s)"))
    return chain[: len(concepts)], errors


@dataclass
class Verdict:
    """The judge's binary Answer Consistency and Explanation Faithfulness and its 1-5 rubric score."""

    ac: bool | None
    ef: bool | None
    score: int | None
    errors: list[ParseError]


def parse_verdict(reply: str) -> Verdict:
    ac = parse_choice(reply, "ac", YES_NO)
    ef = parse_choice(reply, "ef", YES_NO)
    sc = parse_choice(reply, "score", RUBRIC)
    errors = [e for e in (ac.error, ef.error, sc.error) if e is not None]
    return Verdict(None if ac.value is None else ac.value == "yes", None if ef.value is None else ef.value == "yes",
                   None if sc.value is None else int(sc.value), errors)  # fmt: skip
