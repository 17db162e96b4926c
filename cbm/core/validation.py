"""The one vocabulary every setting is validated with, each failure one line naming the field.

Hydra passes whatever was typed (``k=abc``, ``episodes=5``); without these checks a wrong type
surfaces as a ``TypeError`` deep inside a run. :func:`to_dataclass` turns a config mapping into a
typed dataclass through OmegaConf's structured configs (unknown keys, wrong types and the
dataclass's own ``__post_init__`` checks are :class:`ConfigError`); for dataclasses built from plain
dicts (fields with unions), :func:`check_fields` checks every field against its annotation,
:func:`nested` builds a nested settings dataclass from a mapping (unknown keys named),
:func:`in_range` a number against an interval, :func:`within_split` a count against the split it is
drawn from, and :func:`conforms` checks a JSON value read back from disk against a small schema.

>>> conforms({"a": [1, 2], "b": None}, {"a": [int], "b": (str, None), "?c": bool})
True
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
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

_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string", type(None): "null"}
_PLURAL = {int: "integers", float: "numbers", bool: "booleans", str: "strings"}


def describe(tp: Any) -> str:
    """``list[int] | None`` -> ``"a list of integers or null"``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe(a) for a in args)
    if origin is list:
        return f"a list of {_PLURAL.get(args[0], 'items')}" if args else "a list"
    if origin is dict or tp is dict:
        inner = args[1] if len(args) == 2 else Any
        return "a mapping of mappings" if typing.get_origin(inner) is dict else "a mapping"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return _NAMES.get(tp, getattr(tp, "__name__", str(tp)))


def matches(value: Any, tp: Any) -> bool:
    """Whether ``value`` is of the annotated type ``tp`` (a bool is not a number, numbers are
    finite, a dict's keys are strings)."""
    if tp is Any:
        return True
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return any(matches(value, a) for a in args)
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if tp is str:
        return isinstance(value, str)
    if origin is list:
        return isinstance(value, list) and all(matches(v, args[0]) for v in value) if args else isinstance(value, list)
    if origin is dict or tp is dict:
        inner = args[1] if len(args) == 2 else Any
        return isinstance(value, Mapping) and all(isinstance(k, str) and matches(v, inner) for k, v in value.items())
    if isinstance(tp, type):
        return isinstance(value, tp)
    return True  # an annotation these settings do not use: not checked


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_fields(obj: Any, where: str = "") -> None:
    """Every field of the dataclass ``obj`` holds a value of its annotated type; else
    ``ValueError: <where><field>: must be <type>, got <value>``."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        check_value(getattr(obj, f.name), hints[f.name], f"{where}{f.name}")


def check_value(value: T, tp: Any, where: str, what: str | None = None) -> T:
    """``value`` when it is of the annotated type ``tp`` (:func:`matches`); else
    ``ValueError: <where>: must be <what, or tp described>, got <type> <value>``."""
    if not matches(value, tp):
        raise ValueError(f"{where}: must be {what or describe(tp)}, got {type(value).__name__} {_shown(value)}")
    return value


def _num(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def in_range(name: str, value: float, lo: float, hi: float, lo_open: bool = False, hi_open: bool = False) -> None:
    """``value`` finite and inside the interval, else ``ValueError: <name>: must be in [lo, hi], got <value>``."""
    ok = math.isfinite(value) and (value > lo if lo_open else value >= lo) and (value < hi if hi_open else value <= hi)
    if not ok:
        interval = f"{'(' if lo_open else '['}{_num(lo)}, {_num(hi)}{')' if hi_open else ']'}"
        raise ValueError(f"{name}: must be in {interval}, got {value}")


def _bounds(lo: float | None, hi: float | None) -> str:
    if lo is not None and hi is not None:
        return f" in [{lo}, {hi}]"
    return f" >= {lo}" if lo is not None else f" <= {hi}" if hi is not None else ""


def integer(where: str, value: Any, lo: int | None = None, hi: int | None = None) -> int:
    """``value`` when it is an integer (a bool is not) inside ``[lo, hi]`` (a bound left ``None``: no
    bound); else ``ValueError: <where>: expected an integer in [lo, hi], got <value>``."""
    if isinstance(value, bool) or not isinstance(value, int) or (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ValueError(f"{where}: expected an integer{_bounds(lo, hi)}, got {value!r}")
    return value


def number(where: str, value: Any, lo: float | None = None, hi: float | None = None) -> float:
    """``value`` as a float when it is a finite number (a bool is not) inside ``[lo, hi]``; else
    ``ValueError: <where>: expected a number in [lo, hi], got <value>`` (``a finite number`` without bounds)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or (lo is not None and value < lo) or (hi is not None and value > hi):
        kind = "a number" if lo is not None or hi is not None else "a finite number"
        raise ValueError(f"{where}: expected {kind}{_bounds(lo, hi)}, got {value!r}")
    return float(value)


