"""Parsers of the EDCT stages' replies. Each returns the parsed value and a list of
:class:`~cbm.vlm.tags.ParseError` (recorded per item, counted per stage); none raises."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from cbm.core.tags import (
    REFUSAL,
    ParseError,
    TagResult,
    clean_reply,
    labelled_value,
    parse_choice,
    parse_score,
    parse_tag,
    plain_text,
    tolerant_value,
    unclosed_value,
)
from cbm.vlm.editors.base import EditInstruction

_CONCEPT = re.compile(r"<concept\b[^>]*>(.*?)</concept\s*>", re.IGNORECASE | re.DOTALL)
_EDIT = re.compile(r"<edit\b[^>]*>(.*?)</edit\s*>", re.IGNORECASE | re.DOTALL)
EDIT_FIELDS = ("concept", "keep", "change", "how", "constraints")
YES_NO = ("yes", "no")
#: Other spellings judges use for a binary verdict.
YES_NO_ALIASES = {"true": "yes", "false": "no", "consistent": "yes", "inconsistent": "no", "faithful": "yes", "unfaithful": "no"}
RUBRIC = tuple(str(i) for i in range(1, 6))
#: Fewest words of prose taken as the explanation of a reply without an <explanation> tag.
MIN_PROSE_WORDS = 4
_ANY_TAG = re.compile(r"<\s*/?\s*[A-Za-z_][\w-]*[^<>]*>")


@dataclass
class Answer:
    """A VLM's answer (one of the options, or ``None``) and its explanation (or ``None``)."""

    answer: str | None
    explanation: str | None
    errors: list[ParseError]


def parse_answer(reply: str, options: Sequence[str]) -> Answer:
    """The answer (tag, ``Answer:`` line, or prose naming exactly one option) and the explanation
    (:func:`parse_explanation`) of a reply that gives both (``baseline_turns: 1``)."""
    a = parse_answer_only(reply, options)
    explanation, e_err = parse_explanation(reply)
    return Answer(a.value, explanation, [err for err in (a.error, e_err) if err is not None])


def parse_answer_only(reply: str, options: Sequence[str]) -> TagResult:
    """The answer of a reply: one of ``options`` (tag, ``Answer:`` line, or prose naming exactly one
    option), or free text for an open-ended question (no options)."""
    return parse_choice(reply, "answer", options, free_text=True) if options else parse_free(reply, "answer")


def parse_explanation(reply: str) -> tuple[str | None, ParseError | None]:
    """The explanation of a reply: the tag; an unclosed one to the next tag; an ``Explanation:``
    line; else the prose outside an ``<answer>`` tag when it has at least :data:`MIN_PROSE_WORDS`
    words. ``None`` with the error when there is none."""
    e = parse_tag(reply, "explanation")
    explanation, e_err = e.value, e.error
    if e_err is not None:
        text = clean_reply(reply)
        if e_err.kind == "unclosed":
            rest = text[re.search(r"<\s*explanation\b[^>]*>", text, re.IGNORECASE).end() :]
            explanation = _ANY_TAG.split(rest, maxsplit=1)[0].strip() or unclosed_value(reply, "explanation")
        elif e_err.kind == "missing":
            explanation = labelled_value(text, "explanation")
            if explanation is None:
                prose = " ".join(_ANY_TAG.sub(" ", re.sub(r"<answer\b[^>]*>.*?</answer\s*>", " ", text, flags=re.IGNORECASE | re.DOTALL)).split())
                explanation = prose if len(prose.split()) >= MIN_PROSE_WORDS else None
        if explanation:
            e_err = None
    return explanation or None, e_err


def parse_free(reply: str, tag: str) -> TagResult:
    """An open-ended answer: the tag's text (markup and quotes removed), an unclosed tag's line, or an
    ``Answer:`` line; a refusal is ``refused``."""
    found, value = tolerant_value(reply or "", tag)
    if value is not None and plain_text(value) and not REFUSAL.search(value):
        return TagResult(plain_text(value), None, reply or "")
    if value is not None and REFUSAL.search(value) or (found.error is not None and REFUSAL.search(clean_reply(reply))):
        return TagResult(None, ParseError("refused", "the reply declines to answer"), reply or "")
    return found if found.error is not None else TagResult(None, ParseError("empty", f"<{tag}> is empty"), reply or "")


def _norm(text: str) -> str:
    return " ".join(text.lower().split()).strip(" .;:,")


