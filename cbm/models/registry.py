"""Models through the registry, as policies and interveners are: ``conf/model/<name>.yaml`` names
its class in ``_target_`` (``package.module.Class``), and every command builds, checkpoints and
reloads the model from that name. A model of your own is a :class:`~cbm.models.base.ConceptModel`
subclass in any importable module with a config file of its own (``--config-dir`` /
``hydra.searchpath``) or ``++model._target_=mypkg.MyCBM`` on a built-in's file.

Torch-free for the built-ins: their schemas are known here, so a command line is validated before
torch is imported. A ``_target_`` is code: it is imported and checked to be a ``ConceptModel``
subclass before anything calls it (:func:`cbm.core.targets.resolve`); a function or another class
is one line, never called.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from cbm.core.targets import resolve
from cbm.core.validation import ConfigError, as_dict, to_dataclass
from cbm.models.config import MODEL_CONFIGS, ModelConfig
from cbm.models.ocr_config import OCR_MODELS

if TYPE_CHECKING:
    from cbm.models.base import ConceptModel

#: The key naming a model's class in its config (Hydra's).
from cbm.models.config import TARGET, settings_of  # noqa: E402,F401 (the registry's callers import them from here too)

#: Built-in ``model.name`` -> the class its config names (checkpoints written before ``_target_``
#: existed carry only the name, and load through this table).
BUILTIN_TARGETS: dict[str, str] = {
    "cbm": "cbm.models.cbm.CBM",
    "blackbox": "cbm.models.blackbox.BlackBox",
    "cem": "cbm.models.cem.CEM",
    "probcbm": "cbm.models.probcbm.ProbCBM",
    "ecbm": "cbm.models.ecbm.ECBM",
    "hybrid_cbm": "cbm.models.hybrid.HybridCBM",
    "scbm": "cbm.models.scbm.StochasticCBM",
    "intcem": "cbm.models.intcem.IntCEM",
    "dcr": "cbm.models.dcr.DCR",
}
#: A built-in class -> its schema, known without importing the class (or torch).
BUILTIN_TARGETS.update({name: target for name, (target, _) in OCR_MODELS.items()})  # the two-stage Sudoku models
_BUILTIN_SCHEMAS: dict[str, type[ModelConfig]] = {t: {**MODEL_CONFIGS, **{n: s for n, (_, s) in OCR_MODELS.items()}}[n]
                                                  for n, t in BUILTIN_TARGETS.items()}  # fmt: skip

NEED = "a ConceptModel subclass (cbm.models.ConceptModel: encode / intervene / predict)"


def model_target(cfg: Mapping[str, Any] | str) -> str:
    """The class a model config names: its ``_target_``, else the built-in of its ``name``
    (a string is either a dotted target or a built-in name)."""
    if isinstance(cfg, str):
        if cfg in BUILTIN_TARGETS:
            return BUILTIN_TARGETS[cfg]
        if "." in cfg:
            return cfg
        _unknown(cfg)
    target = cfg.get(TARGET)
    if target is None:
        name = cfg.get("name", "cbm")
        if name not in BUILTIN_TARGETS:
            _unknown(name)
        return BUILTIN_TARGETS[name]
    if not isinstance(target, str) or not target.strip():
        raise ConfigError(f"model.{TARGET}: expected 'package.module.Class', got {target!r}")
    return target


def _unknown(name: object) -> NoReturn:
    raise ConfigError(f"unknown model '{name}', expected one of {sorted(BUILTIN_TARGETS)} "
                      f"or a model of your own named by model.{TARGET} (package.module.Class)")  # fmt: skip


def model_class(cfg: Mapping[str, Any] | str) -> type[ConceptModel]:
    """The class a model config (or a name / dotted target) names, imported and checked before
    anything calls it; anything but a ``ConceptModel`` subclass is one :class:`ConfigError` line."""
    from cbm.models.base import ConceptModel

    target = model_target(cfg)
    try:
        return resolve(target, f"model.{TARGET}", kinds=(ConceptModel,), sep=".", shown=f"'{target}'", need=NEED)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def schema(cfg: Mapping[str, Any] | str) -> type[ModelConfig]:
    """The typed schema of a model config: a built-in's without importing it, else the class's
    ``config_cls`` (a :class:`ModelConfig` subclass; importing a model of your own imports torch)."""
    target = model_target(cfg)
    if target in _BUILTIN_SCHEMAS:
        return _BUILTIN_SCHEMAS[target]
    found = model_class(target).config_cls
    if not (isinstance(found, type) and issubclass(found, ModelConfig)):
        raise ConfigError(f"model.{TARGET}: {target}.config_cls must be a ModelConfig subclass (cbm.models.config), got {found!r}")
    return found


def model_name(cfg: Mapping[str, Any]) -> str:
    """The name results, run directories and reports show: ``model.name`` (any label for a built-in
    class, e.g. ``cbm_aligned``, but not another built-in's name), except that a class of your own
    keeps no built-in's name (``++model._target_=mypkg.MyCBM`` on ``model=cbm`` is ``mycbm``)."""
    target = model_target(cfg)
    name = cfg.get("name")
    if target in _BUILTIN_SCHEMAS:
        if name in BUILTIN_TARGETS and BUILTIN_TARGETS[name] != target:
            raise ConfigError(f"model.name: '{name}' is the built-in {BUILTIN_TARGETS[name]}, but model.{TARGET} is {target} "
                              f"(choose the architecture with model={name})")  # fmt: skip
        return str(name or next(n for n, t in BUILTIN_TARGETS.items() if t == target))
    if not name or (name in BUILTIN_TARGETS and BUILTIN_TARGETS[name] != target):
        return target.rpartition(".")[2].lower()
    return str(name)


def validate_model(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A model config typed by its class's schema, as plain data with its ``_target_`` (what
    checkpoints store, so every command rebuilds the same class)."""
    target = model_target(raw)
    settings = {k: v for k, v in raw.items() if k != TARGET}
    settings["name"] = model_name(raw)
    out = as_dict(to_dataclass(schema(target), settings, "model"))
    return {TARGET: target, **out}


