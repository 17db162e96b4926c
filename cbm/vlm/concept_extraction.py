"""Concept discovery: ask a (vision-)language model for a concept vocabulary and keep what is usable.

Automatic concept extraction (label-free / LLM-proposed concept bottlenecks) asks a model which
visual properties tell the classes apart. Here the model sees ``n_per_class`` example images of
every class in ONE request and answers with up to ``max_concepts`` blocks::

    <concept name="boxy_head"><description>the head is square</description><expr>head_round == 0</expr></concept>

where ``expr`` is written in the concept-set expression language
(:mod:`synthetic.robot.concepts`) over the attribute vocabulary listed in the prompt. Grounding
each proposal in an expression makes it *computable*: the proposed set becomes a concept-set
YAML file that ``cbm-train data.concept_set=<file>`` annotates exactly, so a discovered
vocabulary can be trained on and compared with the hand-made ones.

A reply is parsed block by block and never raises: a malformed block (no name, an unclosed tag,
a missing ``<expr>`` ...) becomes a :class:`Rejected` entry with a kind from
:data:`REJECT_KINDS`, as does a valid block with a bad name, a duplicate or an expression the
evaluator refuses. :func:`write_concept_set` writes the kept ones atomically and reloads them.
"""

from __future__ import annotations

import ast
import html
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from cbm.core.atomic import write_text_atomic
from cbm.core.tags import ParseError, parse_tag
from cbm.vlm.client import ChatClient, Messages
from cbm.vlm.messages import image_part
from cbm.vlm.reply import Reply
from synthetic.base import SyntheticData
from synthetic.robot.concepts import Concept, ExpressionError, check_expression, load_concept_set

#: Why a proposed concept was not kept. Parse failures (as in :mod:`cbm.vlm.tags`): ``missing``
#: (no ``<concept>`` block at all, or a block without a name / description / expr), ``unclosed``
#: (a block or tag never closed: a truncated reply), ``empty``, ``conflicting`` (a tag given twice
#: with different values). Validation failures: ``bad_name`` (not a snake_case identifier),
#: ``duplicate`` (a name or an expression already kept), ``bad_expr`` (the evaluator refuses it, or
#: it names no attribute), ``over_limit`` (beyond ``max_concepts``).
REJECT_KINDS = ("missing", "unclosed", "empty", "conflicting", "bad_name", "duplicate", "bad_expr", "over_limit")
#: Placeholders an instruction template may use.
PLACEHOLDERS = ("max_concepts", "vocabulary", "classes", "n_classes", "n_per_class")
#: A concept name: lower-case words joined by single underscores, starting with a letter.
NAME_PATTERN = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")
MAX_NAME_LEN = 64
#: Characters of an offending value quoted in a rejection reason.
SHOWN_CHARS = 60

_OPEN = re.compile(r"<\s*concept\b([^>]*)>", re.IGNORECASE)
_CLOSE = re.compile(r"<\s*/\s*concept\s*>", re.IGNORECASE)
_NAME_ATTR = re.compile(r"""\bname\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>/]+))""", re.IGNORECASE)
_CDATA = re.compile(r"^<!\[CDATA\[(.*)\]\]>$", re.DOTALL)


class NoConceptsError(ValueError):
    """The reply held no usable concept; nothing is written."""


@dataclass(frozen=True)
class Rejected:
    """A proposal that was not kept: its position among the reply's ``<concept>`` blocks (``None``
    for a reply-level problem), the name and expression as far as they could be read, and why."""

    index: int | None
    name: str | None
    expr: str | None
    kind: str
    reason: str

    def __str__(self) -> str:
        where = f"#{self.index + 1}" if self.index is not None else "reply"
        label = f" {self.name}" if self.name else ""
        return f"{where}{label}: {self.kind}: {self.reason}"


