"""A griffe extension (``extensions:`` of mkdocstrings' python handler): docstrings written for
Sphinx and doctest read well as Markdown.

Our docstrings use reST roles (:class:`Foo`, :func:`bar`) and doctest examples (``>>>`` lines).
Markdown shows the roles as raw text and folds the ``>>>`` lines into nested block quotes, so the
API pages would read ":meth:`prepare_batch`" and one run-on quote. This rewrites each docstring
before it is rendered: a role becomes inline code, a doctest run becomes a fenced ``pycon`` block
without its ``# doctest:`` directives. The source stays as it is (doctest and Sphinx still read it).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

#: ``:class:`~pkg.Foo``` and friends; the ``~`` (show the last part only) is honoured.
ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|mod|data|obj|exc|const|ref|doc|term):`~?([^`]+)`")
DIRECTIVE = re.compile(r"\s*#\s*doctest:[^\n]*")


def _role(match: re.Match[str]) -> str:
    target = match.group(1)
    if match.group(0).split("`", 1)[1].startswith("~"):
        target = target.rsplit(".", 1)[-1]
    return f"`{target}`"


def markdown(text: str) -> str:
    """The docstring ``text`` with reST roles as code spans and doctest runs as fenced blocks."""
    text = ROLE.sub(_role, text)
    out: list[str] = []
    block: list[str] = []
    for line in text.splitlines():
        stripped = line.lstrip()
        if stripped.startswith((">>> ", "... ")) or stripped in (">>>", "..."):
            block.append(DIRECTIVE.sub("", stripped).rstrip())
            continue
        if block:
            out += ["```pycon", *block, "```"]
            block = []
        out.append(line)
    if block:
        out += ["```pycon", *block, "```"]
    return "\n".join(out)


class RestToMarkdown(griffe.Extension):
    """Rewrite every loaded object's docstring with :func:`markdown`."""

    def on_instance(self, *, node: Any, obj: griffe.Object, agent: Any, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)
