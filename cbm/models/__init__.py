"""Architectures behind one contract; ``MODELS`` maps ``model.name`` to its class.

Importing this package (or :mod:`cbm.models.config`, the typed schemas) does not import torch:
classes load on first use, so command lines validate their configs first.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from cbm.models.config import MODEL_CONFIGS, model_config_class

if TYPE_CHECKING:
    from cbm.models.base import ConceptModel
    from cbm.models.state import ConceptState

#: model.name -> "module:Class" (imported lazily so one architecture's deps don't load the rest).
MODELS: dict[str, str] = {
    "cbm": "cbm.models.cbm:CBM",
    "blackbox": "cbm.models.blackbox:BlackBox",
    "cem": "cbm.models.cem:CEM",
    "probcbm": "cbm.models.probcbm:ProbCBM",
    "ecbm": "cbm.models.ecbm:ECBM",
}


def model_class(name: str) -> type[ConceptModel]:
    """The class registered for ``model.name``."""
    if name not in MODELS:
        raise ValueError(f"unknown model '{name}', expected one of {sorted(MODELS)}")
    module, cls = MODELS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def build_model(model_cfg: dict, data_info: dict, data_cfg: dict | None = None) -> ConceptModel:
    """Instantiate ``model_cfg['name']`` for a dataset described by ``data_info``."""
    return model_class(model_cfg.get("name", "cbm"))(model=model_cfg, data=data_info, data_cfg=data_cfg)


def __getattr__(name: str) -> Any:
    if name == "ConceptModel":
        from cbm.models.base import ConceptModel

        return ConceptModel
    if name == "ConceptState":
        from cbm.models.state import ConceptState

        return ConceptState
    raise AttributeError(f"module 'cbm.models' has no attribute {name!r}")


__all__ = ["MODELS", "MODEL_CONFIGS", "ConceptModel", "ConceptState", "build_model", "model_class", "model_config_class"]
