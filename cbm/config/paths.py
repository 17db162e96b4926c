"""Paths a config names, resolved and checked before any work (torch-free)."""

from __future__ import annotations

from pathlib import Path


def resolve_checkpoint(path: str | Path) -> Path:
    """A ``.ckpt`` file, or a run directory holding ``checkpoints/best.ckpt`` (else ``last.ckpt``)."""
    p = Path(path)
    if p.is_dir():
        for name in ("best.ckpt", "last.ckpt"):
            if (p / "checkpoints" / name).is_file():
                return p / "checkpoints" / name
        raise ValueError(f"no checkpoints/best.ckpt or last.ckpt in run directory {p}")
    if not p.exists():
        raise ValueError(f"checkpoint not found: {p}")
    if not p.is_file():
        raise ValueError(f"checkpoint is not a file: {p}")
    return p


def resolve_blackbox(path: str | Path) -> Path:
    """A black-box baseline: a ``metrics.json``, a ``.ckpt``, or a run directory with either."""
    p = Path(path)
    if p.is_dir() and (p / "metrics.json").is_file() and not (p / "checkpoints").is_dir():
        return p / "metrics.json"
    if p.suffix == ".json":
        if not p.is_file():
            raise ValueError(f"blackbox: metrics file not found: {p}")
        return p
    return resolve_checkpoint(p)
