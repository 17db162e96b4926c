"""Structured parsing of XML-tagged model replies (``<answer>yes</answer>``), as real models write them.

A sweep asks thousands of questions; a malformed reply must become a recorded error of a known
kind, never an exception, and a reply a person would read without doubt must be read. Before any
tag is looked for, :func:`clean_reply` drops reasoning blocks (``<think>...</think>``, also one
whose opening tag the server stripped, and a truncated one that never closes), code-fence lines
and HTML-escaped tags. Values are read tolerantly (:func:`match_option`: markdown, quotes, "The
answer is ...", a sentence naming exactly one option and no negated one; :func:`parse_score`: "4",
"4.0", "4/5", "**4**", "4 out of 5"), and a missing tag falls back to a labelled line ("Answer:
Glorp", "Score: 4"). Every parse returns a :class:`TagResult` whose ``error`` is ``None`` or one of
:data:`ERROR_KINDS`:

* ``missing``: no ``<tag>`` in the reply (nor a labelled line);
* ``unclosed``: ``<tag>`` opened but never closed (a truncated reply);
* ``empty``: the tag holds only whitespace;
* ``not_in_options``: the value is not one of the allowed options;
* ``conflicting``: the tag appears more than once with different values;
* ``ambiguous``: the value names several options (or only negated ones);
* ``refused``: no value, and the reply declines to answer.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

ERROR_KINDS = ("missing", "unclosed", "empty", "not_in_options", "conflicting", "ambiguous", "refused")

#: The follow-up turn that re-asks a reply that could not be read (``problem`` names why).
REASK_PROMPT = ("Your reply could not be read ({problem}). Reply again to the request above, in exactly the format it "
                "asks for: the tags only, each once, with nothing outside them.")  # fmt: skip

_REASONING_TAGS = r"(?:think|thinking|reasoning|reflection|scratchpad)"
_REASONING_BLOCK = re.compile(rf"<\s*({_REASONING_TAGS})\b[^>]*>.*?<\s*/\s*\1\s*>", re.IGNORECASE | re.DOTALL)
_REASONING_OPEN = re.compile(rf"<\s*{_REASONING_TAGS}\b[^>]*>", re.IGNORECASE)
_REASONING_CLOSE = re.compile(rf"<\s*/\s*{_REASONING_TAGS}\s*>", re.IGNORECASE)
_FENCE_LINE = re.compile(r"^[ \t]*(?:```|~~~)[\w+-]*[ \t]*$", re.MULTILINE)
#: A reply (or a tag's value) that declines to answer: "I'm sorry", "I can't classify this", "it cannot
#: be determined", "not possible to tell", "As an AI ..." (:func:`declines`).
REFUSAL = re.compile(
    r"\b(?:I\s*(?:'m| am)\s+(?:sorry|unable|not able)|I\s+(?:cannot|can't|can not|won't|am unable to)\s+"
    r"(?:help|assist|answer|determine|tell|provide|comply|identify|say|decide|classify|categori[sz]e|recogni[sz]e|distinguish|label|make out)|"
    r"(?:cannot|can't|impossible to|not possible to)\s+(?:be\s+)?(?:determined?|classif(?:y|ied)|tell|say)|"
    r"as an ai\b|unable to (?:determine|answer|tell|classify|identify|say))",
    re.IGNORECASE,
)
_NEGATION = re.compile(r"(?:\bnot|n't|\bno|\bnever|\bneither|\bnor|\brather than|\binstead of)\s+(?:\w+\s+){0,2}$", re.IGNORECASE)
_PREFIX = re.compile(
    r"^(?:(?:the|my)\s+)?(?:final\s+)?(?:answer|label|class|category|response|prediction|verdict|choice)\s*(?:is|would be|:|#|-|=)?\s*",
    re.IGNORECASE,
)


def clean_reply(text: str | None) -> str:
    """The part of a reply that answers: reasoning blocks removed (closed ones; everything before a
    closing tag whose opening tag the server stripped; everything after an opening tag that never
    closes: a truncated reasoning), code-fence lines removed, escaped tags (``&lt;answer&gt;``) unescaped."""
    t = text or ""
    if "&lt;" in t or "&gt;" in t:
        t = html.unescape(t)
    t = _REASONING_BLOCK.sub(" ", t)
    closes = list(_REASONING_CLOSE.finditer(t))
    if closes:
        t = t[closes[-1].end() :]
    opened = _REASONING_OPEN.search(t)
    if opened is not None:
        t = t[: opened.start()]
    return _FENCE_LINE.sub("", t)


def declines(text: str | None) -> bool:
    """Whether a reply or a tag's value declines to answer (:data:`REFUSAL`; reasoning blocks,
    fences and escaped tags dropped first, as :func:`clean_reply` does): how every parser here tells
    a ``refused`` reply from a ``missing`` or ``not_in_options`` one."""
    return bool(REFUSAL.search(clean_reply(text)))


def plain_text(value: str) -> str:
    """Markdown emphasis, quotes and surrounding punctuation removed, whitespace collapsed."""
    v = re.sub(r"[*_`\"\u201c\u201d\u2018\u2019]|(?<!\w)'|'(?!\w)", "", value)
    return " ".join(v.split()).strip(" .!:;,()[]")


def match_option(value: str, options: Sequence[str], aliases: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """The option ``value`` names, read as a person would: ``(option, None)`` or ``(None, kind)``
    with kind ``not_in_options`` / ``ambiguous``. Exact (case-insensitive, markup and a leading
    "The answer is" ignored) first; else the value must name exactly one option as a whole word
    and not negated ("not a Glorp" names no option)."""
    opts = {o.lower(): o for o in options}
    alias = {k.lower(): v for k, v in (aliases or {}).items()}
    plain = plain_text(value)
    for cand in (plain, _PREFIX.sub("", plain)):
        word = plain_text(cand).lower()
        word = alias.get(word, word).lower()
        if word in opts:
            return opts[word], None
    names = {**{o: o for o in opts}, **{a: alias[a].lower() for a in alias if alias[a].lower() in opts}}
    found, negated = set(), set()
    low = plain.lower()
    for name, target in names.items():
        for m in re.finditer(rf"(?<![\w-]){re.escape(name)}(?![\w-])", low):
            (negated if _NEGATION.search(low[max(0, m.start() - 40) : m.start()]) else found).add(target)
    if len(found) == 1:
        return opts[found.pop()], None
    return None, ("ambiguous" if found or negated else "not_in_options")


def labelled_value(text: str, label: str) -> str | None:
    """The value of the last ``label: value`` line (markdown around the label allowed)."""
    words = r"[\s_-]+".join(re.escape(w) for w in re.split(r"[\s_-]+", label.strip()) if w)
    hits = re.findall(rf"(?im)^[\s>*#_-]*(?:final\s+)?{words}[\s*_]*[:=][\s*_]*(.+?)\s*$", text)
    return hits[-1] if hits else None


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
    """The text inside ``<tag>...</tag>`` (attributes on the opening tag allowed, case-insensitive)
    of the cleaned reply (:func:`clean_reply`; ``raw`` keeps the reply as sent).

    Repeated tags with the same value count once; with different values the result is a
    ``conflicting`` error (a model that answers twice has not answered).
    """
    raw = reply or ""
    text = clean_reply(raw)
    values, unclosed, _ = tag_blocks(text, tag)
    if not values:
        if unclosed:
            return TagResult(None, ParseError("unclosed", f"<{tag}> is never closed"), raw)
        return TagResult(None, ParseError("missing", f"no <{tag}> tag in the reply"), raw)
    distinct = list(dict.fromkeys(values))
    if len(distinct) > 1:
        shown = ", ".join(repr(v[:40]) for v in distinct[:3])
        return TagResult(None, ParseError("conflicting", f"<{tag}> given {len(distinct)} different values: {shown}"), raw)
    if not distinct[0]:
        return TagResult(None, ParseError("empty", f"<{tag}> is empty"), raw)
    return TagResult(distinct[0], None, raw)


def _untagged_value(raw: str, tag: str, label: str | None) -> str | None:
    """A missing tag's value: from a tag whose name contains it (``<final_answer>``), else a
    labelled line (``Answer: Glorp``, ``**Score:** 4``)."""
    text = clean_reply(raw)
    for m in _OPEN.finditer(text):
        name = m.group(1).lower()
        if name != tag.lower() and tag.lower() in name:
            bodies, _, _ = tag_blocks(text, name)
            if bodies and bodies[0]:
                return bodies[0]
    for name in dict.fromkeys(x for x in (label, tag) if x):
        found = labelled_value(text, name)
        if found is not None and plain_text(found):
            return found
    return None


def unclosed_value(raw: str, tag: str) -> str | None:
    """What follows an opening ``<tag>`` that never closes, up to the next tag or line end (a model
    that forgot the closing tag, or a reply cut after its answer)."""
    text = clean_reply(raw)
    opens = [m for m in _OPEN.finditer(text) if m.group(1).lower() == tag.lower()]
    if not opens:
        return None
    rest = text[opens[-1].end() :].lstrip()
    value = re.split(r"<|\n", rest, maxsplit=1)[0].strip()
    return value or None


def tolerant_value(reply: str, tag: str, label: str | None = None) -> tuple[TagResult, str | None]:
    """``parse_tag``'s result and the value read from it: the tag's text; for an unclosed tag the
    text to the line end; for a missing one a tag whose name contains it or a labelled line; else
    ``None`` (a conflicting or empty tag has no value)."""
    found = parse_tag(reply, tag)
    if found.ok:
        return found, found.value
    if found.error.kind == "unclosed":
        return found, unclosed_value(reply, tag)
    if found.error.kind == "missing":
        return found, _untagged_value(reply, tag, label)
    return found, None


def _missing(found: TagResult, raw: str) -> TagResult:
    """A missing value: ``refused`` when the reply declines to answer, else the parse's own error."""
    if found.error is not None and found.error.kind == "missing" and declines(raw):
        return TagResult(None, ParseError("refused", "the reply declines to answer"), raw)
    return found