@dataclass
class ExtractionResult:
    """What one extraction request gave: the concepts kept (in reply order), the rejected
    proposals with reasons, the raw reply, the client's usage record and the example rows sent."""

    concepts: list[Concept]
    rejected: list[Rejected]
    reply: Reply
    usage: dict[str, Any]
    n_images: int
    classes: list[str]
    example_rows: dict[str, list[int]] = field(default_factory=dict)

    @property
    def raw(self) -> str:
        return self.reply.text

    @property
    def truncated(self) -> bool:
        """The reply stopped at ``max_tokens`` (raise ``client.max_tokens`` if blocks are unclosed)."""
        return self.reply.finish_reason == "length"

    def require_concepts(self) -> None:
        """Raise :class:`NoConceptsError` (one line, with the rejection kinds) when none was kept."""
        if self.concepts:
            return
        kinds = Counter(r.kind for r in self.rejected)
        why = ", ".join(f"{k} x{n}" for k, n in kinds.items()) or "nothing proposed"
        hint = " (the reply hit client.max_tokens)" if self.truncated else ""
        raise NoConceptsError(f"the model proposed no valid concept ({why}){hint}; nothing written")


# ------------------------------------------------------------------------------------- examples
def example_rows(data: SyntheticData, split: str, n_per_class: int, seed: int) -> dict[str, list[int]]:
    """``n_per_class`` random rows of every class in ``split`` (sorted; the same for the same seed);
    a class with too few rows is one clear error."""
    rows = data.indices(split)
    rng = np.random.default_rng(seed)
    out: dict[str, list[int]] = {}
    for k, name in enumerate(data.class_names):
        pool = rows[data.y[rows] == k]
        if len(pool) < n_per_class:
            raise ValueError(f"split '{split}' has {len(pool)} example(s) of class '{name}', n_per_class={n_per_class} "
                             f"needs more (raise data.n_train / data.n_test, or lower n_per_class)")  # fmt: skip
        out[name] = sorted(int(i) for i in rng.choice(pool, size=n_per_class, replace=False))
    return out


def example_images(data: SyntheticData, rows: Mapping[str, Sequence[int]]) -> dict[str, list[np.ndarray]]:
    """The images of ``rows`` per class (image modality only)."""
    if data.modality != "image":
        raise ValueError(f"concept extraction shows images; this dataset is {data.modality} (use data.modality=image)")
    return {name: [data.x[i] for i in idx] for name, idx in rows.items()}


# --------------------------------------------------------------------------------------- prompt
def render_instruction(template: str, max_concepts: int, vocabulary: Mapping[str, str], classes: Sequence[str], n_per_class: int) -> str:
    """The instruction text: ``template`` with its placeholders (:data:`PLACEHOLDERS`) filled; an
    unknown placeholder or a stray brace is one clear error (write literal braces as ``{{ }}``)."""
    values = {
        "max_concepts": max_concepts,
        "vocabulary": "\n".join(f"- {name}: {meaning}" for name, meaning in vocabulary.items()),
        "classes": ", ".join(classes),
        "n_classes": len(classes),
        "n_per_class": n_per_class,
    }
    try:
        return template.format(**values)
    except KeyError as err:
        raise ValueError(f"prompt.instruction: unknown placeholder {{{err.args[0]}}} (known: {', '.join(PLACEHOLDERS)})") from None
    except (ValueError, IndexError) as err:
        raise ValueError(f"prompt.instruction: not a valid template ({err}; write literal braces as {{{{ }}}})") from None


def build_messages(examples: Mapping[str, Sequence[Any]], instruction: str, system: str | None = None) -> Messages:
    """One user turn: per class, a text part naming it followed by its images; then the instruction
    (after a system turn when ``system`` is given). Images travel as lossless PNG data URLs."""
    content: list[dict[str, Any]] = []
    for name, images in examples.items():
        content.append({"type": "text", "text": f"Examples of class '{name}' ({len(images)} images):"})
        content += [image_part(im) for im in images]
    content.append({"type": "text", "text": instruction})
    head: Messages = [{"role": "system", "content": system}] if system else []
    return [*head, {"role": "user", "content": content}]


