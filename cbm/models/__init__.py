"""Architectures behind one contract, found through the model registry (:mod:`cbm.models.registry`):
``conf/model/<name>.yaml`` names its class in ``_target_``.

Importing this package (or :mod:`cbm.models.config`, the typed schemas) does not import torch:
classes load on first use, so command lines validate their configs first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cbm.models.config import MODEL_CONFIGS
from cbm.models.registry import BUILTIN_TARGETS, model_class, validate_model

if TYPE_CHECKING:
    from cbm.models.base import ConceptModel
    from cbm.models.state import ConceptState


def build_model(model_cfg: dict, data_info: dict, data_cfg: dict | None = None) -> ConceptModel:
    """Instantiate the class ``model_cfg`` names (``_target_``, else its built-in ``name``) for a
    dataset described by ``data_info``."""
    return model_class(model_cfg)(model=dict(model_cfg), data=data_info, data_cfg=data_cfg)


def __getattr__(name: str) -> Any:
    if name == "ConceptModel":
        from cbm.models.base import ConceptModel

        return ConceptModel
    if name == "ConceptState":
        from cbm.models.state import ConceptState

        return ConceptState
    raise AttributeError(f"module 'cbm.models' has no attribute {name!r}")


__all__ = ["BUILTIN_TARGETS", "MODEL_CONFIGS", "ConceptModel", "ConceptState", "build_model", "model_class", "validate_model"]
