"""Parsing the five conditions' replies, with explicit error kinds.

Every condition names the tags its reply must hold (E1 ``response``; E2 + ``explanation``; E3 +
``features``; E4 + ``features``, ``kb``, ``rule_check``; E5 ``response``, ``tbox``, ``abox``,
``dl_explanation``). A reply is checked for:

* ``missing``: a required tag is absent;
* ``unclosed``: a tag opened and never closed;
* ``orphan``: a closing tag with no opening tag;
* ``not_in_options``: ``<response>`` is not one of the episode's labels;
* ``extra_tags``: a known tag the condition does not ask for (e.g. ``<kb>`` under E3);
* ``refused``: no label, and the reply declines to answer (:func:`cbm.vlm.tags.declines`, the
  shared reply parser's test: "I'm unable to classify this image").

A ``<response>`` the reply leaves out or never closes is read as the shared parser reads any tag
(:func:`cbm.vlm.tags.tolerant_value`): an unclosed final ``<response>2`` to its line end, a
``**Response:** 2`` line, a ``<final_response>`` tag; a label read so is no issue (nothing to re-ask).
The response counts (for accuracy) only when it parsed to an option; every error is kept with its
kind, so the tables count them per model x condition.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from cbm.core.tags import clean_reply, declines, match_option, tag_blocks, tolerant_value

ERROR_KINDS = ("missing", "unclosed", "orphan", "not_in_options", "extra_tags", "refused")
#: The tags each condition asks for.
CONDITION_TAGS: dict[str, tuple[str, ...]] = {
    "E1": ("response",),
    "E2": ("response", "explanation"),
    "E3": ("response", "features"),
    "E4": ("response", "features", "kb", "rule_check"),
    "E5": ("response", "tbox", "abox", "dl_explanation"),
}
KNOWN_TAGS: tuple[str, ...] = tuple(dict.fromkeys(t for tags in CONDITION_TAGS.values() for t in tags))

@dataclass(frozen=True)
class Issue:
    kind: str
    tag: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}({self.tag}): {self.detail}"


@dataclass
class Parsed:
    """``fields``: the text of every well-formed known tag; ``response``: the chosen label or ``None``."""

    condition: str
    fields: dict[str, str] = field(default_factory=dict)
    response: str | None = None
    issues: list[Issue] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.issues

    def kinds(self) -> list[str]:
        return sorted({i.kind for i in self.issues})

    def to_json(self) -> dict:
        return {"condition": self.condition, "fields": self.fields, "response": self.response,
                "issues": [{"kind": i.kind, "tag": i.tag, "detail": i.detail} for i in self.issues]}  # fmt: skip


def normalise_label(value: str) -> str:
    """``" Class 2. "`` -> ``"2"``; ``"**Star hands**"`` -> ``"star hands"`` (case, markup, a
    ``class``/``label`` prefix and trailing punctuation ignored)."""
    v = re.sub(r"[*_`\"']", "", value).strip().strip(".!:;,").strip().lower()
    v = re.sub(r"^(class|label|category)\s*[:#]?\s*", "", v)
    return v.strip()


def read_label(value: str, options: Sequence[str]) -> str | None:
    """The option ``value`` names (case, markup, a ``class`` prefix ignored; or a sentence naming
    exactly one label, "The query image shows class 2."), or ``None``."""
    opts = {normalise_label(o): o for o in options}
    got = normalise_label(value)
    if got not in opts:
        named, _ = match_option(value, [normalise_label(o) for o in options])
        got = named if named is not None else got
    return opts.get(got)


def parse_reply(reply: str | None, condition: str, options: Sequence[str]) -> Parsed:
    """Parse one reply of ``condition`` against the episode's label ``options``."""
    if condition not in CONDITION_TAGS:
        raise ValueError(f"unknown condition '{condition}' (expected one of {sorted(CONDITION_TAGS)})")
    text = clean_reply(reply)  # reasoning blocks, code fences and escaped tags do not count
    want = CONDITION_TAGS[condition]
    out = Parsed(condition)
    for tag in KNOWN_TAGS:
        bodies, unclosed, orphans = tag_blocks(text, tag)
        if tag == "response" and tag in want and not bodies:  # left out or never closed: read as the shared parser reads a tag
            _, value = tolerant_value(reply or "", tag)
            label = read_label(value, options) if value else None
            if label is not None:
                out.fields[tag], out.response, unclosed = value, label, 0
        if unclosed:
            out.issues.append(Issue("unclosed", tag, f"<{tag}> opened {unclosed}x without </{tag}>"))
        if orphans:
            out.issues.append(Issue("orphan", tag, f"</{tag}> closed {orphans}x without <{tag}>"))
        if tag not in want:
            if bodies or unclosed:
                out.issues.append(Issue("extra_tags", tag, f"<{tag}> is not asked for under {condition}"))
            continue
        if bodies:
            out.fields[tag] = "\n".join(bodies) if tag != "response" else bodies[-1]
        elif not unclosed and tag not in out.fields:
            out.issues.append(Issue("missing", tag, f"no <{tag}>"))
    if "response" in out.fields and out.response is None:
        out.response = read_label(out.fields["response"], options)
        if out.response is None:
            out.issues.append(Issue("not_in_options", "response", f"{out.fields['response'][:40]!r} is not one of {list(options)}"))
    if out.response is None and "response" in want and declines(out.fields.get("response", reply)):
        # no label, and the reply declines to answer: refused, not a format error (the response's own issue replaced)
        out.issues = [i for i in out.issues if i.tag != "response" or i.kind == "orphan"]
        out.issues.append(Issue("refused", "response", "the reply declines to answer"))
    return out