def boolean(where: str, value: Any) -> bool:
    """``value`` when it is ``true`` or ``false``; else ``ValueError: <where>: expected true or false, got <value>``."""
    if not isinstance(value, bool):
        raise ValueError(f"{where}: expected true or false, got {value!r}")
    return value


def one_of(where: str, value: Any, choices: Any) -> Any:
    """``value`` when it is one of ``choices``; else ``ValueError: <where>: must be one of [...], got <value>``."""
    if isinstance(value, bool) or value not in tuple(choices):
        raise ValueError(f"{where}: must be one of {list(choices)}, got {value!r}")
    return value


def span(where: str, value: Any, lo: float, hi: float) -> list[float]:
    """``value`` as ``[a, b]`` floats when it is two numbers with ``lo <= a <= b <= hi``; else
    ``ValueError: <where>: expected [a, b] with lo <= a <= b <= hi, got <value>``."""
    pair = list(value) if isinstance(value, list | tuple) or OmegaConf.is_list(value) else None
    nums = pair is not None and len(pair) == 2 and all(isinstance(x, int | float) and not isinstance(x, bool) for x in pair)
    if not nums or not lo <= pair[0] <= pair[1] <= hi:
        raise ValueError(f"{where}: expected [a, b] with {lo} <= a <= b <= {hi}, got {pair if pair is not None else value!r}")
    return [float(x) for x in pair]


def within_split(name: str, n: int, pool: int, split: str, sized_by: str | None = None) -> int:
    """``n`` when a split of ``pool`` items holds that many, else ``ValueError: <name>=<n> exceeds
    the <pool> items of split '<split>'`` (``sized_by``: the setting that sizes the split). The one
    check of every "take the first n items" setting (``cbm-edct items.n``, ``cbm-vlm-zoo
    edct_items``): a count beyond the split is refused, never quietly cut to it."""
    if n > pool:
        raise ValueError(f"{name}={n} exceeds the {pool} items of split '{split}'" + (f" (set by {sized_by})" if sized_by else ""))
    return n


def nested(cls: type[T], value: Any, where: str) -> T:
    """The settings dataclass ``cls`` from a mapping (``where`` names it in errors: ``episodes``);
    an instance passes through."""
    if isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: must be a mapping of settings, got {type(value).__name__} {_shown(value)}")
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(str(k) for k in value if k not in known)
    if unknown:
        raise ValueError(f"{where}: unknown setting(s) {unknown} (known: {', '.join(sorted(known))})")
    return cls(**dict(value))


def check_kwargs(fn: Any, kwargs: Mapping[str, Any], where: str, skip: tuple[str, ...] = ()) -> None:
    """``kwargs`` fit the keyword parameters of ``fn`` (a function or a class: its ``__init__``):
    no unknown name, every required one given, each value of its annotated type; one line naming
    ``where.<name>`` otherwise. Nothing is called."""
    import inspect

    target = fn.__init__ if inspect.isclass(fn) else fn
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):  # a builtin without a signature: nothing to check against
        return
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    params = {n: p for n, p in signature.parameters.items() if p.kind in kinds and n != "self" and n not in skip}
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values())
    unknown = sorted(str(k) for k in kwargs if k not in params)
    if unknown and not takes_any:
        raise ValueError(f"{where}: unknown setting(s) {unknown} (known: {', '.join(sorted(params)) or 'none'})")
    missing = [n for n, p in params.items() if p.default is inspect.Parameter.empty and n not in kwargs]
    if missing:
        raise ValueError(f"{where}.{missing[0]}: required")
    try:
        hints = typing.get_type_hints(target)
    except Exception:  # noqa: BLE001 - annotations that do not resolve (a user's class): types unchecked
        hints = {}
    for name, value in kwargs.items():
        check_value(value, hints.get(name, Any), f"{where}.{name}")


def conforms(value: Any, schema: Any) -> bool:
    """Whether a JSON value fits ``schema``: a type (``int`` excludes ``bool``, ``float`` takes an
    ``int`` and excludes NaN and infinities, as :func:`matches`), ``None``, ``Any``, a tuple (any of), a one-item list (a list of), or a dict of keys
    (``"?key"``: optional; other keys of the value are allowed)."""
    if schema is Any:
        return True
    if schema is None:
        return value is None
    if isinstance(schema, tuple):
        return any(conforms(value, s) for s in schema)
    if isinstance(schema, list):
        return isinstance(value, list) and all(conforms(v, schema[0]) for v in value)
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            return False
        for key, sub in schema.items():
            name = key.lstrip("?")
            if name not in value:
                if key.startswith("?"):
                    continue
                return False
            if not conforms(value[name], sub):
                return False
        return True
    if schema in (float, int, bool, str):
        return matches(value, schema)
    return isinstance(value, schema)
