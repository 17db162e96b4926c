"""One registry for policies and interveners, used identically by ``cbm-intervene``,
``cbm-automate`` and the sweeps.

A component is one module and one config file: ``conf/policy/<name>.yaml`` (or
``conf/intervener/<name>.yaml``) holds its settings under ``policy.<name>`` and names its class
in ``_target_``; the class carries a typed ``Config`` dataclass and builds itself with
``from_config(cfg, ctx)``. Component modules import torch lazily, so a whole command line is
validated before torch is imported. A ``_target_`` is code (as with Hydra): it is imported, then
checked to be a component class of the expected kind before its ``Config`` or ``from_config``
is called (:func:`cbm.core.targets.resolve`); a function (``os.system``) or another class is
one line, never called.

>>> names("policy")
['random', 'responsiveness', 'uncertainty']
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from cbm.core.paths import CONF_DIR
from cbm.core.safe_paths import check_component
from cbm.core.targets import resolve
from cbm.core.validation import ConfigError, to_dataclass

KINDS = ("policy", "intervener")


from cbm.interventions.context import BuildContext  # noqa: E402,F401 (components and commands import it from here too)


def complete(kind: str, name: str, settings: Mapping[str, Any] | None) -> dict[str, Any]:
    """A component's whole settings: the ones Hydra composed are whole already (they hold the
    ``_target_`` of the file they came from, this package's or a user's own ``--config-dir``); a
    partial mapping (the Python API's ``{"threshold": 0.3}``) is laid over the package's file."""
    given = dict(settings or {})
    return given if "_target_" in given else {**defaults(kind, name), **given}


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"component kind must be one of {KINDS}, got '{kind}'")


def names(kind: str) -> list[str]:
    """The registered components of ``kind`` (one config file each)."""
    _check_kind(kind)
    return sorted(p.stem for p in (Path(CONF_DIR) / kind).glob("*.yaml"))


def defaults(kind: str, name: str) -> dict[str, Any]:
    """The settings in ``conf/<kind>/<name>.yaml`` (with ``_target_``)."""
    _check_kind(kind)
    path = Path(CONF_DIR) / kind / f"{check_component(name, kind)}.yaml"
    if not path.is_file():
        raise ConfigError(f"unknown {kind} '{name}' (choose from: {', '.join(names(kind))})")
    return dict(OmegaConf.to_container(OmegaConf.load(path), resolve=True))  # type: ignore[arg-type]


def _protocol(kind: str) -> type:
    if kind == "policy":
        from cbm.interventions.policies.base import Policy

        return Policy
    from cbm.interventions.interveners.base import Intervener

    return Intervener


def _is_component(cls: type) -> bool:
    """A ``Config`` dataclass and a ``from_config`` classmethod (looked up statically)."""
    config_cls = inspect.getattr_static(cls, "Config", None)
    return (inspect.isclass(config_cls) and dataclasses.is_dataclass(config_cls)
            and isinstance(inspect.getattr_static(cls, "from_config", None), classmethod))  # fmt: skip


def component_class(kind: str, name: str, target: str | None = None) -> type:
    """The class named by the component's ``_target_`` (``package.module.Class``), imported and
    checked before anything calls it (:func:`cbm.core.targets.resolve`): a class with the kind's
    method (``select`` / ``__call__``), a ``Config`` dataclass and a ``from_config`` classmethod;
    anything else (a function such as ``os.system``, another class) is one line."""
    _check_kind(kind)
    target = target or defaults(kind, name).get("_target_")
    if not isinstance(target, str):
        raise ValueError(f"{kind} '{name}': its config needs _target_: <module>.<Class>")
    what = {"policy": "select(model, state, k)", "intervener": "__call__(batch, state, mask)"}[kind]
    need = f"a{'n' if kind == 'intervener' else ''} {kind} class with {what}, a Config dataclass and from_config"
    try:
        return resolve(target, f"{kind} '{name}'", kinds=(_protocol(kind),), sep=".", shown=f"_target_ {target}", need=need,
                       check=_is_component)  # fmt: skip
    except ValueError as err:
        raise ConfigError(str(err)) from None


def validate(kind: str, name: str, settings: Mapping[str, Any] | None = None) -> Any:
    """The component's typed ``Config`` from its whole settings (:func:`complete`)."""
    merged = complete(kind, name, settings)
    cls = component_class(kind, name, merged.pop("_target_", None))
    return to_dataclass(cls.Config, merged, f"{kind}.{name}")


def validate_all(kind: str, blocks: Mapping[str, Any], exactly_one: bool = False) -> dict[str, Any]:
    """Typed configs of every selected component (``{name: settings}``), in order."""
    if not blocks:
        raise ConfigError(f"no {kind} selected (e.g. {kind}={names(kind)[0]})")
    if exactly_one and len(blocks) != 1:
        raise ConfigError(f"exactly one {kind} is used here, got {list(blocks)}")
    return {name: validate(kind, name, settings) for name, settings in blocks.items()}


def build(kind: str, name: str, settings: Mapping[str, Any] | None, ctx: BuildContext) -> Any:
    """The component ``name`` of ``kind``, built from its validated settings and ``ctx``; one with
    ``prepare(model, batch)`` is then prepared on ``ctx.validation()`` (when ``ctx.model`` is given)."""
    cfg = validate(kind, name, settings)
    cls = component_class(kind, name, complete(kind, name, settings).get("_target_"))
    component = cls.from_config(cfg, ctx)
    prepare = getattr(component, "prepare", None)
    if callable(prepare) and ctx.model is not None:
        if ctx.validation is None:
            raise ConfigError(f"{kind} '{name}' learns from validation data (prepare), but none was given")
        prepare(ctx.model, ctx.validation())
    return component