def parse_choice(reply: str | None, tag: str, options: Iterable[str], aliases: Mapping[str, str] | None = None, *,
                 label: str | None = None, free_text: bool = False) -> TagResult:  # fmt: skip
    """``parse_tag`` read as one of ``options`` by :func:`match_option`; ``aliases`` maps other
    spellings onto an option (e.g. ``{"true": "yes"}``). Without the tag: a labelled line
    (``label: value``, default the tag's name, e.g. ``Answer: Glorp``), then (``free_text``) the
    whole reply when it names exactly one option and no negated one (a bare "Glorp." or a sentence)."""
    raw = reply or ""
    opts = list(options)
    found, value = tolerant_value(raw, tag, label)
    if not found.ok:
        if value is None and found.error.kind == "missing" and free_text:
            body = clean_reply(raw).strip()
            if body and not re.search(r"<\s*/?\s*[A-Za-z_][\w-]*[^<>]*>", body):  # prose, not other tags
                got, kind = match_option(body, opts, aliases)
                if got is not None:
                    return TagResult(got, None, raw)
                if kind == "ambiguous":
                    return TagResult(None, ParseError("ambiguous", f"no <{tag}>, and the reply names several options or only negated ones"), raw)
        if value is None:
            return _missing(found, raw)
    got, kind = match_option(value, opts, aliases)
    if got is not None:
        return TagResult(got, None, raw)
    if kind == "not_in_options" and declines(value):
        return TagResult(None, ParseError("refused", f"<{tag}> declines to answer: {value[:40]!r}"), raw)
    what = "names several options or only negated ones" if kind == "ambiguous" else "is not one of the options"
    return TagResult(None, ParseError(kind, f"<{tag}> {what}: {value[:40]!r}, expected one of {sorted(opts)}"), raw)


