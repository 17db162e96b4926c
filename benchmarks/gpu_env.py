"""Install this checkout into a virtual environment on a machine with no package index (the GPU
machine), so its console scripts (``cbm-finetune``, ``cbm-vlm-zoo``, ...) exist beside the
interpreter, as the tests expect (``Path(sys.executable).parent / "cbm-finetune"``).

    python3 benchmarks/gpu_env.py .gpu_venv        # prints .gpu_venv/bin/python

Standard library only, nothing downloaded, nothing built: the environment is created with the
running interpreter's ``venv`` (no pip inside), and the project is installed the way an editable
install is (PEP 660): a ``.pth`` file puts the checkout on ``sys.path``, a ``.dist-info`` folder
carries its metadata and entry points, and ``bin/`` gets one launcher per ``[project.scripts]``
entry of pyproject.toml. The environment sees everything the creating interpreter sees (its
site-packages, user site and ``PYTHONPATH`` entries at creation time, e.g. ``.gpu_deps/``, where
``benchmarks/gpu_deps.sh`` installs the carried wheels), so torch & co. come from the machine's
image. Re-running it is cheap and idempotent: it refreshes the launchers and paths.
"""

from __future__ import annotations

import argparse
import os
import re
import site
import sys
import sysconfig
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = """#!{python}
# Installed by benchmarks/gpu_env.py: the [project.scripts] entry {name} = {target}
import sys
from {module} import {attr}

if __name__ == "__main__":
    sys.argv[0] = {name!r}
    sys.exit({attr}())
"""


def project() -> tuple[str, str, dict[str, str]]:
    """``(name, version, {script: "module:function"})`` from pyproject.toml's ``[project]`` and
    ``[project.scripts]`` tables (read line by line: Python 3.10 has no tomllib)."""
    tables: dict[str, dict[str, str]] = {}
    table = ""
    for line in (ROOT / "pyproject.toml").read_text(encoding="utf-8").splitlines():
        head = re.fullmatch(r"\s*\[([^\]]+)\]\s*", line)
        if head:
            table = head[1].strip()
            continue
        pair = re.fullmatch(r'\s*"?([\w.-]+)"?\s*=\s*"([^"]*)"\s*(#.*)?', line)
        if pair:
            tables.setdefault(table, {})[pair[1]] = pair[2]
    meta = tables["project"]
    return meta["name"], meta["version"], tables.get("project.scripts", {})


def visible_paths() -> list[str]:
    """The creating interpreter's import paths beyond the standard library: the checkout first,
    then ``PYTHONPATH``, site-packages and the user site (which a venv would otherwise hide)."""
    stdlib = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib")}
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    found = [*extra, *site.getsitepackages(), site.getusersitepackages(), *sys.path[1:]]  # sys.path[0]: benchmarks/
    out = [str(ROOT)]
    for p in found:
        p = str(Path(p).resolve()) if p else ""
        if p and p not in out and p not in stdlib and Path(p).is_dir() and "lib-dynload" not in p:
            out.append(p)
    return out


def install(env: Path) -> Path:
    """Create (or refresh) ``env`` with the project installed; its interpreter's path."""
    env = env.absolute()
    python = env / "bin" / "python"
    if not python.exists():
        venv.EnvBuilder(system_site_packages=True, with_pip=False, symlinks=True, clear=False).create(env)
    purelib = env / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"  # the venv's (same Python)
    purelib.mkdir(parents=True, exist_ok=True)
    (purelib / "cbm_checkout.pth").write_text("\n".join(visible_paths()) + "\n", encoding="utf-8")
    name, version, scripts = project()
    info = purelib / f"{name}-{version}.dist-info"
    for old in purelib.glob(f"{name}-*.dist-info"):
        if old != info:
            for f in old.iterdir():
                f.unlink()
            old.rmdir()
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8")
    (info / "INSTALLER").write_text("benchmarks/gpu_env.py\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(
        "[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in scripts.items()), encoding="utf-8"
    )
    (info / "direct_url.json").write_text(f'{{"url": "{ROOT.as_uri()}", "dir_info": {{"editable": true}}}}\n', encoding="utf-8")
    for script, target in scripts.items():
        module, attr = target.split(":")
        path = env / "bin" / script
        path.write_text(LAUNCHER.format(python=python, name=script, target=target, module=module, attr=attr), encoding="utf-8")
        path.chmod(0o755)
    return python


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("env", type=Path, help="the environment's folder (created when absent)")
    a = ap.parse_args(argv)
    print(install(a.env))
    return 0


if __name__ == "__main__":
    sys.exit(main())