def parse_concepts(reply: str, k: int) -> tuple[list[str], list[ParseError]]:
    """Up to ``k`` distinct cited concepts in reply order (``<concept>`` tags); duplicates (case and
    whitespace insensitive) and empty tags are dropped; an opened but unclosed tag is an error."""
    errors: list[ParseError] = []
    seen, out = set(), []
    reply = clean_reply(reply)
    tagged = _CONCEPT.findall(reply)
    if not tagged and not re.search(r"<concept\b|<none\s*/?>", reply, re.IGNORECASE):
        tagged = _list_items(reply)  # a plain bulleted / numbered list
    for raw in tagged:
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


def _list_items(text: str) -> list[str]:
    """The items of a bulleted or numbered list (``- x``, ``* x``, ``1. x``, ``2) x``), markup removed."""
    items = re.findall(r"(?m)^\s*(?:[-*\u2022]|\d+[.)])\s+(.+?)\s*$", text)
    return [re.sub(r"[*_`\"]", "", i).split(":")[0].strip(" .") for i in items]


#: ``<edit_1>...</edit_1>`` (also ``<edit-1>``): an edit numbered in its tag name.
_NUMBERED_EDIT = re.compile(r"<edit[_-](\d+)\b[^>]*>(.*?)</edit[_-]\1\s*>", re.IGNORECASE | re.DOTALL)
#: A heading over an edit's inner tags: ``### Edit 1``, ``**Edit 2:**``, ``Edit 3 -`` on a line of its own.
_EDIT_HEADING = re.compile(r"(?im)^[ \t]*(?:#{1,6}[ \t]*)?(?:\*\*|__)?[ \t]*edit[ \t]*#?(\d+)\b")


def edit_blocks(reply: str) -> list[str]:
    """The edits of a chain reply, in order, in the first of the forms real models write: ``<edit>``
    blocks; ``<edit_1>`` ... ``<edit_N>`` blocks (sorted by their number); or sections under ``Edit N``
    headings (Markdown ``### Edit 1``, ``**Edit 1:**``) that hold the inner tags."""
    blocks = _EDIT.findall(reply)
    if blocks:
        return blocks
    numbered = _NUMBERED_EDIT.findall(reply)
    if numbered:
        return [body for _, body in sorted(numbered, key=lambda nb: int(nb[0]))]
    heads = list(_EDIT_HEADING.finditer(reply))
    sections = [reply[h.end(1): heads[j + 1].start() if j + 1 < len(heads) else len(reply)] for j, h in enumerate(heads)]
    return [sec for sec in sections if any(parse_tag(sec, f).value for f in EDIT_FIELDS)]


def parse_edit_chain(reply: str, concepts: Sequence[str]) -> tuple[list[EditInstruction], list[ParseError]]:
    """One :class:`EditInstruction` per edit (:func:`edit_blocks`: ``<edit>`` blocks, ``<edit_N>``
    blocks or ``### Edit N`` sections), in order; an edit without ``<concept>`` takes the concept at
    its position; fewer edits than concepts is an error (the chain is cut)."""
    errors: list[ParseError] = []
    chain = []
    reply = clean_reply(reply)
    for i, block in enumerate(edit_blocks(reply or "")):
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
        opened = re.search(r"<edit(?:\b|[_-]\d)", reply or "", re.IGNORECASE)
        kind = "unclosed" if opened and not _EDIT.search(reply or "") and not _NUMBERED_EDIT.search(reply or "") else "missing"
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
    """AC and EF as yes / no (tags, or ``Answer consistency: yes`` lines; true/false and the like
    accepted) and the rubric score 1-5 (``4``, ``4.0``, ``4/5``, ``Score: 4``)."""
    ac = parse_choice(reply, "ac", YES_NO, YES_NO_ALIASES, label="answer consistency")
    if ac.error is not None and ac.error.kind == "missing":
        ac = parse_choice(reply, "ac", YES_NO, YES_NO_ALIASES)
    ef = parse_choice(reply, "ef", YES_NO, YES_NO_ALIASES, label="explanation faithfulness")
    if ef.error is not None and ef.error.kind == "missing":
        ef = parse_choice(reply, "ef", YES_NO, YES_NO_ALIASES)
    sc = parse_score(reply, "score")
    errors = [e for e in (ac.error, ef.error, sc.error) if e is not None]
    return Verdict(None if ac.value is None else ac.value == "yes", None if ef.value is None else ef.value == "yes",
                   None if sc.value is None else int(sc.value), errors)  # fmt: skip
