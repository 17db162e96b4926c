"""The house's layers hold and bite: import-linter's contracts (``pyproject.toml``, run by ``make
test``) pass on this tree and fail on a planted upward import; no module imports another in a circle,
counting the imports inside functions and under ``TYPE_CHECKING``; no module is over 600 lines."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("cbm", "synthetic")
#: The most lines a module may have (DESIGN.md: small modules with one job each).
MAX_LINES = 600


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` with this project's contracts, on the packages under ``root``."""
    exe = Path(sys.executable).parent / "lint-imports"
    return subprocess.run([str(exe), "--config", str(ROOT / "pyproject.toml"), "--no-cache"], cwd=root,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=600)  # fmt: skip


def copy_packages(dest: Path) -> None:
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, dest / pkg, ignore=shutil.ignore_patterns("__pycache__", "*.yaml", "*.json", "*.npz"))


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> tuple[Path, Path]:
    """A copy of the packages, and one with an upward import planted in the ground floor."""
    clean, dirty = tmp_path_factory.mktemp("clean"), tmp_path_factory.mktemp("dirty")
    copy_packages(clean)
    copy_packages(dirty)
    paths = dirty / "cbm" / "core" / "paths.py"
    paths.write_text(paths.read_text() + "\n\ndef _planted():\n    from cbm.experiments import train  # noqa: F401\n")
    return clean, dirty


def test_the_contracts_hold_on_this_tree(planted):
    res = lint_imports(planted[0])
    assert res.returncode == 0 and "0 broken" in res.stdout, res.stdout[-3000:] + res.stderr[-2000:]


def test_a_planted_upward_import_breaks_a_contract(planted):
    """An import inside a function counts: the ground floor importing a command is refused."""
    res = lint_imports(planted[1])
    assert res.returncode != 0, res.stdout[-3000:]
    assert "BROKEN" in res.stdout and "cbm.core.paths -> cbm.experiments.train" in res.stdout, res.stdout[-3000:]


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The import circles among the modules: strongly connected components of more than one module."""
    adj = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in sorted(graph.modules)}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for start in adj:  # Tarjan's algorithm, iteratively
        if start in index:
            continue
        work = [(start, iter(adj[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(adj[w])))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_module_imports_in_a_circle():
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)  # every import: in functions and TYPE_CHECKING too
    assert cycles(graph) == []


def test_the_circle_finder_finds_a_circle():
    graph = grimp.ImportGraph()
    for m in ("p.a", "p.b", "p.c"):
        graph.add_module(m)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.a")
    graph.add_import(importer="p.b", imported="p.c")
    assert cycles(graph) == [["p.a", "p.b"]]


def test_no_module_is_over_600_lines():
    long = {str(p.relative_to(ROOT)): n for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}  # fmt: skip
    assert long == {}


def alias_modules() -> set[str]:
    """The deprecated aliases: the modules whose docstring starts with "Deprecated alias"."""
    return {".".join(p.relative_to(ROOT).with_suffix("").parts) for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
            if p.read_text(encoding="utf-8").startswith('"""Deprecated alias')}  # fmt: skip


def test_nothing_of_ours_imports_a_deprecated_alias():
    """The project's own code uses the new homes: an alias warns on import, and that warning is printed
    above a command's one error line when the command runs as ``python -m`` (CI caught it once)."""
    aliases = alias_modules()
    assert {"cbm.concurrency", "synthetic.atomic", "cbm.experiments.common"} <= aliases
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    users = {(importer, alias) for alias in aliases for importer in graph.find_modules_that_directly_import(alias)
             if importer not in aliases}  # fmt: skip
    assert users == set()
    others = [p for d in ("benchmarks", "docs", "notebooks", "tests") for p in (ROOT / d).rglob("*.py")]
    pattern = re.compile(r"^\s*(?:from|import)\s+(" + "|".join(re.escape(a) for a in sorted(aliases)) + r")\b(?!\.)", re.M)
    used = {str(p.relative_to(ROOT)): m.group(1) for p in others if p.name != "test_aliases.py"
            for m in [pattern.search(p.read_text(encoding="utf-8"))] if m}  # fmt: skip
    assert used == {}
