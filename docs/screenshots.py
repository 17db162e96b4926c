"""Look at the built docs site in a real browser (optional, manual; not in CI).

Builds the site (``mkdocs build --strict``), serves ``site/`` on 127.0.0.1 with ``python -m
http.server`` and drives headless Chromium (Debian's ``chromium`` package: ``apt-get install -y
chromium``) over the DevTools protocol on a pipe: each page is loaded, the script waits until the
page says it is ready (the search: until its worker has answered) and saves a screenshot of the
index, the Benchmarks page, five guides (train, interventions, experiments, EDCT, zoo), the configuration reference, the API pages and a search into ``--out``::

    python docs/screenshots.py --out docs-screenshots     # or: make docs-screenshots
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: A page is ready when this JavaScript expression is true (fonts and layout settle after load).
LOADED = "document.readyState === 'complete'"
#: The search is ready when its worker has indexed the site and listed results for the query.
SEARCHED = "(document.querySelector('.md-search-result__meta') || {}).textContent?.match(/\\d+ matching|No matching/) != null"
#: (file name, page under the site root, readiness expression).
PAGES = [
    ("index.png", "", LOADED),
    ("benchmarks.png", "benchmarks/", LOADED),
    ("guide-train.png", "guides/train/", LOADED),
    ("guide-interventions.png", "guides/interventions/", LOADED),
    ("guide-experiments.png", "guides/experiments/", LOADED),
    ("guide-edct.png", "guides/edct/", LOADED),
    ("guide-zoo.png", "guides/zoo/", LOADED),
    ("configuration.png", "reference/configuration/", LOADED),
    ("api-index.png", "reference/api/", LOADED),
    ("api-module.png", "reference/api/cbm.interventions.engine/", LOADED),
    ("search.png", "guides/train/?q=responsiveness", SEARCHED),
]
#: Seconds a page may take to become ready.
READY_S = 60


def window_size(text: str) -> str:
    """``WIDTH,HEIGHT`` in pixels (argparse refuses anything else in one line)."""
    parts = text.split(",")
    if len(parts) != 2 or not all(p.strip().isdigit() and 100 <= int(p) <= 10000 for p in parts):
        raise argparse.ArgumentTypeError(f"{text!r}: expected WIDTH,HEIGHT in pixels (100-10000), e.g. 1400,1000")
    return ",".join(p.strip() for p in parts)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DevTools:
    """Chromium's DevTools protocol over ``--remote-debugging-pipe`` (fd 3 in, fd 4 out, NUL-framed JSON)."""

    def __init__(self, browser: str, profile: str, size: str) -> None:
        read_end, self._w = os.pipe()
        self._r, write_end = os.pipe()
        # above 9, so the child's dup2 onto 3 and 4 cannot overwrite one with the other
        to_chrome_r, from_chrome_w = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (read_end, write_end))
        os.close(read_end)
        os.close(write_end)
        self.proc = subprocess.Popen(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--remote-debugging-pipe", f"--user-data-dir={profile}",
             f"--window-size={size}", "about:blank"],
            pass_fds=(3, 4), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=lambda: (os.dup2(to_chrome_r, 3), os.dup2(from_chrome_w, 4)),
        )  # fmt: skip
        for fd in (to_chrome_r, from_chrome_w):
            os.close(fd)
        self._next, self._buf = 0, b""
        self.session = ""

    def call(self, method: str, session: bool = True, **params: Any) -> dict[str, Any]:
        self._next += 1
        msg: dict[str, Any] = {"id": self._next, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        while True:
            while b"\0" not in self._buf:
                chunk = os.read(self._r, 1 << 20)
                if not chunk:
                    raise RuntimeError(f"chromium closed the pipe during {method}")
                self._buf += chunk
            raw, self._buf = self._buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def open(self, size: str) -> None:
        target = self.call("Target.createTarget", session=False, url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", session=False, targetId=target, flatten=True)["sessionId"]
        width, height = (int(v) for v in size.split(","))
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def until(self, expression: str, seconds: float) -> bool:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            res = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
            if res.get("result", {}).get("value") is True:
                return True
            time.sleep(0.25)
        return False

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.close(self._w)
        os.close(self._r)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="docs-screenshots", help="folder for the PNGs")
    ap.add_argument("--no-build", action="store_true", help="use the site/ already built")
    ap.add_argument("--size", default="1400,1000", type=window_size, help="window size WIDTH,HEIGHT")
    args = ap.parse_args(argv)
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        print("screenshots: chromium not found (Debian: apt-get install -y chromium)", file=sys.stderr)
        return 2
    if not args.no_build:
        subprocess.run([str(Path(sys.executable).parent / "mkdocs"), "build", "--strict", "--quiet"], cwd=ROOT, check=True,
                       env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})  # fmt: skip
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(ROOT / "site")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    failed = 0
    try:
        base = f"http://127.0.0.1:{port}/"
        for _ in range(50):
            try:
                urllib.request.urlopen(base, timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        with tempfile.TemporaryDirectory() as profile:
            tools = DevTools(browser, profile, args.size)
            try:
                tools.open(args.size)
                for name, page, ready in PAGES:
                    tools.call("Page.navigate", url=base + page)
                    ok = tools.until(ready, READY_S)
                    time.sleep(0.5)  # the last layout and font swap
                    png = tools.call("Page.captureScreenshot", format="png")["data"]
                    (out / name).write_bytes(base64.b64decode(png))
                    failed += not ok
                    print(f"{'ok    ' if ok else 'NOT READY'} {out / name}  <- {base + page}")
            finally:
                tools.close()
    finally:
        server.terminate()
        server.wait(timeout=10)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
