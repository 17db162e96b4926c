"""The documentation cannot rot: the configuration reference is the schemas' (regenerated and
compared, every field of every schema on it), the API reference has a page per public module,
``cbm.__version__`` is the distribution's, and every fenced code block of README.md and docs/ runs.

Code blocks, by language:

- ``bash``: every ``cbm-*`` line is dry-run validated by ``tests/experiments/test_help_examples.py``
  (checked here to be among its lines); ``make`` lines name targets of the Makefile; ``python
  script.py`` lines name files that exist and answer ``--help``; ``python -m module`` lines name
  importable modules; the other lines are shell set-up (``source``, ``export``, ``pip``, ``wandb``).
- ``python``: executed, each in a fresh namespace and an empty working directory, all in one
  subprocess (torch is imported once). An HTML comment right above a block can say
  ``<!-- docs-test: setup: CMD ; CMD -->`` (shell commands run first in that directory, at small
  sizes) or ``<!-- docs-test: skip: why -->`` (counted, and listed on the test's output).
- ``yaml``: parsed; ``# file:`` configs are run end to end by ``tests/models/test_readme_own_model.py``.
- ``text`` (and unlabelled) blocks are output samples: skipped.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import importlib.util
import inspect
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import docpages
import yaml

ROOT = docpages.ROOT
BIN = Path(sys.executable).parent
SHELL_SETUP = ("source ", "export ", "pip ", "wandb ", "cd ", "mkdir ")


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def all_blocks() -> list[dict]:
    return [b for page in docpages.pages() for b in docpages.blocks(page)]


def shell_lines(body: str) -> list[str]:
    """Command lines of a shell block: continuations joined, prompts and comments dropped."""
    out = []
    for line in re.sub(r"\\\n\s*", " ", body).splitlines():
        line = line.strip().removeprefix("$ ")
        line = re.split(r"\s+#", line)[0].strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


# --- reference pages ---------------------------------------------------------------------------


def test_configuration_reference_is_current():
    gen = _load(ROOT / "docs" / "gen_config_reference.py", "gen_config_reference")
    page = (ROOT / "docs" / "reference" / "configuration.md").read_text()
    assert page == gen.render(), "docs/reference/configuration.md is out of date: run python docs/gen_config_reference.py"


def _schema_classes() -> list[type]:
    """Every dataclass of a config module (found by file, not by the generator's list) and every
    registered policy's and intervener's ``Config``."""
    files = [*ROOT.glob("cbm/config/*.py"), *ROOT.glob("cbm/**/config.py"), *ROOT.glob("synthetic/**/config.py"),
             ROOT / "cbm/experiments/data_cli.py", ROOT / "cbm/vlm/apps/concepts.py"]  # fmt: skip
    classes = []
    for f in sorted(set(files)):
        mod = importlib.import_module(".".join(f.relative_to(ROOT).with_suffix("").parts))
        classes += [c for _, c in inspect.getmembers(mod, inspect.isclass) if dataclasses.is_dataclass(c) and c.__module__ == mod.__name__]
    from cbm.interventions import registry

    for kind in registry.KINDS:
        classes += [registry.component_class(kind, name).Config for name in registry.names(kind)]
    return list(dict.fromkeys(classes))


def test_every_schema_field_is_on_the_configuration_page():
    page = (ROOT / "docs" / "reference" / "configuration.md").read_text()
    sections = {m[1]: m.start() for m in re.finditer(r"^Schema: `([\w.]+)`", page, re.M)}
    classes = _schema_classes()
    assert len(classes) >= 60
    missing = []
    for cls in classes:
        name = f"{cls.__module__}.{cls.__qualname__}"
        if name not in sections:
            missing.append(name)
            continue
        start = sections[name]
        end = min([s for s in sections.values() if s > start], default=len(page))
        keys = set(re.findall(r"^\| `([^`]*)` \|", page[start:end], re.M))
        for f in dataclasses.fields(cls):
            if not f.name.startswith("_") and not any(k == f.name or k.endswith("." + f.name) for k in keys):
                missing.append(f"{name}.{f.name}")
    assert not missing, missing


def test_every_key_on_the_configuration_page_says_what_it_means():
    page = (ROOT / "docs" / "reference" / "configuration.md").read_text()
    rows = [ln.split("|") for ln in page.splitlines() if ln.startswith("| `")]
    assert len(rows) >= 600
    bare = [r[1].strip() for r in rows if not r[5].strip()]  # key | type | default | allowed | meaning
    assert not bare, f"keys without a meaning (add a #: comment above the field): {bare}"


def _hooks():
    """docs/hooks.py as mkdocs loads it (its sibling ``page_checks`` importable)."""
    _load(ROOT / "docs" / "page_checks.py", "page_checks")
    return _load(ROOT / "docs" / "hooks.py", "docs_hooks")


def test_every_public_module_has_an_api_page():
    hooks = _hooks()
    pages = hooks.api_pages()
    modules = []
    for pkg in ("cbm", "synthetic"):
        for f in (ROOT / pkg).rglob("*.py"):
            parts = f.relative_to(ROOT).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            if "__pycache__" not in parts and not any(p.startswith("_") for p in parts):
                modules.append(".".join(parts))
    assert len(modules) >= 100
    for m in modules:
        assert f"::: {m}\n" in pages.get(f"reference/api/{m}.md", ""), m
        assert f"({m}.md)" in pages["reference/api/index.md"], m
    # and in the nav, so each module page lists its members in the left column
    config = {"nav": [{"Reference": [{"Configuration": "reference/configuration.md"}, {"API": "reference/api/index.md"}]}]}
    api = hooks.on_config(config)["nav"][0]["Reference"][1]["API"]
    in_nav = [path for group in api[1:] for members in group.values() for m in members for path in m.values()]
    assert api[0] == {"Overview": "reference/api/index.md"}
    assert sorted(in_nav) == sorted(f"reference/api/{m}.md" for m in modules)


def test_docstrings_read_as_markdown_on_the_api_pages():
    """reST roles become code spans and doctest runs fenced blocks without their directives."""
    rst = _load(ROOT / "docs" / "griffe_rst.py", "griffe_rst")
    text = (
        "Uses :class:`~cbm.models.cbm.CBM` and :meth:`prepare_batch`.\n\n"
        ">>> grid = run_grid(model,\n...                 ks=[0, 1])     # doctest: +SKIP\n>>> grid.save(d)\n"
        "After."
    )
    assert rst.markdown(text).splitlines() == [
        "Uses `CBM` and `prepare_batch`.",
        "",
        "```pycon",
        ">>> grid = run_grid(model,",
        "...                 ks=[0, 1])",
        ">>> grid.save(d)",
        "```",
        "After.",
    ]
    assert rst.markdown("no roles, ``literal`` kept") == "no roles, ``literal`` kept"


def test_version_is_the_distributions():
    import cbm

    assert cbm.__version__ == importlib.metadata.version("cbm")
    assert re.match(r"^\d+\.\d+\.\d+", cbm.__version__)
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"## {cbm.__version__} - " in changelog  # one entry per release, the current one included


# --- shell blocks ------------------------------------------------------------------------------


def make_targets() -> set[str]:
    return set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))


def test_shell_blocks():
    covered = set(docpages.command_lines(docpages.text()))  # test_help_examples dry-runs each
    targets, scripts, n = make_targets(), set(), 0
    for b in all_blocks():
        if b["lang"] not in ("bash", "sh", "shell", "console"):
            continue
        n += 1
        where = f"{b['page']}:{b['line']}"
        for line in shell_lines(b["body"]):
            cmd = re.sub(r"^([A-Z_]+=\S+\s+)+", "", line)  # VAR=value cmd ...
            words = shlex.split(cmd)
            if re.match(r"cbm-[a-z-]+(\s|$)", cmd):
                assert cmd in covered or any(m in cmd for m in docpages.NOT_COMMANDS), (where, cmd)
            elif words[0] == "make":
                assert set(words[1:]) <= targets, (where, line)
            elif words[0] == "python" and words[1] == "-m":
                assert importlib.util.find_spec(words[2]) is not None, (where, line)
            elif words[0] == "python":
                assert (ROOT / words[1]).is_file(), (where, line)
                scripts.add(words[1])
            else:
                assert line.startswith(SHELL_SETUP), f"{where}: a shell line the test does not know how to check: {line}"
    procs = {s: subprocess.Popen([sys.executable, str(ROOT / s), "--help"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for s in sorted(scripts)}  # fmt: skip
    for s, p in procs.items():
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and "usage" in out.lower(), (s, err[-1000:])
    # inline `python script.py` spans of the prose name files that exist
    for path in set(re.findall(r"`(?:[A-Z_]+=\S+ )*python (\S+\.py)[^`]*`", docpages.text())):
        assert (ROOT / path).is_file(), path
    print(f"\n{n} shell blocks checked")


# --- python and yaml blocks ---------------------------------------------------------------------

RUNNER = r"""
import json, os, subprocess, sys, traceback
from pathlib import Path
blocks = json.loads(Path(sys.argv[1]).read_text())
results = []
for i, b in enumerate(blocks):
    work = Path(sys.argv[2]) / f"block{i}"
    work.mkdir()
    os.chdir(work)
    try:
        for cmd in b["setup"]:
            res = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=300)
            if res.returncode:
                raise RuntimeError(f"setup {cmd!r} failed: {res.stderr[-1500:]}")
        exec(compile(b["body"], f"{b['page']}:{b['line']}", "exec"), {"__name__": "__main__"})
        results.append(None)
    except BaseException:
        results.append(traceback.format_exc()[-3000:])
