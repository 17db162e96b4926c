"""Architectures behind one contract; ``MODELS`` maps ``model.name`` to its class."""

from __future__ import annotations

import importlib

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


__all__ = ["MODELS", "ConceptModel", "ConceptState", "build_model", "model_class"]
