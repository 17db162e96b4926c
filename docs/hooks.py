"""MkDocs hooks (``hooks:`` in mkdocs.yml): the API reference, one page per public module, and the
page checks of ``docs/page_checks.py`` on every page.

Every module of ``cbm`` and ``synthetic`` whose dotted path has no part starting with ``_`` (packages
through their ``__init__``) gets ``reference/api/<dotted.name>.md`` holding a mkdocstrings
``::: dotted.name`` stub, and ``reference/api/index.md`` lists them by package. The pages are made at
build time, so a new module has its page without anyone writing it; ``tests/core/test_docs.py``
checks the list against the source tree.
"""

from __future__ import annotations

import logging
from pathlib import Path

import page_checks  # docs/page_checks.py: mkdocs puts this file's folder on the path while it loads

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cbm", "synthetic")
API_DIR = "reference/api"


def public_modules(root: Path = ROOT) -> list[str]:
    """Dotted names of the public modules and packages, sorted."""
    names = []
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            rel = path.relative_to(root).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if any(p.startswith("_") for p in parts) or "__pycache__" in rel.parts:
                continue
            names.append(".".join(parts))
    return sorted(set(names))


def by_package(names: list[str]) -> dict[str, list[str]]:
    """The module names grouped by their first two parts (``cbm.models``), in order."""
    groups: dict[str, list[str]] = {}
    for n in names:
        parts = n.split(".")
        groups.setdefault(".".join(parts[:2]) if len(parts) > 1 else parts[0], []).append(n)
    return groups


def module_page(name: str) -> str:
    return f"# `{name}`\n\n::: {name}\n    options:\n      show_root_heading: false\n"


def index_page(names: list[str]) -> str:
    lines = [
        "# API reference",
        "",
        "One page per public module of `cbm` and `synthetic`, from the docstrings (modules, classes,",
        "functions; names starting with `_` are left out). The command-line side is documented in the",
        "guides and every config key in the [configuration reference](../configuration.md).",
    ]
    for group, members in by_package(names).items():
        lines += ["", f"## `{group}`", ""]
        lines += [f"- [`{m}`]({m}.md)" for m in members]
    return "\n".join(lines) + "\n"


def api_pages(root: Path = ROOT) -> dict[str, str]:
    """``{path under docs/: page text}`` for the API reference."""
    names = public_modules(root)
    pages = {f"{API_DIR}/{n}.md": module_page(n) for n in names}
    pages[f"{API_DIR}/index.md"] = index_page(names)
    return pages


def on_files(files, config):  # noqa: ARG001 (mkdocs hook signature)
    from mkdocs.structure.files import File

    for path, text in api_pages().items():
        files.append(File.generated(config, path, content=text))
    return files


LOG = logging.getLogger("mkdocs.hooks.page_checks")  # under "mkdocs": a warning fails the strict build


def on_page_markdown(markdown, page, config, files):  # noqa: ARG001 (mkdocs hook signature)
    """Every defect :mod:`page_checks` finds on the page, as a warning (so ``--strict`` fails)."""
    for problem in page_checks.problems(page.file.src_uri, markdown):
        LOG.warning(problem)
    return markdown


def api_nav(names: list[str]) -> list:
    """The API section of the nav: the index, then one collapsed section per package group, so each
    module page shows its members in the left column (``toc.integrate``) like every other page."""
    groups = by_package(names)
    nav: list = [{"Overview": f"{API_DIR}/index.md"}]
    nav += [{group: [{m: f"{API_DIR}/{m}.md"} for m in members]} for group, members in groups.items()]
    return nav


def on_config(config):
    """Put every API module page into the nav under Reference / API."""

    def fill(items: list) -> None:
        for i, item in enumerate(items):
            if isinstance(item, dict):
                for title, value in item.items():
                    if value == f"{API_DIR}/index.md":
                        items[i] = {title: api_nav(public_modules())}
                    elif isinstance(value, list):
                        fill(value)

    fill(config["nav"])
    return config
