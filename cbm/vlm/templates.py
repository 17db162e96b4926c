"""Prompt templates of the VLM commands, checked up front: each may use only its own named
placeholders, written plainly (``{options}``), so ``str.format`` can never fail or reach into
an object mid-run.

Refused, with one line naming the template: ``{}`` and ``{0}`` (positional), ``{x.y}`` and
``{x[0]}`` (attribute / index access), ``{options!r}`` and ``{options:>9}`` (conversion, format
spec), an unbalanced brace, and any name the template does not offer. Literal braces are
written doubled, ``{{`` and ``}}``.

>>> check_template("query", "Options: {options}. {{literal}}", ("options",))
>>> check_template("query", "{}", ("options",))
Traceback (most recent call last):
...
ValueError: prompts.query: '{}' is a positional placeholder; name one of: options (literal braces: {{ }})
"""

from __future__ import annotations

import string
from typing import Any


def check_template(name: str, text: Any, allowed: tuple[str, ...], where: str = "prompts", may_be_empty: bool = False) -> None:
    """``ValueError`` (one line) unless ``text`` is a string (non-blank unless ``may_be_empty``)
    whose placeholders are plain names in ``allowed``."""
    label = f"{where}.{name}"
    names = ", ".join(allowed) or "none"
    if not isinstance(text, str):
        raise ValueError(f"{label}: must be a string, got {type(text).__name__}")
    if not may_be_empty and not text.strip():
        raise ValueError(f"{label}: empty (the model would be asked nothing)")
    try:
        parts = list(string.Formatter().parse(text))
    except ValueError as err:
        raise ValueError(f"{label}: bad template ({err}); write literal braces as {{{{ and }}}}") from None
    for _, field, spec, conversion in parts:
        if field is None:
            continue
        shown = "{" + field + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
        if field == "" or field.isdigit():
            raise ValueError(f"{label}: '{shown}' is a positional placeholder; name one of: {names} (literal braces: {{{{ }}}})")
        if not field.isidentifier():
            raise ValueError(f"{label}: '{shown}' is not a plain placeholder name (no '.', '[', spaces); available: {names}")
        if conversion or spec:
            raise ValueError(f"{label}: '{shown}' has a conversion or format spec; write plain {{{field}}}")
        if field not in allowed:
            raise ValueError(f"{label}: unknown placeholder(s) ['{field}'] (available: {names})")


def placeholders(text: str) -> set[str]:
    """The placeholder names of a template already checked by :func:`check_template`."""
    return {f for _, f, _, _ in string.Formatter().parse(text) if f}
