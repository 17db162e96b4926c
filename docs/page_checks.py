"""Checks on the docs' Markdown that a strict build cannot make: what renders wrong in a browser.

``docs/hooks.py`` runs :func:`problems` on every page while the site builds and logs each as a
warning, so ``make docs`` (``mkdocs build --strict``) fails on it; ``tests/core/test_docs.py`` runs
it on the sources. Each check is a defect once seen on the built site, or a length that makes a page hard
to read:

- an HTML tag in prose that is not one we write on purpose (``Is <name> true?`` renders as
  ``Is true?``: the browser eats ``<name>`` as an unknown tag);
- ``\\|`` inside a code span (Python-Markdown's tables already keep a ``|`` inside backticks in its
  cell, and inside a code span the backslash is printed);
- a table with a header and no rows;
- a page of more than :data:`MAX_WORDS_WITHOUT_H2` words without a level-2 heading (no page
  contents to find one's way), or a guide with a stretch that long between two (tables not counted);
- a guide that links to no other page;
- development history outside the changelog (``issue 15``, ``the issue's aim``) or a path into the
  developers' workspace (``../shared/``) that a reader does not have;
- a guide of more than :data:`MAX_GUIDE_WORDS` words (a page nobody reads to the end: split it by topic);
- a paragraph, a list item or a list written without blank lines between its items of more than
  :data:`MAX_BLOCK_WORDS` words (a wall of text), outside the generated reference and the changelog;
- a guide that does not start with what it is for and one command: prose, then a ``bash`` block,
  before its first level-2 heading.

Words are counted on :func:`prose`: fenced blocks, HTML comments and inline code left out, tables in.
"""

from __future__ import annotations

import re

#: Tags written on purpose in the Markdown (images, line breaks, collapsible blocks, keyboard keys).
ALLOWED_TAGS = frozenset(
    {"a", "img", "br", "details", "summary", "div", "span", "sup", "sub", "kbd", "figure", "figcaption", "p", "b", "i",
     "em", "strong", "code", "pre", "small", "table", "thead", "tbody", "tr", "th", "td", "ul", "ol", "li"}
)  # fmt: skip
#: A page longer than this (words of prose) has at least one level-2 heading.
MAX_WORDS_WITHOUT_H2 = 600
#: A guide (``guides/*.md``) longer than this (words of prose) is split by topic into pages.
MAX_GUIDE_WORDS = 2500
#: A paragraph or list item longer than this (words of prose) is split.
MAX_BLOCK_WORDS = 150

FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.S | re.M)
COMMENT = re.compile(r"<!--.*?-->", re.S)
CODE_SPAN = re.compile(r"(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
TAG = re.compile(r"</?([A-Za-z][A-Za-z0-9-]*)(?=[\s/>])[^<>]*>")
TABLE_ROW = re.compile(r"^\s*\|.*$", re.M)
HEADING = re.compile(r"^#+ .*$", re.M)
TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
HISTORY = re.compile(r"\b[Ii]ssues? \d+|\b[Tt]he issue\b|\.\./shared/")
PAGE_LINK = re.compile(r"\]\(([^)#\s]*\.md)(#[^)]*)?\)")


def without_code_blocks(src: str) -> str:
    """The page with its fenced blocks and HTML comments blanked (line numbers kept)."""
    blank = lambda m: "\n" * m.group(0).count("\n")  # noqa: E731
    return FENCE.sub(blank, COMMENT.sub(blank, src))


def prose(src: str) -> str:
    """The page's prose: fenced blocks, HTML comments and inline code spans removed."""
    return CODE_SPAN.sub(" ", without_code_blocks(src))


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def unknown_tags(src: str) -> list[str]:
    text = CODE_SPAN.sub(lambda m: " " * len(m.group(0)), without_code_blocks(src))
    return [f"line {_line(text, m.start())}: {m.group(0)!r} is not HTML we write: the browser hides it "
            "(put a placeholder in backticks)" for m in TAG.finditer(text) if m.group(1).lower() not in ALLOWED_TAGS]  # fmt: skip


def escaped_pipes(src: str) -> list[str]:
    text = without_code_blocks(src)
    return [f"line {_line(text, m.start())}: `{m.group(2)}` shows a literal \\| (a | inside backticks is already "
            "kept in its table cell)" for m in CODE_SPAN.finditer(text) if "\\|" in m.group(2)]  # fmt: skip


def empty_tables(src: str) -> list[str]:
    lines = without_code_blocks(src).splitlines()
    out = []
    for i, line in enumerate(lines[1:], start=1):
        if TABLE_RULE.match(line) and "|" in lines[i - 1]:
            following = lines[i + 1] if i + 1 < len(lines) else ""
            if "|" not in following:
                out.append(f"line {i + 1}: a table with no rows")
    return out


def missing_h2(src: str) -> list[str]:
    words = len(prose(src).split())
    if words > MAX_WORDS_WITHOUT_H2 and not re.search(r"^## ", without_code_blocks(src), re.M):
        return [f"{words} words and no level-2 heading (one at least every ~400 words)"]
    return []


def long_sections(src: str) -> list[str]:
    """Stretches of a page with level-2 headings (before the first, between two, after the last) of more than
    :data:`MAX_WORDS_WITHOUT_H2` words, headings and table rows not counted (a table is found by its heading, not read
    through)."""
    text = without_code_blocks(src)
    starts = [m.start() for m in re.finditer(r"^## ", text, re.M)]
    out = []
    for a, b in zip([0, *starts], [*starts, len(text)]) if starts else []:
        words = len(HEADING.sub(" ", TABLE_ROW.sub(" ", CODE_SPAN.sub(" ", text[a:b]))).split())
        if words > MAX_WORDS_WITHOUT_H2:
            out.append(f"line {_line(text, a)}: {words} words up to the next level-2 heading (at most "
                       f"{MAX_WORDS_WITHOUT_H2}, tables not counted: one at least every ~400 words)")  # fmt: skip
    return out


def no_links(src: str) -> list[str]:
    return [] if PAGE_LINK.search(without_code_blocks(src)) else ["links to no other page (add a 'See also')"]


def long_guide(src: str) -> list[str]:
    words = len(prose(src).split())
    return [f"{words} words of prose (at most {MAX_GUIDE_WORDS}: split it by topic into pages)"] if words > MAX_GUIDE_WORDS else []


def long_blocks(src: str) -> list[str]:
    """Paragraphs and list items (a list without blank lines between its items counts whole) over
    :data:`MAX_BLOCK_WORDS` words; table rows and headings are not counted."""
    out, lines, start = [], [], 0
    for i, line in enumerate([*without_code_blocks(src).splitlines(), ""], start=1):
        if line.strip() and not line.lstrip().startswith(("|", "#")):
            start = start or i
            lines.append(line)
            continue
        text = "\n".join(lines).strip()
        words = len(CODE_SPAN.sub(" ", text).split())
        if words > MAX_BLOCK_WORDS:
            out.append(f"line {start}: a paragraph or list of {words} words (at most {MAX_BLOCK_WORDS}: split it, "
                       "shorten its sentences, or put blank lines between its items)")  # fmt: skip
        lines, start = [], 0
    return out


def no_intro(src: str) -> list[str]:
    """A guide starts with what it is for (prose) and one command (a ``bash`` block) before its first ``## ``."""
    blanked = without_code_blocks(src)
    h2 = re.search(r"^## ", blanked, re.M)
    head = src.splitlines()[: _line(blanked, h2.start()) - 1 if h2 else None]
    fences = [i for i, line in enumerate(head) if line.startswith("```")]
    bash = [i for i in fences if head[i].startswith("```bash")]
    said = [i for i, line in enumerate(head) if line.strip() and not line.startswith("#") and (not fences or i < fences[0])]
    if not bash:
        return ["no ```bash block before the first level-2 heading (start with what the page is for and one command)"]
    return [] if said and said[0] < bash[0] else ["starts with a code block: say first, in a sentence or two, what the page is for"]


def history(src: str) -> list[str]:
    text = without_code_blocks(src)
    return [f"line {_line(text, m.start())}: {m.group(0)!r}: development history belongs in the changelog, workspace "
            "paths nowhere" for m in HISTORY.finditer(text)]  # fmt: skip


def problems(path: str, src: str) -> list[str]:
    """Every defect of the page at ``path`` (relative to docs/, ``/``-separated), one line each."""
    found = unknown_tags(src) + escaped_pipes(src) + empty_tables(src) + missing_h2(src)
    if path.startswith("guides/"):
        found += no_links(src) + long_guide(src) + no_intro(src) + long_sections(src)
    if path != "changelog.md":
        found += history(src)
    if path != "changelog.md" and not path.startswith("reference/"):
        found += long_blocks(src)
    return [f"{path}: {p}" for p in found]