print("RESULTS=" + json.dumps(results))
"""


def python_blocks() -> tuple[list[dict], list[dict]]:
    """(blocks to run, blocks skipped with their reason)."""
    run, skipped = [], []
    for b in all_blocks():
        if b["lang"] != "python":
            continue
        if b["mark"].startswith("skip:"):
            skipped.append(b)
            continue
        setup = [c.strip() for c in b["mark"].removeprefix("setup:").split(";")] if b["mark"].startswith("setup:") else []
        run.append({**b, "setup": [c for c in setup if c]})
    return run, skipped


def test_python_blocks_run(tmp_path):
    run, skipped = python_blocks()
    assert len(run) >= 3
    (tmp_path / "blocks.json").write_text(json.dumps(run))
    (tmp_path / "work").mkdir()
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT), "WANDB_MODE": "offline",
           "HF_HUB_OFFLINE": "1", "HF_UPDATE_DOWNLOAD_COUNTS": "0", "CBM_CACHE_DIR": str(tmp_path / "cache"),
           "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}  # fmt: skip
    res = subprocess.run([sys.executable, "-c", RUNNER, str(tmp_path / "blocks.json"), str(tmp_path / "work")],
                         capture_output=True, text=True, timeout=600, env=env)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    results = json.loads(res.stdout.split("RESULTS=")[-1])
    failed = {f"{b['page']}:{b['line']}": err for b, err in zip(run, results) if err}
    assert not failed, "\n\n".join(f"{k}\n{v}" for k, v in failed.items())
    print(f"\n{len(run)} python blocks run; skipped: " + "; ".join(f"{b['page']}:{b['line']} ({b['mark']})" for b in skipped))


def test_yaml_blocks_parse():
    n = 0
    for b in all_blocks():
        if b["lang"] in ("yaml", "yml"):
            doc = yaml.safe_load(b["body"])
            assert isinstance(doc, dict), (b["page"], b["line"])
            n += 1
    assert n >= 2


def test_no_page_has_a_defect_the_browser_shows():
    checks = _load(ROOT / "docs" / "page_checks.py", "page_checks")
    found = [p for page in sorted((ROOT / "docs").rglob("*.md"))
             for p in checks.problems(page.relative_to(ROOT / "docs").as_posix(), page.read_text())]  # fmt: skip
    assert not found, "\n".join(found)


def test_search_finds_config_words_and_the_reproduction_page():
    """The site search splits words as mkdocs.yml's separator says (lunr, in the browser): words inside
    config keys and paths are words, and the reproduction page is titled with the word people search for."""
    conf = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)  # its !!python tags stay text
    search = next(p["search"] for p in conf["plugins"] if isinstance(p, dict) and "search" in p)
    words = [w for w in re.split(search["separator"], "conf/client/{openai,openrouter,local}.yaml client@vlm=openrouter `cbm-edct`") if w]
    assert words == ["conf", "client", "openai", "openrouter", "local", "yaml", "client", "vlm", "openrouter", "cbm", "edct"]
    assert (ROOT / "docs" / "REPRODUCE.md").read_text().startswith("# Reproduce the papers\n")


def test_each_page_check_finds_its_defect_and_only_it():
    checks = _load(ROOT / "docs" / "page_checks.py", "page_checks")
    tags = checks.unknown_tags("Is <name> true for this <subject>?\n\n`<name>` <br> <https://a.b> <img src='x.png'> a < b\n")
    assert [t.split(":")[0] for t in tags] == ["line 1", "line 1"] and "'<name>'" in tags[0] and "'<subject>'" in tags[1]
    assert checks.unknown_tags("```\n<name>\n```\n<!-- <x> -->\n") == []
    assert len(checks.escaped_pipes("| `a\\|b` | c \\| d |\n| `x|y` |\n")) == 1
    table = "| a | b |\n|---|---|\n"
    assert checks.empty_tables(table + "\ntext\n") == ["line 2: a table with no rows"]
    assert checks.empty_tables(table + "| 1 | 2 |\n") == [] and checks.empty_tables(table) == ["line 2: a table with no rows"]
    n = checks.MAX_WORDS_WITHOUT_H2
    assert checks.missing_h2("w " * n) == [] and len(checks.missing_h2("w " * (n + 1))) == 1
    assert checks.missing_h2("## A\n\n" + "w " * (n + 1)) == [] and len(checks.missing_h2("### A\n\n" + "w " * (n + 1))) == 1
    intro = "# X\n\nWhat it is for.\n\n```bash\ncbm-train\n```\n\n"
    assert checks.problems("guides/x.md", intro + "text\n") == ["guides/x.md: links to no other page (add a 'See also')"]
    assert checks.problems("guides/x.md", intro + "See [train](train.md#a).\n") == []
    assert checks.problems("index.md", "# X\n\ntext\n") == []
    assert [p.split(": ")[1] for p in checks.problems("speed.md", "As issue 15 measured; see ../shared/x; the issue's aim.\n")] == ["line 1"] * 3
    assert checks.problems("changelog.md", "Fixed in issue 15.\n") == [] and checks.problems("a.md", "a host must issue a kernel\n") == []
    w = checks.MAX_GUIDE_WORDS  # a guide's prose words: code blocks and inline code not counted
    assert checks.long_guide("w " * w + "\n```\n" + "x " * 9 + "\n```\n`y z`\n") == [] and len(checks.long_guide("w " * (w + 1))) == 1
    body = ("## S\n\n" + ("w " * 100 + "\n\n") * 4) * 7  # 2,800 words in short paragraphs under headings
    assert [p.split(" words ")[1] for p in checks.problems("guides/x.md", intro + "[a](a.md)\n\n" + body)] == ["of prose (at most 2500: split it by topic into pages)"]
    assert checks.problems("x.md", body) == []
    b = checks.MAX_BLOCK_WORDS  # a paragraph, a list item, or a list without blank lines between its items
    assert checks.long_blocks("w " * b + "\n\n" + "w " * b + "\n") == []
    assert [p.split(": a paragraph or list of ")[0] for p in checks.long_blocks("# T\n\n" + "w " * (b + 1))] == ["line 3"]
    tight, loose = "".join(f"- {'w ' * 60}\n" for _ in range(3)), "\n".join(f"- {'w ' * 60}\n" for _ in range(3))
    assert [p.split(" words")[0] for p in checks.long_blocks("x\n\n" + tight)] == ["line 3: a paragraph or list of 183"]
    assert checks.long_blocks(loose) == []
    not_prose = "| " + "w " * b + "|\n|---|\n| x |\n\n```\n" + "w " * b + "\n```\n\n`" + "w " * b + "` w\n"
    assert checks.long_blocks(not_prose) == []
    long = "w " * (b + 1)
    assert len(checks.problems("index.md", long)) == 1 and checks.problems("reference/configuration.md", long) == checks.problems("changelog.md", long) == []
    # a guide starts with what it is for and a bash block, before its first level-2 heading
    assert checks.no_intro(intro + "## A\n") == [] and checks.no_intro("# X\n\nText.\n\n```bash\n## a comment\ncbm-train\n```\n") == []
    assert checks.no_intro("# X\n\nText.\n\n```python\nx = 1\n```\n\n## A\n\n```bash\ncbm-train\n```\n")[0].startswith("no ```bash block")
    assert checks.no_intro("# X\n\n```bash\ncbm-train\n```\n\nText.\n\n## A\n")[0].startswith("starts with a code block")
    assert checks.problems("index.md", "# X\n\n## A\n") == []
    # a guide's level-2 headings come at least every MAX_WORDS_WITHOUT_H2 words, tables not counted
    assert checks.long_sections("## A\n\n" + "w " * n + "\n## B\n\n" + "w " * n) == [] and checks.long_sections("w " * (n + 1)) == []
    assert [p.split(":")[0] for p in checks.long_sections("w\n\n## A\n\n" + "w " * (n + 1))] == ["line 3"]
    assert checks.long_sections("## A\n\n| " + "w " * (n + 1) + "|\n|---|\n| x |\n") == []


def test_the_docs_build_warns_on_each_page_defect(caplog):
    hooks = _hooks()
    page = type("Page", (), {"file": type("File", (), {"src_uri": "guides/x.md"})()})()
    with caplog.at_level("WARNING", logger="mkdocs"):
        out = hooks.on_page_markdown("# X\n\nIs <name> true?\n", page, {}, None)
    assert out == "# X\n\nIs <name> true?\n"
    assert [r.name for r in caplog.records] == ["mkdocs.hooks.page_checks"] * 3
    assert "'<name>'" in caplog.records[0].getMessage() and "links to no other page" in caplog.records[1].getMessage()
    assert "no ```bash block before the first level-2 heading" in caplog.records[2].getMessage()


def counts() -> dict[str, int]:
    """Code blocks of the README and the docs: all of them, those a test runs or validates, skipped."""
    blocks = all_blocks()
    run, skipped = python_blocks()
    checked = [b for b in blocks if b["lang"] in ("bash", "sh", "shell", "console", "yaml", "yml")]
    return {"blocks": len(blocks), "run": len(run) + len(checked), "skipped": len(blocks) - len(run) - len(checked)}


def test_readme_states_the_counts():
    c = counts()
    readme = docpages.README.read_text()
    stated = re.search(r"Of the\s+README's and the docs' (\d+) code blocks, (\d+) are executed or validated; the other\s+(\d+)", readme)
    assert stated, "the README's sentence on executed code blocks"
    assert tuple(map(int, stated.groups())) == (c["blocks"], c["run"], c["skipped"]), c
    print(f"\n{c}")


if __name__ == "__main__":
    print(textwrap.dedent(str(counts())))


def test_the_screenshot_script_refuses_a_bad_window_size_before_any_work(tmp_path):
    res = subprocess.run([sys.executable, str(ROOT / "docs" / "screenshots.py"), "--size", "abc", "--out", str(tmp_path / "shots")],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res.returncode == 2 and res.stderr.strip().splitlines()[-1].endswith("expected WIDTH,HEIGHT in pixels (100-10000), e.g. 1400,1000")
    assert not (tmp_path / "shots").exists()
