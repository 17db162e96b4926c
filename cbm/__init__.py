"""Concept bottleneck models on synthetic benchmarks with known ground truth (see the docs site)."""

from __future__ import annotations


def _version() -> str:
    """The installed distribution's version; in a checkout that is not installed, pyproject.toml's."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("cbm")
    except PackageNotFoundError:
        import re
        from pathlib import Path

        pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
        try:
            found = re.search(r'^version\s*=\s*"([^"]+)"', pyproject.read_text(), re.M)
        except OSError:
            found = None
        return found[1] if found else "0+unknown"


__version__ = _version()
