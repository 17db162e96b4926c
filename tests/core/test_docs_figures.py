"""The documentation's figures are generated, not pasted: ``docs/figures.py --smoke`` draws every one of
them from the project's generators and plotting code (valid, non-blank PNGs), and every image a page
shows is a committed file under docs/img (with alt text), each figure on the pages it is drawn for."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import docpages
import numpy as np
from PIL import Image

ROOT = docpages.ROOT
DOCS = ROOT / "docs"
#: An image in Markdown: ``![alt](path)``.
IMAGE = re.compile(r"!\[(?P<alt>[^\]]*)\]\((?P<path>[^)\s]+)\)")


def figures_module():
    spec = importlib.util.spec_from_file_location("docs_figures", DOCS / "figures.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["docs_figures"] = mod
    spec.loader.exec_module(mod)
    return mod


def assert_real_png(path) -> None:
    """A PNG that opens, is not one colour and is not a near-empty canvas."""
    with Image.open(path) as im:
        assert im.format == "PNG", path
        im.verify()
    with Image.open(path) as im:
        grey = np.asarray(im.convert("L"), dtype=np.int16)
    assert min(grey.shape) >= 100, (path, grey.shape)
    assert grey.max() - grey.min() > 100, f"{path}: blank"
    assert (grey < 200).mean() > 0.005, f"{path}: almost nothing drawn"


def test_the_script_draws_every_figure_in_smoke_mode(tmp_path):
    figures = figures_module()
    out = tmp_path / "img"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CBM_PROGRESS": "0", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline",
           "PYTHONWARNINGS": "ignore"}  # fmt: skip
    res = subprocess.run([sys.executable, str(DOCS / "figures.py"), "--smoke", "--out", str(out), "--cache-dir", str(tmp_path / "cache")],
                         capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert len(figures.FIGURES) >= 8
    assert sorted(p.name for p in out.iterdir()) == sorted(figures.FIGURES)  # nothing else (no temp files left)
    for name in figures.FIGURES:
        assert_real_png(out / name)
    assert sorted(n for names, _ in figures.STEPS for n in names) == sorted(figures.FIGURES)


def test_every_image_on_a_page_is_a_committed_figure_with_alt_text():
    figures = figures_module()
    shown: dict[str, set[str]] = {}
    for page in docpages.pages():
        if page == docpages.README:
            continue
        for m in IMAGE.finditer(page.read_text()):
            target = (page.parent / m["path"]).resolve()
            where = f"{page.relative_to(ROOT)}: {m['path']}"
            assert target.is_file(), f"{where} does not exist"
            assert target.parent == (DOCS / "img").resolve(), f"{where}: figures live in docs/img"
            assert len(m["alt"].split()) >= 3, f"{where}: say what the picture shows in its alt text"
            shown.setdefault(target.name, set()).add(str(page.relative_to(DOCS)))
    for name, pages in figures.FIGURES.items():
        assert (DOCS / "img" / name).is_file(), f"docs/img/{name} is not committed: run make docs-figures"
        assert set(pages) <= shown.get(name, set()), f"{name} should be shown on {pages}, is on {sorted(shown.get(name, []))}"
    for png in (DOCS / "img").glob("*.png"):
        assert png.name in figures.FIGURES, f"docs/img/{png.name} is drawn by no step of docs/figures.py"
        assert png.stat().st_size < 250_000, f"docs/img/{png.name}: {png.stat().st_size} bytes (keep each under ~200 KB)"
        assert_real_png(png)
