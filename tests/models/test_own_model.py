"""A model of your own, with no change to ``cbm/``: a ``ConceptModel`` subclass in a package outside
the project, validated by its own schema, built, and refused when its ``_target_`` is not a model.
Its run through every command (cbm-train -> intervene -> automate -> experiment) is the README's
section, run as written by tests/models/test_readme_own_model.py."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import torch

from cbm.core.validation import ConfigError
from cbm.models import BUILTIN_TARGETS, build_model, model_class, validate_model

#: The user's package: a CBM whose head reads the concept logits divided by a temperature (its own
#: knob, its own schema), written outside the project.
USER_MODULE = '''
from dataclasses import dataclass

import torch
from torch import nn

from cbm.models.base import ConceptModel
from cbm.models.config import ModelConfig
from cbm.models.state import ConceptState


@dataclass
class TempConfig(ModelConfig):
    name: str = "temp_cbm"
    training: str = "joint"
    temperature: float = 1.0

    def __post_init__(self):
        super().__post_init__()
        if self.temperature <= 0:
            raise ValueError(f"model.temperature must be > 0, got {self.temperature}")


class TempCBM(ConceptModel):
    config_cls = TempConfig

    def build(self):
        self.concepts = nn.Linear(self.backbone.out_dim, self.n_concepts)
        self.head = nn.Linear(self.n_concepts, self.n_classes)

    def encode(self, x):
        logits = self.concepts(self.backbone(x)) / self.cfg.temperature
        return ConceptState(logits=logits, probs=torch.sigmoid(logits))

    def predict(self, state):
        return self.head(state.probs)
'''

@pytest.fixture(scope="module")
def user_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("user")
    (root / "mymodels").mkdir()
    (root / "mymodels" / "__init__.py").write_text("")
    (root / "mymodels" / "temp.py").write_text(textwrap.dedent(USER_MODULE))
    return root


def test_a_user_class_validates_builds_and_refuses_what_is_not_a_model(user_dir, monkeypatch):
    monkeypatch.syspath_prepend(str(user_dir))
    cfg = validate_model({"_target_": "mymodels.temp.TempCBM", "name": "temp_cbm", "temperature": 0.5})
    assert cfg["_target_"] == "mymodels.temp.TempCBM" and cfg["temperature"] == 0.5 and cfg["name"] == "temp_cbm"
    info = {"dataset": "robot", "modality": "tabular", "in_shape": [6], "concept_names": ["a", "b"], "class_names": ["n", "y"]}
    model = build_model(cfg, info)
    assert type(model).__name__ == "TempCBM" and model.cfg.temperature == 0.5
    state = model.encode(torch.zeros(3, 6))
    assert model.predict(model.intervene(state, torch.ones(3, 2, dtype=torch.bool), torch.ones(3, 2))).shape == (3, 2)
    # its own schema checks its own knob; the class name stands in for a built-in's name
    with pytest.raises(ConfigError, match=r"model: model.temperature must be > 0, got -1.0"):
        validate_model({"_target_": "mymodels.temp.TempCBM", "temperature": -1})
    assert validate_model({"_target_": "mymodels.temp.TempCBM", "name": "cbm"})["name"] == "tempcbm"
    for target, what in (("os.system", "a builtin_function_or_method"), ("mymodels.temp.TempConfig", "a class"),
                         ("cbm.models.base.ConceptModel", "the base class itself")):  # fmt: skip
        with pytest.raises(ConfigError, match=rf"model._target_: '{target}' is {what}, not a ConceptModel subclass .*; it was not called"):
            model_class({"_target_": target})
    with pytest.raises(ConfigError, match=r"model._target_: cannot import 'mymodels.nope.X' \(ModuleNotFoundError"):
        model_class({"_target_": "mymodels.nope.X"})
    # on a built-in's file: the class replaced from the command line, validated by its own schema
    from cbm.core.cli import precheck
    from cbm.experiments import train

    precheck("train", ["++model._target_=mymodels.temp.TempCBM", "+model.temperature=2", "output_dir=" + str(user_dir)], train.validate)
    with pytest.raises(ConfigError, match=r"model._target_: 'os.system' is a builtin_function_or_method"):
        precheck("train", ["++model._target_=os.system", "output_dir=" + str(user_dir)], train.validate)
    with pytest.raises(ConfigError, match=rf"unknown model 'nope', expected one of {re.escape(str(sorted(BUILTIN_TARGETS)))}"):
        validate_model({"name": "nope"})
