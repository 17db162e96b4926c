"""Look at the built docs site in a real browser (optional, manual; not in CI).

Builds the site (``mkdocs build --strict``), serves ``site/`` on 127.0.0.1 with ``python -m
http.server`` and takes headless Chromium screenshots (Debian's ``chromium`` package: ``apt-get
install -y chromium``) of the index, one guide, the configuration reference and a search, into
``--out``::

    python docs/screenshots.py --out docs-screenshots     # or: make docs-screenshots
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: (file name, page under the site root, milliseconds of virtual time to let the page settle).
PAGES = [
    ("index.png", "", 4000),
    ("guide-interventions.png", "guides/interventions/", 4000),
    ("guide-experiments.png", "guides/experiments/", 4000),
    ("configuration.png", "reference/configuration/", 4000),
    ("api-index.png", "reference/api/", 4000),
    ("api-module.png", "reference/api/cbm.interventions.engine/", 4000),
    ("search.png", "guides/train/?q=responsiveness", 30000),  # the search index loads in a worker
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="docs-screenshots", help="folder for the PNGs")
    ap.add_argument("--no-build", action="store_true", help="use the site/ already built")
    ap.add_argument("--size", default="1400,1000", help="window size WIDTH,HEIGHT")
    args = ap.parse_args(argv)
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        print("screenshots: chromium not found (Debian: apt-get install -y chromium)", file=sys.stderr)
        return 2
    if not args.no_build:
        subprocess.run([str(Path(sys.executable).parent / "mkdocs"), "build", "--strict", "--quiet"], cwd=ROOT, check=True)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(ROOT / "site")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}/"
        for _ in range(50):
            try:
                urllib.request.urlopen(base, timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        for name, page, budget in PAGES:
            with tempfile.TemporaryDirectory() as profile:
                cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                       "--disable-background-networking", "--disable-component-update", "--disable-sync",
                       f"--user-data-dir={profile}", f"--window-size={args.size}", f"--virtual-time-budget={budget}",
                       f"--screenshot={out / name}", base + page]  # fmt: skip
                res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            ok = res.returncode == 0 and (out / name).is_file()
            print(f"{'ok ' if ok else 'FAILED'} {out / name}  <- {base + page}")
            if not ok:
                print(res.stderr[-2000:], file=sys.stderr)
                return 1
    finally:
        server.terminate()
        server.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
