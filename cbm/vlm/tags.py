"""Structured parsing of XML-tagged model replies (``<answer>yes</answer>``).

A sweep asks thousands of questions; a malformed reply must become a recorded error of a known
kind, never an exception. Every parse returns a :class:`TagResult` whose ``error`` is ``None`` or
one of :data:`ERROR_KINDS`:

* ``missing``: no ``<tag>`` in the reply;
* ``unclosed``: ``<tag>`` opened but never closed (a truncated reply);
* ``empty``: the tag holds only whitespace;
* ``not_in_options``: the value is not one of the allowed options;
* ``conflicting``: the tag appears more than once with different values.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

ERROR_KINDS = ("missing", "unclosed", "empty", "not_in_options", "conflicting")


@dataclass(frozen=True)
class ParseError:
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


@dataclass(frozen=True)
class TagResult:
    """``value`` (stripped text of the tag, or the matched option) or ``error``; ``raw`` is the reply."""

    value: str | None
    error: ParseError | None
    raw: str

    @property
    def ok(self) -> bool:
        return self.error is None


_OPEN = re.compile(r"<\s*([A-Za-z_][\w-]*)(?:\s[^<>]*)?>")
_CLOSE = re.compile(r"<\s*/\s*([A-Za-z_][\w-]*)\s*>")


def tag_blocks(text: str, tag: str) -> tuple[list[str], int, int]:
    """The stripped bodies of every closed ``<tag>...</tag>`` (attributes allowed, case-insensitive),
    and the counts of opening tags never closed and of closing tags never opened."""
    tag = tag.lower()
    opens = [m for m in _OPEN.finditer(text) if m.group(1).lower() == tag]
    closes = [m for m in _CLOSE.finditer(text) if m.group(1).lower() == tag]
    bodies, used, unclosed = [], 0, 0
    for o in opens:
        while used < len(closes) and closes[used].start() < o.end():
            used += 1  # a closing tag before this opening one matches nothing
        if used == len(closes):
            unclosed += 1
            continue
        bodies.append(text[o.end() : closes[used].start()].strip())
        used += 1
    return bodies, unclosed, len(closes) - len(bodies)


def parse_tag(reply: str | None, tag: str) -> TagResult:
    """The text inside ``<tag>...</tag>`` (attributes on the opening tag allowed, case-insensitive).

    Repeated tags with the same value count once; with different values the result is a
    ``conflicting`` error (a model that answers twice has not answered).
    """
    text = reply or ""
    values, unclosed, _ = tag_blocks(text, tag)
    if not values:
        if unclosed:
            return TagResult(None, ParseError("unclosed", f"<{tag}> is never closed"), text)
        return TagResult(None, ParseError("missing", f"no <{tag}> tag in the reply"), text)
    distinct = list(dict.fromkeys(values))
    if len(distinct) > 1:
        shown = ", ".join(repr(v[:40]) for v in distinct[:3])
        return TagResult(None, ParseError("conflicting", f"<{tag}> given {len(distinct)} different values: {shown}"), text)
    if not distinct[0]:
        return TagResult(None, ParseError("empty", f"<{tag}> is empty"), text)
    return TagResult(distinct[0], None, text)


def parse_choice(reply: str | None, tag: str, options: Iterable[str], aliases: Mapping[str, str] | None = None) -> TagResult:
    """``parse_tag`` restricted to ``options`` (case-insensitive, trailing punctuation ignored);
    ``aliases`` maps other spellings onto an option (e.g. ``{"true": "yes"}``)."""
    found = parse_tag(reply, tag)
    if not found.ok:
        return found
    opts = {o.lower(): o for o in options}
    alias = {k.lower(): v for k, v in (aliases or {}).items()}
    word = found.value.strip().strip(".!").strip().lower()
    word = alias.get(word, word).lower()
    if word in opts:
        return TagResult(opts[word], None, found.raw)
    return TagResult(None, ParseError("not_in_options", f"<{tag}> is {found.value[:40]!r}, expected one of {sorted(opts.values())}"), found.raw)