# ---------------------------------------------------------------------------------------- parse
@dataclass(frozen=True)
class Proposal:
    """One ``<concept>`` block as read from the reply (``error`` set when it could not be read)."""

    index: int
    name: str | None
    description: str | None
    expr: str | None
    error: ParseError | None


def _clean(text: str) -> str:
    """Unescape XML entities, drop a CDATA wrapper and code backticks, collapse whitespace."""
    text = html.unescape(text).strip()
    m = _CDATA.match(text)
    if m:
        text = m.group(1)
    text = text.strip().strip("`").strip()
    return " ".join(text.split())


def _block_name(attrs: str, body: str) -> tuple[str | None, ParseError | None]:
    m = _NAME_ATTR.search(attrs)
    if m:
        value = _clean(next(g for g in m.groups() if g is not None))
        return (value, None) if value else (None, ParseError("empty", "the name attribute is empty"))
    found = parse_tag(body, "name")  # tolerated: <name>...</name> inside the block
    if found.ok:
        return _clean(found.value or ""), None
    if found.error is not None and found.error.kind == "missing":
        return None, ParseError("missing", 'no name="..." attribute on <concept>')
    return None, found.error


def parse_proposals(reply: str | None) -> list[Proposal]:
    """Every ``<concept>`` block of ``reply`` in order; a block runs to its ``</concept>`` or, when
    unclosed, to the next ``<concept>`` (or the end). Never raises."""
    text = reply or ""
    opens = list(_OPEN.finditer(text))
    out: list[Proposal] = []
    for i, m in enumerate(opens):
        limit = opens[i + 1].start() if i + 1 < len(opens) else len(text)
        close = _CLOSE.search(text, m.end(), limit)
        body = text[m.end() : close.start() if close else limit]
        name, error = _block_name(m.group(1), body)
        parts: dict[str, str | None] = {}
        for tag in ("description", "expr"):
            found = parse_tag(body, tag)
            parts[tag] = _clean(found.value) if found.ok and found.value is not None else None
            if parts[tag] == "" and error is None:
                error = ParseError("empty", f"<{tag}> is empty")
            if error is None and found.error is not None:
                error = found.error
        if close is None:
            error = ParseError("unclosed", "<concept> is never closed")
        out.append(Proposal(i, name, parts["description"], parts["expr"], error))
    return out


def _expression_key(expr: str) -> str:
    """A canonical form of ``expr`` (spacing and redundant parentheses do not matter)."""
    return ast.unparse(ast.parse(expr, mode="eval"))


def _names_in(expr: str) -> set[str]:
    return {n.id for n in ast.walk(ast.parse(expr, mode="eval")) if isinstance(n, ast.Name)}


def select_concepts(reply: str | None, names: Sequence[str], max_concepts: int) -> tuple[list[Concept], list[Rejected]]:
    """Parse and validate the proposals of ``reply``: keep the first ``max_concepts`` that read
    cleanly, have a snake_case name not yet kept, and an expression over ``names`` that the
    concept-set evaluator accepts and that no kept concept already has; reject the rest with reasons."""
    proposals = parse_proposals(reply)
    if not proposals:
        return [], [Rejected(None, None, None, "missing", "no <concept> block in the reply")]
    kept: list[Concept] = []
    rejected: list[Rejected] = []
    kept_exprs: dict[str, str] = {}
    for p in proposals:

        def reject(kind: str, reason: str, p: Proposal = p) -> None:
            rejected.append(Rejected(p.index, p.name, p.expr, kind, reason))

        if p.error is not None:
            reject(p.error.kind, p.error.detail)
            continue
        name, expr = str(p.name), str(p.expr)
        if len(name) > MAX_NAME_LEN or not NAME_PATTERN.fullmatch(name):
            reject("bad_name", f"{name[:SHOWN_CHARS]!r} is not a snake_case identifier of at most {MAX_NAME_LEN} characters")
            continue
        if name in {c.name for c in kept}:
            reject("duplicate", f"the name '{name}' is already taken")
            continue
        try:
            check_expression(expr, list(names))
            if not _names_in(expr):
                raise ExpressionError(f"{expr!r} names no attribute (a constant is not a concept)")
        except (ExpressionError, SyntaxError, ValueError, TypeError, ArithmeticError, RecursionError) as err:  # evaluator, numpy
            text = str(err).strip().split("; known names")[0]  # the vocabulary is in the prompt already
            reject("bad_expr", text.splitlines()[0] if text else type(err).__name__)
            continue
        key = _expression_key(expr)
        if key in kept_exprs:
            reject("duplicate", f"same expression as '{kept_exprs[key]}'")
            continue
        if len(kept) >= max_concepts:
            reject("over_limit", f"beyond max_concepts={max_concepts}")
            continue
        kept.append(Concept(name, str(p.description), expr))
        kept_exprs[key] = name
    return kept, rejected


