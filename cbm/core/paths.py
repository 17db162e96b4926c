"""Paths a config names, resolved and checked before any work (torch-free)."""

from __future__ import annotations

from pathlib import Path

#: The Hydra configs (the only place defaults live): ``cbm/conf``, shipped inside the package so an
#: installed wheel finds them; ``conf/`` at the top of a checkout is a link to it.
CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")


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


def group_defaults(config_name: str, group: str) -> list[str]:
    """The options a config file's defaults list selects in ``group`` (``[]`` when none), so code
    that builds a config without Hydra uses the same defaults as the command line."""
    import yaml

    doc = yaml.safe_load((Path(CONF_DIR) / f"{config_name}.yaml").read_text()) or {}
    for entry in doc.get("defaults", []) or []:
        if isinstance(entry, dict) and group in entry:
            value = entry[group]
            return [str(v) for v in value] if isinstance(value, list) else [str(value)]
    return []
