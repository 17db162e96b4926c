"""The bad-input corpus of names that become paths, across the commands (harness: ``badinput.py``).

Every name a setting turns into a file or directory name — the experiment's name, its setting and
model names, Hydra's job name, ``.hydra`` subfolder and sweep subfolder, a config group choice
(``data=../model/cbm`` would read another group's file), policy / intervener names, ICL model and
dataset names, concept names in a concept-set file, and ``cbm-data``'s ``out=`` file — is tried
with ``..``, ``../../x``, an absolute path, ``/`` and ``\\`` and a control character (a newline,
through ``${oc.env:CBM_TEST_BAD_NAME}``: a NUL cannot travel in an argument). Each is refused
before any file is written: one line, exit 2, nothing left behind.

The cases need no trained model: ``FX`` is a small fixture of its own here (a run folder whose
checkpoint only has to exist for the precheck, and hostile concept sets), so the file runs in
the default suite; the cases beyond the first of each kind are marked slow.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from badinput import SLOW, assert_refused, params

#: A name with a newline and a tab, given to every case's environment (``${oc.env:...}``).
BAD_ENV = {"CBM_TEST_BAD_NAME": "a\nb\tc"}
ENV_NAME = "${oc.env:CBM_TEST_BAD_NAME}"
NOT_A_NAME = "is not usable as a file or directory name"
OUTSIDE = "must be a relative path inside"

EXPERIMENT = [
    (["name=../../x"], f"name: '../../x' {NOT_A_NAME} (it contains a path separator)", ()),
    (["name=.."], f"name: '..' {NOT_A_NAME} (it names a directory", ()),
    (["name=/tmp/x"], "name: '/tmp/x'", (SLOW,)),
    (["name=a\\b"], "name: 'a\\\\b'", (SLOW,)),
    ([f"name={ENV_NAME}"], "'experiments/a\\nb\\tc' contains a control character", ()),  # output_dir: experiments/<name>
    (["~settings", "+settings={../x: [data.concept_noise=0.1]}"], "settings: '../x'", ()),
    (["~settings", "+settings={..: []}"], "settings: '..'", (SLOW,)),
    (["~models", "+models={/tmp/x: [model=cbm]}"], "models: '/tmp/x'", ()),
    (["~models", "+models={a\\b: [model=cbm]}"], "models: 'a\\\\b'", (SLOW,)),
    (["hydra.job.name=../../evil"], "hydra.job.name: '../../evil'", (SLOW,)),
    (["hydra.output_subdir=../../cfg"], f"hydra.output_subdir: '../../cfg' {OUTSIDE} the run directory", (SLOW,)),
    ([f"output_dir=FX/{ENV_NAME}"], "contains a control character", (SLOW,)),
]
TRAIN = [
    (["data.name=../../x"], "got '../../x'", ()),
    (["model.name=../../x"], "model: model.name: '../../x' is not usable as a file or directory name (it contains a path separator)", ()),
    (["hydra.job.name=../evil"], "hydra.job.name: '../evil'", ()),
    (["hydra.job.name=/tmp/x"], "hydra.job.name: '/tmp/x'", (SLOW,)),
    ([f"hydra.job.name={ENV_NAME}"], "hydra.job.name: 'a\\nb\\tc'", (SLOW,)),
    (["hydra.output_subdir=/tmp/x"], f"hydra.output_subdir: '/tmp/x' {OUTSIDE} the run directory", ()),
    (["hydra.output_subdir=../../x"], "hydra.output_subdir: '../../x'", (SLOW,)),
    (["--multirun", "hydra.sweep.subdir=../../x"], "hydra.sweep.subdir: '../../x'", ()),
    # ${hydra.job.num} has no value before Hydra runs: the text is checked with the interpolation as 'x'
    (["--multirun", "hydra.sweep.subdir=../../x_${hydra.job.num}"], f"hydra.sweep.subdir: '../../x_${{hydra.job.num}}' {OUTSIDE} the run directory", ()),
    (["--multirun", "hydra.job.name=../${hydra.job.num}"], "hydra.job.name: '../${hydra.job.num}' " + NOT_A_NAME, (SLOW,)),
    (["hydra.run.dir=FX/files/a_file"], "hydra.run.dir: cannot create", ()),
    ([f"hydra.run.dir=FX/{ENV_NAME}"], "hydra.run.dir: 'FX/a\\nb\\tc' contains a control character", ()),
    (["--multirun", "model.name=cbm,../../x"], "model.name: '../../x' is not usable", (SLOW,)),
    (["--multirun", "hydra.job.name=a,../b"], "hydra.job.name: '../b'", (SLOW,)),
    (["data=../model/cbm"], f"data: '../model/cbm' {OUTSIDE} conf/data/", ()),
    (["model=../data/robot"], f"model: '../data/robot' {OUTSIDE} conf/model/", (SLOW,)),
    (["logger=../trainer/default"], "logger: '../trainer/default'", (SLOW,)),
    (["data.concept_set=FX/files/slash.yaml"], "concept name: 'a/b' " + NOT_A_NAME, ()),
    (["data.concept_set=FX/files/dotdot.yaml"], "concept name: '..'", (SLOW,)),
    (["data.concept_set=FX/files/control.yaml"], "concept name: 'a\\x00b'", (SLOW,)),
    (["data.concept_set=FX/files/absolute.yaml"], "concept name: '/tmp/x'", (SLOW,)),
    (["data.concept_set=../../x"], "unknown concept_set '../../x'", ()),
    (["data.concept_set=FX/files/nope/../../x.yaml"], "concept-set file not found", (SLOW,)),
]
INTERVENE = [
    (["checkpoint=FX/run", "policy=[random,../intervener/oracle]"], f"policy: '../intervener/oracle' {OUTSIDE} conf/policy/", ()),
    (["checkpoint=FX/run", "intervener=[oracle,../policy/random]"], "intervener: '../policy/random'", (SLOW,)),
    (["checkpoint=FX/run", "hydra.job.name=.."], "hydra.job.name: '..'", ()),
]
AUTOMATE = [
    (["checkpoint=FX/run", "policy=../intervener/oracle"], f"policy: '../intervener/oracle' {OUTSIDE} conf/policy/", ()),
    (["checkpoint=FX/run", "hydra.output_subdir=../x"], "hydra.output_subdir: '../x'", (SLOW,)),
]
DATA_CLI = [
    (["export", "out=.."], "out: '..' does not name a file (it ends in a directory)", ()),
    (["export", "out=FX/files/"], "does not name a file (it ends in a directory)", ()),
    (["show", "out=."], "out: '.' does not name a file", (SLOW,)),
    (["show", "out=FX/files/x.png/.."], "does not name a file", (SLOW,)),
    (["export", f"out={ENV_NAME}.npz"], "(it contains a control character)", ()),
    (["info", "data.concept_set=FX/files/slash.yaml"], "concept name: 'a/b'", (SLOW,)),
]
ICL = [
    (["~models", "+models={a/b: {model: m}}"], f"models: 'a/b' {NOT_A_NAME}", ()),
    (["~models", "+models={..: {model: m}}"], "models: '..'", (SLOW,)),
    (["~datasets", "+datasets={../x: {kind: robot}}"], "datasets: '../x'", ()),
    (["~datasets", "+datasets={/tmp/x: {kind: robot}}"], "datasets: '/tmp/x'", (SLOW,)),
    (["hydra.job.name=a\\b"], "hydra.job.name: 'a\\\\b'", (SLOW,)),
]
EDCT = [
    (["client@vlm=../data/robot"], f"client@vlm: '../data/robot' {OUTSIDE} conf/client/", ()),
    (["data=../model/cbm"], "data: '../model/cbm'", (SLOW,)),
    (["hydra.output_subdir=/tmp/x"], "hydra.output_subdir: '/tmp/x'", (SLOW,)),
]
FINETUNE = [
    (["finetune=../data/robot"], f"finetune: '../data/robot' {OUTSIDE} conf/finetune/", ()),
    (["logger=../trainer/default"], "logger: '../trainer/default'", (SLOW,)),
    (["hydra.job.name=/tmp/x"], "hydra.job.name: '/tmp/x'", (SLOW,)),
]

CASES = (
    [("cbm-experiment", ["+experiment=concept_noise_smoke", *a], m, k) for a, m, k in EXPERIMENT]
    + [("cbm-experiment", ["+experiment=../data/robot"], f"experiment: '../data/robot' {OUTSIDE} conf/experiment/", ())]
    + [("cbm-train", a, m, k) for a, m, k in TRAIN]
    + [("cbm-intervene", a, m, k) for a, m, k in INTERVENE]
    + [("cbm-automate", a, m, k) for a, m, k in AUTOMATE]
    + [("cbm-data", [a[0], "data.modality=tabular", *a[1:]], m, k) for a, m, k in DATA_CLI]
    + [("cbm-icl", a, m, k) for a, m, k in ICL]
    + [("cbm-edct", a, m, k) for a, m, k in EDCT]
    + [("cbm-finetune", a, m, k) for a, m, k in FINETUNE]
)

#: Concept-set files whose one concept's name is hostile.
CONCEPT_NAMES = {"slash": "a/b", "dotdot": "..", "control": "a\x00b", "absolute": "/tmp/x"}


@pytest.fixture(scope="module")
def pfx(tmp_path_factory) -> Path:
    """A run folder (its checkpoint only has to exist for the precheck), a plain file, and the
    concept sets of :data:`CONCEPT_NAMES`."""
    root = tmp_path_factory.mktemp("bad-paths")
    (root / "run" / "checkpoints").mkdir(parents=True)
    (root / "run" / "checkpoints" / "best.ckpt").write_bytes(b"")
    files = root / "files"
    files.mkdir()
    (files / "a_file").write_text("not a directory\n")
    for stem, name in CONCEPT_NAMES.items():
        doc = {"name": stem, "concepts": [{"name": name, "expr": "knees == 1"}]}
        (files / f"{stem}.yaml").write_text(yaml.safe_dump(doc))
    return root


@pytest.mark.parametrize("prog, args, message", params(CASES))
def test_path_forming_name_is_refused(pfx, tmp_path, prog, args, message):
    assert_refused(pfx, tmp_path, prog, args, message, env={**BAD_ENV, "CBM_CACHE_DIR": str(tmp_path / "cache")})