_NUMBER = re.compile(r"^(?:score\s*[:=]?\s*)?([+-]?\d+(?:\.\d+)?)\s*(?:(?:/|out of|of)\s*(\d+(?:\.\d+)?))?(?:\s*(?:points?|stars?))?\s*(?:[-\u2013\u2014:(,.].*)?$", re.IGNORECASE | re.DOTALL)


def read_score(value: str, lo: int = 1, hi: int = 5) -> tuple[int | None, str | None]:
    """An integer score on ``lo..hi`` from ``"4"``, ``"4.0"``, ``"4/5"``, ``"**4**"``, ``"4 out of 5"``,
    ``"Score: 4 - clear"``: ``(score, None)`` or ``(None, why)``. ``"4.5"``, ``"8/10"`` and values
    outside the scale are refused, never rounded or rescaled."""
    v = plain_text(value)
    m = _NUMBER.match(v)
    if not m:
        return None, f"not a number: {value[:30]!r}"
    x, scale = float(m.group(1)), m.group(2)
    if scale is not None and float(scale) != hi:
        return None, f"on another scale: {value[:30]!r}"
    if x != int(x):
        return None, f"not an integer: {value[:30]!r}"
    if not lo <= x <= hi:
        return None, f"outside {lo}-{hi}: {value[:30]!r}"
    return int(x), None


def parse_score(reply: str | None, tag: str, lo: int = 1, hi: int = 5, *, label: str | None = None) -> TagResult:
    """An integer ``lo..hi`` from ``<tag>`` (or a ``label: 4`` line when the tag is missing), read by
    :func:`read_score`; the value is the score's text (``"4"``)."""
    raw = reply or ""
    found, value = tolerant_value(raw, tag, label)
    if value is None:
        return _missing(found, raw)
    score, why = read_score(value, lo, hi)
    if score is None:
        return TagResult(None, ParseError("not_in_options", f"<{tag}> {why}"), raw)
    return TagResult(str(score), None, raw)