def refused(parsed: Parsed | dict) -> bool:
    """Whether a parsed reply (or its JSON) declined to answer."""
    issues = parsed.issues if isinstance(parsed, Parsed) else parsed.get("issues", [])
    return any((i.kind if isinstance(i, Issue) else i["kind"]) == "refused" for i in issues)


#: Why a trial has no label, most telling first: a refusal, then the response tag's own problem.
LOSS_ORDER = ("refused", "missing", "unclosed", "not_in_options")


def loss_reason(parsed: dict) -> str | None:
    """Why a parsed reply (its JSON) has no label: ``refused``, ``missing``, ``unclosed`` or
    ``not_in_options`` (the response tag's issue); ``None`` when it has one."""
    if parsed.get("response") is not None:
        return None
    kinds = {i["kind"] for i in parsed.get("issues", []) if i["tag"] == "response"}
    return next((k for k in LOSS_ORDER if k in kinds), "missing")


def bullet_features(text: str) -> list[str]:
    """Feature noun phrases from a ``<features>`` body: one per bullet / line, markers stripped,
    lower-cased, duplicates dropped (order kept)."""
    items = []
    for line in re.split(r"[\n;]", text or ""):
        s = re.sub(r"^\s*(?:[-*\u2022]|\d+[.)])\s*", "", line).strip().strip(".").strip().lower()
        if s:
            items.append(s)
    return list(dict.fromkeys(items))


#: What separates a feature from its value in an E4 ``<features>`` line (``colour: red``, ``colour = red``).
_PAIR_SEP = re.compile(r"\s*(?::|=)\s*")


def feature_value_pairs(text: str) -> list[tuple[str, str]]:
    """``(feature, value)`` pairs from an E4 ``<features>`` body in the paper's ``- feature: value``
    form (``=`` accepted too), bullets as :func:`bullet_features` reads them; a line without a
    separator is a feature with value ``""``. Lower-cased, duplicates dropped (order kept)."""
    pairs = []
    for item in bullet_features(text):
        feature, _, value = _PAIR_SEP.sub(":", item, count=1).partition(":")
        pairs.append((feature.strip(), value.strip()))
    return list(dict.fromkeys(pairs))


def pair_text(feature: str, value: str) -> str:
    """``("colour", "red")`` -> ``"colour: red"`` (a feature without value stays bare)."""
    return f"{feature}: {value}" if value else feature


def count_issues(parsed: Iterable[Parsed]) -> dict[str, int]:
    """Errors per kind (a reply with two missing tags counts twice)."""
    counts = dict.fromkeys(ERROR_KINDS, 0)
    for p in parsed:
        for i in p.issues:
            counts[i.kind] += 1
    return counts
