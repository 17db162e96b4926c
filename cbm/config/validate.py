"""Turn a (Hydra) config mapping into a typed dataclass, failing with one clear line."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

T = TypeVar("T")


class ConfigError(ValueError):
    """A config value is missing, of the wrong type or out of range."""


def _one_line(err: Exception) -> str:
    msg = str(err).strip().splitlines()
    head = msg[0] if msg else type(err).__name__
    key = next((ln.split(":", 1)[1].strip() for ln in msg if ln.strip().startswith("full_key:")), "")
    return f"{head} (key: {key})" if key else head


def to_dataclass(cls: type[T], cfg: Mapping[str, Any] | DictConfig | T | None, where: str = "") -> T:
    """Validate ``cfg`` against the dataclass ``cls`` and return an instance.

    Unknown keys, wrong types and the dataclass's own ``__post_init__`` checks all
    raise :class:`ConfigError` with a single-line message prefixed by ``where``.
    """
    if isinstance(cfg, cls):
        return cfg
    prefix = f"{where}: " if where else ""
    try:
        base = OmegaConf.structured(cls)
        merged = OmegaConf.merge(base, cfg if cfg is not None else {})
        obj = OmegaConf.to_object(merged)
    except OmegaConfBaseException as err:
        raise ConfigError(prefix + _one_line(err)) from None
    except (ValueError, TypeError) as err:
        raise ConfigError(prefix + _one_line(err)) from None
    return obj  # type: ignore[return-value]


def as_dict(obj: Any) -> dict[str, Any]:
    """Plain nested dict of a dataclass or DictConfig (for hparams, hashing, JSON)."""
    if dataclasses.is_dataclass(obj):
        return dataclasses.asdict(obj)
    if isinstance(obj, DictConfig):
        return OmegaConf.to_container(obj, resolve=True)  # type: ignore[return-value]
    return dict(obj)


def check_budgets(ks: list, where: str = "ks", allow_empty: bool = False) -> None:
    """Intervention budgets: distinct integers >= 0 or ``max`` (all concepts); the one rule every
    command uses (a budget that equals ``max`` once the concepts are known: ``resolve_ks``)."""
    if not ks and not allow_empty:
        raise ValueError(f"{where} must list at least one budget (e.g. [0, 1, 3, max])")
    for k in ks:
        if not (k == "max" or (isinstance(k, int) and not isinstance(k, bool) and k >= 0)):
            raise ValueError(f"{where} entries must be integers >= 0 or 'max', got {k!r}")
    twice = next((k for i, k in enumerate(ks) if k in ks[:i]), None)
    if twice is not None:
        raise ValueError(f"{where} lists the budget {twice!r} twice, got {list(ks)} (each budget once)")