# -------------------------------------------------------------------------------------- extract
def extract_concepts(
    client: ChatClient,
    examples: Mapping[str, Sequence[Any]],
    instruction: str,
    vocabulary: Mapping[str, str],
    max_concepts: int,
    system: str | None = None,
    rows: Mapping[str, Sequence[int]] | None = None,
) -> ExtractionResult:
    """ONE request showing ``examples`` (class name -> images) with the rendered ``instruction``
    template; the reply's proposals validated against the ``vocabulary`` names. Raises
    :class:`~cbm.vlm.reply.ChatError` when the endpoint fails after its retries; a reply without
    usable concepts is a result with none kept (see :meth:`ExtractionResult.require_concepts`)."""
    if max_concepts < 1:
        raise ValueError(f"max_concepts must be >= 1, got {max_concepts}")
    if not examples or any(len(images) == 0 for images in examples.values()):
        raise ValueError("concept extraction needs at least one example image of every class")
    classes = list(examples)
    n_per_class = max(len(images) for images in examples.values())
    text = render_instruction(instruction, max_concepts, vocabulary, classes, n_per_class)
    reply = client.chat(build_messages(examples, text, system))
    kept, rejected = select_concepts(reply.text, list(vocabulary), max_concepts)
    return ExtractionResult(
        concepts=kept, rejected=rejected, reply=reply, usage=client.usage.to_json(),
        n_images=sum(len(images) for images in examples.values()), classes=classes,
        example_rows={k: list(v) for k, v in (rows or {}).items()},
    )  # fmt: skip


# ---------------------------------------------------------------------------------------- write
def concept_set_document(name: str, description: str, concepts: Sequence[Concept]) -> dict[str, Any]:
    """The YAML document of a concept set (the format of ``synthetic/robot/concept_sets/``)."""
    return {
        "name": name,
        "description": description,
        "concepts": [{"name": c.name, "description": c.description, "expr": c.expr} for c in concepts],
    }


def write_concept_set(path: str | Path, name: str, description: str, concepts: Sequence[Concept], header: str | None = None) -> Path:
    """Write a concept-set YAML file atomically (``header`` as leading ``#`` comment lines), then
    check it loads with :func:`~synthetic.robot.concepts.load_concept_set` to exactly these concepts.
    No concepts, a non-YAML path, a bad expression or a duplicate name: one clear error, no file."""
    path = Path(path)
    if not concepts:
        raise NoConceptsError(f"no concepts to write to {path}; nothing written")
    if path.suffix not in (".yaml", ".yml"):
        raise ValueError(f"concept-set file must end in .yaml or .yml, got {path}")
    names = [c.name for c in concepts]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate concept names in {names}")
    for c in concepts:
        try:
            check_expression(c.expr)
        except ExpressionError as err:
            raise ValueError(f"concept '{c.name}': {err}") from None
    doc = concept_set_document(name, description, concepts)
    comment = "".join(f"# {line}".rstrip() + "\n" for line in (header or "").splitlines())
    body = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=1000)
    write_text_atomic(path, comment + body)
    loaded = load_concept_set(str(path))
    if loaded.to_dict() != doc:
        path.unlink(missing_ok=True)
        raise ValueError(f"{path}: the written concept set does not load back as written; removed")
    return path
