"""User-named targets: a setting that names code (a component's ``_target_``, the ``llm``
intervener's ``client``, the EDCT ``segmenter.target``, a torchvision dataset class) is imported
and checked *before anything calls it* (DESIGN.md, Engineering rules).

:func:`resolve` imports the name and accepts only

* a class deriving from one of the expected base classes (``kinds``; a ``runtime_checkable``
  protocol counts structurally), not a base class itself, or
* a function or class carrying the kind's mark (set by :func:`mark`, read with
  :func:`inspect.getattr_static` so an object's ``__getattr__`` cannot fake it).

Anything else (a module, a builtin such as ``eval``, a plain function such as ``os.system``, an
instance, another library's class) is one ``ValueError`` line ending "it was not called"; so is a
name that cannot be imported, whether it is missing or its module's own code raises as it loads.
Torch-free: importing the target is the only code that runs.

>>> resolve("os:system", "x.target", kinds=(Exception,), need="an exception class")
Traceback (most recent call last):
...
ValueError: x.target: 'os:system' is a builtin_function_or_method, not an exception class; it was not called
>>> resolve("json:JSONDecodeError", "x.target", kinds=(Exception,), need="an exception class").__name__
'JSONDecodeError'
"""

from __future__ import annotations

import importlib
import inspect
import types
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F")

#: The attribute :func:`mark` sets, by kind (``client_factory`` -> ``__cbm_client_factory__``).
MARK_ATTR = "__cbm_{}__"


def mark(kind: str) -> Callable[[F], F]:
    """A decorator marking a function or class as a target of ``kind`` that a config may name
    (e.g. ``mark("client_factory")``); :func:`resolve` with ``mark=kind`` accepts it."""
    attr = MARK_ATTR.format(kind)

    def decorate(obj: F) -> F:
        setattr(obj, attr, True)
        return obj

    return decorate


def is_marked(obj: object, kind: str) -> bool:
    """``obj`` is a function or class carrying the mark of ``kind`` (looked up statically)."""
    if not (inspect.isfunction(obj) or inspect.isclass(obj)):
        return False
    return inspect.getattr_static(obj, MARK_ATTR.format(kind), False) is True


def _is_base(obj: type, kinds: tuple[type, ...]) -> bool:
    return obj in kinds or bool(getattr(obj, "_is_protocol", False))


def accepts(obj: object, kinds: tuple[type, ...] = (), mark: str | None = None,
            check: Callable[[type], bool] | None = None) -> bool:  # fmt: skip
    """Whether :func:`resolve` takes ``obj``: a marked function or class, or a class (not from
    ``builtins``, not a base or protocol itself) deriving from one of ``kinds`` that passes ``check``."""
    if mark is not None and is_marked(obj, mark):
        return True
    if not inspect.isclass(obj) or obj.__module__ == "builtins" or _is_base(obj, kinds):
        return False
    try:
        derived = any(issubclass(obj, k) for k in kinds)
    except TypeError:  # a protocol with data members cannot be checked structurally
        derived = False
    return derived and (check is None or check(obj))


def _what(obj: object, kinds: tuple[type, ...]) -> str:
    if isinstance(obj, types.ModuleType):
        return "a module"
    if inspect.isclass(obj):
        return "the base class itself" if _is_base(obj, kinds) else "a class"
    return f"a {type(obj).__name__}"


def _import(spec: object, where: str, need: str, sep: str, module: str | None, shown: str) -> Any:
    if module is not None:
        if not isinstance(spec, str) or not spec.isidentifier() or spec.startswith("_"):
            raise ValueError(f"{where}: must be the name of {need} in {module}, got {spec!r}")
        mod_name, attrs = module, [spec]
    else:
        example = "'module:Name'" if sep == ":" else "'package.module.Name'"
        text = spec if isinstance(spec, str) else ""
        mod_name, found, attr = text.partition(":") if sep == ":" else text.rpartition(".")
        if not found or not mod_name or not attr or ":" in attr:
            raise ValueError(f"{where}: must look like {example} ({need}), got {spec!r}")
        attrs = attr.split(".")
    try:
        obj: Any = importlib.import_module(mod_name)
        for part in attrs:
            obj = getattr(obj, part)
    except (Exception, SystemExit) as err:  # a missing name, or the module's own code failing as it is imported
        first = (str(err).strip().splitlines() or [""])[0]
        raise ValueError(f"{where}: cannot import {shown} ({type(err).__name__}{': ' if first else ''}{first})") from None
    return obj


def resolve(spec: object, where: str, *, need: str, kinds: tuple[type, ...] = (), mark: str | None = None,
            sep: str = ":", module: str | None = None, shown: str | None = None,
            check: Callable[[type], bool] | None = None) -> Any:  # fmt: skip
    """The function or class ``spec`` names, imported and checked (:func:`accepts`), never called.

    Parameters
    ----------
    spec : ``"module:name"`` (``sep=":"``; ``name`` may be dotted, ``Outer.Inner``) or
        ``"package.module.Name"`` (``sep="."``); with ``module``, a public name in that module.
    where : the setting, first in every message (``"segmenter.target"``).
    need : what is accepted, in words (``"a Segmenter class or a factory marked ..."``).
    kinds : the expected base classes; mark : the kind :func:`mark` set on accepted functions.
    shown : how messages name the target (default ``'spec'``).
    check : a further test of an accepted class (e.g. it has a ``Config`` dataclass).
    """
    shown = shown if shown is not None else f"'{spec}'" if module is None else f"'{spec}' of {module}"
    obj = _import(spec, where, need, sep, module, shown)
    if not accepts(obj, kinds, mark, check):
        raise ValueError(f"{where}: {shown} is {_what(obj, kinds)}, not {need}; it was not called")
    return obj
