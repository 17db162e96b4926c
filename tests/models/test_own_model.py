"""A model of your own through every command, with no change to ``cbm/``: a ``ConceptModel``
subclass in a package outside the project, its config file in a config directory of its own
(``--config-dir``), trained, intervened on, automated and run as an experiment like a built-in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from cbm.config import ConfigError
from cbm.models import build_model, model_class, validate_model
from cbm.models.state import ConceptState
from cbm.training.checkpoint import load_run

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

MODEL_YAML = """\
_target_: mymodels.temp.TempCBM
name: temp_cbm
training: joint
temperature: 0.5
backbone: {name: auto, hidden: [32], out_dim: 32}
optim: {name: adam, lr: 0.01}
"""

#: tabular robots, a few hundred rows: the point is the plumbing, not the accuracy
DATA = ["data.modality=tabular", "data.n_train=500", "data.n_calib=100", "data.n_test=200"]

EXPERIMENT_YAML = f"""\
# @package _global_
name: mine
seeds: [0]
train: [trainer=cpu_smoke, logger=csv_only, trainer.max_epochs=3, {", ".join(DATA)}]
settings:
  robots: [data=robot]
models:
  blackbox: [model=blackbox]
  temp_cbm: [model=temp_cbm]
blackbox: blackbox
intervene:
  intervener: [oracle]
  policy: [random, uncertainty]
  ks: [0, 1, max]
automate:
  policy: uncertainty
  intervener: oracle
  ks: [0, 1]
  target_accuracy: 0.9
  method: empirical
"""


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("user")
    (root / "mymodels").mkdir()
    (root / "mymodels" / "__init__.py").write_text("")
    (root / "mymodels" / "temp.py").write_text(textwrap.dedent(USER_MODULE))
    (root / "conf" / "model").mkdir(parents=True)
    (root / "conf" / "model" / "temp_cbm.yaml").write_text(MODEL_YAML)
    (root / "conf" / "experiment").mkdir()
    (root / "conf" / "experiment" / "mine.yaml").write_text(EXPERIMENT_YAML)
    return root


def run(module: str, user_dir: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(user_dir), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", f"cbm.experiments.{module}", "--config-dir", str(user_dir / "conf"), *args],
                          capture_output=True, text=True, cwd=cwd, env=env, timeout=900)  # fmt: skip


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
    from cbm.experiments import train
    from cbm.experiments.cli import precheck

    precheck("train", ["++model._target_=mymodels.temp.TempCBM", "+model.temperature=2", "output_dir=" + str(user_dir)], train.validate)
    with pytest.raises(ConfigError, match=r"model._target_: 'os.system' is a builtin_function_or_method"):
        precheck("train", ["++model._target_=os.system", "output_dir=" + str(user_dir)], train.validate)
    with pytest.raises(ConfigError, match=r"unknown model 'nope', expected one of \['blackbox', 'cbm', 'cem', 'ecbm', 'probcbm'\]"):
        validate_model({"name": "nope"})


@pytest.mark.slow
def test_a_model_outside_the_package_runs_through_every_command(user_dir, tmp_path, shared_cache, monkeypatch):
    base = [f"cache_dir={shared_cache}", "trainer=cpu_smoke", "logger=csv_only", "trainer.max_epochs=3", *DATA]
    run_dir = tmp_path / "train"
    proc = run("train", user_dir, tmp_path, "model=temp_cbm", *base, f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["model"] == "temp_cbm" and metrics["test/task_acc"] > 0.6, metrics
    ckpt = torch.load(run_dir / "checkpoints" / "best.ckpt", weights_only=True, map_location="cpu")
    assert ckpt["hyper_parameters"]["model"]["_target_"] == "mymodels.temp.TempCBM"
    assert ckpt["hyper_parameters"]["model"]["temperature"] == 0.5

    proc = run("intervene", user_dir, tmp_path, f"checkpoint={run_dir}", f"cache_dir={shared_cache}", "intervener=[oracle]",
               "policy=[random]", "ks=[0,max]", f"hydra.run.dir={tmp_path / 'intervene'}")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads((tmp_path / "intervene" / "results.json").read_text())
    assert rows["meta"]["model"] == "temp_cbm"
    acc = {r["k"]: r["accuracy"] for r in rows["rows"] if r["policy"] == "random"}
    # k = every concept: the user's head on the true test concepts, reloaded here from the checkpoint
    monkeypatch.syspath_prepend(str(user_dir))
    model, dm, _ = load_run(run_dir, cache_dir=shared_cache)
    test = dm.split("test").tensors
    with torch.no_grad():
        logits = model.predict(ConceptState(logits=test["c"], probs=test["c"].float()))
    assert acc[max(acc)] == pytest.approx(float((logits.argmax(1) == test["y"]).float().mean()), abs=1e-6)
    assert acc[0] == pytest.approx(metrics["test/task_acc"], abs=1e-6)

    proc = run("automate", user_dir, tmp_path, f"checkpoint={run_dir}", f"cache_dir={shared_cache}", "ks=[0,1]",
               "target_accuracy=0.9", "method=empirical", f"hydra.run.dir={tmp_path / 'automate'}")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "automate" / "automation.json").is_file()

    out = tmp_path / "exp"
    proc = run("experiment", user_dir, tmp_path, "+experiment=mine", f"output_dir={out}", f"cache_dir={shared_cache}")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert not report["unfinished"] and (out / "robots" / "temp_cbm" / "seed0" / "automate" / "automation.json").is_file()
    models = {r["model"] for r in report["interventions"]}
    assert any(m.startswith("temp_cbm") for m in models), models
