"""The pages whose examples the tests run: README.md and every Markdown page under docs/ but the
generated reference pages."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def pages() -> list[Path]:
    """README.md, then docs/**/*.md in path order (not docs/reference/: generated from the code)."""
    return [README, *sorted(p for p in (ROOT / "docs").rglob("*.md") if "reference" not in p.relative_to(ROOT / "docs").parts)]


def text() -> str:
    """Every page's text, one after the other (each ends with a newline)."""
    return "".join(p.read_text().rstrip("\n") + "\n\n" for p in pages())


#: A fenced block: its language (may be empty), the body, and the HTML comment right above it, if any.
FENCE = re.compile(r"(?:<!--\s*docs-test:(?P<mark>.*?)-->\s*\n)?^```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^```\s*$", re.S | re.M)


def blocks(path: Path) -> list[dict]:
    """The fenced code blocks of a page: ``{page, line, lang, body, mark}``."""
    src = path.read_text()
    out = []
    for m in FENCE.finditer(src):
        line = src.count("\n", 0, m.start("lang")) + 1
        out.append({"page": str(path.relative_to(ROOT)), "line": line, "lang": m["lang"], "body": m["body"],
                    "mark": (m["mark"] or "").strip()})  # fmt: skip
    return out


#: Placeholder shapes the README and the docs use in prose (``cbm-train ... data_storage=disk``) or for a user's
#: own file, never meant to run as written.
NOT_COMMANDS = ("...", "<cell>", "<preset>", "<vlm>", "+experiment=mine", "my_conf", "mymodels")
# my_conf: tests/models/test_readme_own_model.py runs those; mymodels (a user package the README writes):
# tests/models/test_own_model.py prechecks that line with the package on the path


def command_lines(text: str) -> list[str]:
    """Every ``cbm-*`` command line of a page (the README, the docs): in code blocks (continuation lines joined, ``$ ``
    prompts and comments dropped) and in inline code spans of the prose."""
    out = []
    for body in re.findall(r"```\w*\n(.*?)```", text, re.S):
        for line in re.sub(r"\\\n\s*", " ", body).splitlines():
            line = line.strip().removeprefix("$ ")
            if re.match(r"cbm-[a-z-]+(\s|$)", line):
                out.append(re.split(r"\s+#", line)[0].strip())
    out += [" ".join(span.split()) for span in re.findall(r"`(cbm-[a-z-]+ [^`]+)`", text)]  # prose
    seen: set[str] = set()
    return [ln for ln in out if not any(m in ln for m in NOT_COMMANDS) and not (ln in seen or seen.add(ln))]
