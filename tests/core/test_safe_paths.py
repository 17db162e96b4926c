"""Names that become paths (``cbm.core.safe_paths``): the checker, the slug, the containment
guard, and every path-forming name of the code base tried with hostile values.

A *setting* (experiment / setting / model names, ICL model and dataset names, Hydra's job name,
config group choices, registry names, concept names) is refused with one line naming the field;
a *data value* (fine-tuning pair ids, EDCT item ids, ICL episode ids, settings read back from an
experiment manifest) is slugged to a safe name inside the run folder. Either way nothing is
written outside the run folder: the test compares the whole tree around it before and after.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from PIL import Image

from cbm.core.safe_paths import (
    MAX_NAME_BYTES,
    SLUG_MAX_BYTES,
    check_component,
    check_file_path,
    check_hydra_names,
    child,
    inside,
    slug,
    slugs,
)

#: The hostile values every path-forming name is tried with.
BAD = ["..", "../../x", "/tmp/x", "a/b", "a\\b", "a\x00b"]
BAD_IDS = ["dotdot", "up-up", "absolute", "slash", "backslash", "nul"]
#: Values a relative-path field (``hydra.output_subdir``, a nested config group option) may take:
#: they stay inside.
RELATIVE_OK = {"a/b", "a\\b"}
RELATIVE_SITES = {"hydra.output_subdir", "config group choice"}


def tree(root: Path) -> set[Path]:
    return set(root.rglob("*"))


def abs_state() -> tuple[bool, float | None]:
    """Whether ``/tmp/x`` exists (and when it changed), to see that nothing wrote it."""
    p = Path("/tmp/x")
    return (p.exists(), p.stat().st_mtime if p.exists() else None)


# --------------------------------------------------------------------------- the module itself


@pytest.mark.parametrize("value", ["run", "seed0", "robot-n2-k1-r0", "a.b", "_x", "é" * 127, "x" * 255, 7])
def test_check_component_accepts_plain_names(value):
    assert check_component(value, "field") == str(value)


@pytest.mark.parametrize(
    "value, why",
    [("", "empty"), (".", "directory"), ("..", "directory"), ("../../x", "separator"), ("/tmp/x", "separator"),
     ("a/b", "separator"), ("a\\b", "separator"), ("a\x00b", "control"), ("a\nb", "control"), ("a\x7fb", "control"),
     ("C:x", "absolute"), ("x" * 256, "255 bytes"), ("é" * 128, "255 bytes"), (None, "empty")],
)  # fmt: skip
def test_check_component_refuses_with_one_line_naming_field_and_value(value, why):
    with pytest.raises(ValueError) as err:
        check_component(value, "experiment.name")
    msg = str(err.value)
    assert msg.startswith("experiment.name: ") and why in msg and "\n" not in msg and "\x00" not in msg


@pytest.mark.parametrize("value", [*BAD, "", ".", "a\nb", "C:\\x", "ü/ü", "x" * 400, "a~b", ".hidden"])
def test_slug_is_a_safe_deterministic_component(value):
    s = slug(value)
    assert check_component(s, "slug") == s and s == slug(value) and len(s.encode()) <= SLUG_MAX_BYTES
    assert not s.startswith(".")


@pytest.mark.parametrize("value", ["p3", "robot00001-knees", "board00003-r2c5-row_valid", "robot-test-00017", "a.b"])
def test_slug_keeps_safe_values(value):
    assert slug(value) == value


def test_slugs_of_distinct_values_differ_and_collisions_are_refused():
    values = ["a/b", "a_b", "a\\b", "a b", "a\x00b", "a~b", "..", "_.._"]
    got = slugs(values, "pair_id")
    assert len(set(got.values())) == len(values)
    assert slugs(["x", "x", "y"], "ids") == {"x": "x", "y": "y"}  # a repeated value is one entry
    with pytest.raises(ValueError, match="pair_id: 1 and '1' map to the same file name '1'"):
        slugs([1, "1"], "pair_id")


def test_inside_follows_symlinks_and_dotdot(tmp_path):
    root = tmp_path / "run"
    (root / "sub").mkdir(parents=True)
    assert inside(root, root / "sub" / "f.png", "x") == root / "sub" / "f.png"
    assert inside(root, root / "new" / ".." / "f", "x") == root / "new" / ".." / "f"  # still inside
    with pytest.raises(ValueError, match="heatmap: .* leads outside"):
        inside(root, root / ".." / "x", "heatmap")
    with pytest.raises(ValueError, match="leads outside"):
        inside(root, "/tmp/x", "heatmap")
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", root / "link")
    with pytest.raises(ValueError, match="leads outside"):
        inside(root, root / "link" / "f.png", "heatmap")  # a symlink out of the run folder
    assert child(root, "f.png", "x") == root / "f.png"
    with pytest.raises(ValueError, match="name: '..'"):
        child(root, "..", "name")


@pytest.mark.parametrize("value", ["x.npz", "/tmp/x.npz", "a/b.png", "../x.png", Path("d/e.npz")])
def test_check_file_path_takes_any_file_path(value):
    assert check_file_path(value, "out") == Path(value)


@pytest.mark.parametrize("value", ["", ".", "..", "a/", "a/..", "/", "a\x00b.npz", "a\nb.npz", "x" * 300 + ".npz"])
def test_check_file_path_refuses_what_is_not_a_file_name(value):
    with pytest.raises(ValueError, match="^out: "):
        check_file_path(value, "out")


# --------------------------------------------------------------------------- every path-forming setting


def experiment_name(run: Path, bad: str) -> None:
    from cbm.config.experiment import validate

    validate({"name": bad, "output_dir": str(run), "settings": {"s": []}, "models": {"m": []}})


def experiment_setting(run: Path, bad: str) -> None:
    from cbm.config.experiment import validate

    validate({"name": "e", "output_dir": str(run), "settings": {bad: []}, "models": {"m": []}})


def experiment_model(run: Path, bad: str) -> None:
    from cbm.config.experiment import validate

    validate({"name": "e", "output_dir": str(run), "settings": {"s": []}, "models": {bad: ["model=cbm"]}})


def _icl(run: Path, models: dict | None = None, datasets: dict | None = None) -> None:
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from cbm.core.cli import compose_plain
    from cbm.vlm.icl.config import ICLConfig

    cfg = compose_plain("icl", [f"output_dir={run}"])
    GlobalHydra.instance().clear()
    raw = OmegaConf.to_container(OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]), resolve=True)
    raw["models"] = models or raw["models"]
    raw["datasets"] = datasets or raw["datasets"]
    ICLConfig(**raw)


def icl_model(run: Path, bad: str) -> None:
    _icl(run, models={bad: {"model": "m"}})


def icl_dataset(run: Path, bad: str) -> None:
    _icl(run, datasets={bad: {"kind": "robot"}})


def hydra_job_name(run: Path, bad: str) -> None:
    from omegaconf import OmegaConf

    check_hydra_names(OmegaConf.create({"hydra": {"job": {"name": bad}}}))


def hydra_output_subdir(run: Path, bad: str) -> None:
    from omegaconf import OmegaConf

    check_hydra_names(OmegaConf.create({"hydra": {"output_subdir": bad}}))


def test_run_and_sweep_directories_go_anywhere_but_have_no_control_characters():
    from omegaconf import OmegaConf

    check_hydra_names(OmegaConf.create({"hydra": {"run": {"dir": "/anywhere/../at/all"}, "sweep": {"dir": "../x"}}}))
    for key in ("run", "sweep"):
        with pytest.raises(ValueError, match=f"^hydra.{key}.dir: 'out/a\\\\nb' contains a control character$"):
            check_hydra_names(OmegaConf.create({"hydra": {key: {"dir": "out/a\nb"}}}))


def test_check_creatable_names_the_file_in_the_way_or_the_read_only_folder(tmp_path):
    from cbm.core.safe_paths import check_creatable, existing_ancestor

    (tmp_path / "a_file").write_text("x")
    assert existing_ancestor(tmp_path / "new" / "deeper") == tmp_path
    assert existing_ancestor(tmp_path / "a_file" / "run") == tmp_path / "a_file"
    check_creatable(tmp_path / "new" / "deeper", "out")
    with pytest.raises(ValueError, match=f"^out: cannot create {tmp_path}/a_file/run: {tmp_path}/a_file is a file, not a directory$"):
        check_creatable(tmp_path / "a_file" / "run", "out")
    (tmp_path / "ro").mkdir(mode=0o555)
    if os.access(tmp_path / "ro", os.W_OK):  # root writes anywhere
        return
    with pytest.raises(ValueError, match=f"^out: cannot create {tmp_path}/ro/run: {tmp_path}/ro is not writable$"):
        check_creatable(tmp_path / "ro" / "run", "out")


@pytest.mark.parametrize("key, raw, ok", [
    ("sweep.subdir", "${hydra.job.num}", True),  # Hydra's default
    ("sweep.subdir", "x_${hydra.job.num}/y", True),
    ("job.name", "..${hydra.job.num}", True),  # becomes '..0': a plain name
    ("sweep.subdir", "../../x_${hydra.job.num}", False),
    ("output_subdir", "/${hydra.job.num}", False),
    ("job.name", "../${oc.env:HOME,${hydra.job.num}}", False),
])  # fmt: skip
def test_names_that_resolve_only_when_hydra_runs_are_checked_as_written(key, raw, ok):
    """``${hydra.job.num}`` has no value before Hydra runs: the text is checked with each
    interpolation as ``x``, and a refusal shows it as written."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"hydra": {"job": {"num": "???"}}})
    OmegaConf.update(cfg, f"hydra.{key}", raw, merge=False)
    if ok:
        check_hydra_names(cfg)
    else:
        with pytest.raises(ValueError, match=re.escape(f"hydra.{key}: {raw!r}")):
            check_hydra_names(cfg)


def hydra_group_choice(run: Path, bad: str) -> None:
    from omegaconf import OmegaConf

    check_hydra_names(OmegaConf.create({"hydra": {"runtime": {"choices": {"experiment": bad}}}}))


def registry_name(run: Path, bad: str) -> None:
    from cbm.interventions import registry

    registry.defaults("policy", bad)


def concept_name(run: Path, bad: str) -> None:
    from synthetic.robot.concepts import load_concept_set

    f = run.parent / "set.yaml"
    f.write_text(yaml.safe_dump({"name": "s", "concepts": [{"name": bad, "expr": "knees == 1"}]}))
    try:
        load_concept_set(str(f))
    finally:
        f.unlink()


SETTINGS = {
    "experiment.name": (experiment_name, "name: "),
    "experiment.settings": (experiment_setting, "settings: "),
    "experiment.models": (experiment_model, "models: "),
    "icl.models": (icl_model, "models: "),
    "icl.datasets": (icl_dataset, "datasets: "),
    "hydra.job.name": (hydra_job_name, "hydra.job.name: "),
    "hydra.output_subdir": (hydra_output_subdir, "hydra.output_subdir: "),
    "config group choice": (hydra_group_choice, "experiment: "),
    "registry name": (registry_name, "policy: "),
    "concept name": (concept_name, "concept name: "),
}


@pytest.mark.parametrize("bad", BAD, ids=BAD_IDS)
@pytest.mark.parametrize("site", list(SETTINGS))
def test_every_path_forming_setting_is_refused(tmp_path, site, bad):
    fn, field = SETTINGS[site]
    run = tmp_path / "outer" / "mid" / "run"
    run.mkdir(parents=True)
    before, before_abs = tree(tmp_path), abs_state()
    if site in RELATIVE_SITES and bad in RELATIVE_OK:
        fn(run, bad)  # a relative path inside the run directory: fine
    else:
        with pytest.raises(ValueError) as err:
            fn(run, bad)
        msg = str(err.value)
        assert field in msg and "\n" not in msg, msg
    assert tree(tmp_path) == before and abs_state() == before_abs


# --------------------------------------------------------------------------- every path-forming data value


def _fake_model(root: Path) -> Path:
    m = root / "model"
    m.mkdir()
    (m / "config.json").write_text(json.dumps({"model_type": "qwen2_vl"}))
    (m / "model.safetensors").write_bytes(b"")
    return m


def finetune_heatmaps(run: Path, bad: str) -> None:
    """``cbm-finetune``'s report draws heatmaps named by the rows' ``pair_id``."""
    from cbm.vlm.finetune.config import FinetuneConfig
    from cbm.vlm.finetune.data import QARow
    from cbm.vlm.finetune.evaluate import RowResult
    from cbm.vlm.finetune.run import report

    img = run / "img.png"
    Image.new("RGB", (8, 8)).save(img)
    cfg = FinetuneConfig(output_dir=str(run), model={"path": str(_fake_model(run))}, eval={"heatmaps": 2}, progress=False)
    splits = ("original", "counterfactual")
    rows = [QARow(str(img), "q", "a", s, bad) for s in splits]
    after = [RowResult(bad, s, 0.1, True, "a", 0.5, np.ones((2, 2))) for s in splits]
    report(cfg, run, rows, None, after, [0.1], [], {}, 1, 2, 2)
    assert len(list((run / "heatmaps").glob("*.png"))) == 2


def edct_item(run: Path, bad: str) -> None:
    """``cbm-edct`` keeps each item in ``items/<item id>/``."""
    from cbm.vlm.edct.pipeline import Pipeline
    from cbm.vlm.editors.base import EditItem

    p = object.__new__(Pipeline)
    p.root, p.cfg, p.label_of = run / "items", SimpleNamespace(question="q"), None
    p.ask_vlm = lambda image, options, question=None: {"answer": None, "explanation": None, "reply": "", "errors": []}
    rec = p.run_item(bad, EditItem(Image.new("RGB", (4, 4)), None, "image"), ["a", "b"])
    assert rec["id"] == bad and rec["status"] == "baseline_unparsed"
    assert len(list((run / "items").glob("*/record.json"))) == 1


def icl_episode(run: Path, bad: str) -> None:
    """``cbm-icl`` keeps each trial in ``records/<model>/<dataset>/<condition>/<episode id>.json``;
    the episode id comes from the episodes file."""
    from cbm.vlm.icl.episodes import Episode
    from cbm.vlm.icl.run import Study, Trial

    study = object.__new__(Study)
    study.out = run
    study._save(Trial("vlm", "robot", "E1", Episode(bad, 2, 1, 0, ("a", "b"), ("1", "2"), (), ())), {"status": "answered"})
    assert len(list((run / "records" / "vlm" / "robot" / "E1").glob("*.json"))) == 1


def report_setting(run: Path, bad: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``cbm-report`` draws a figure per setting named in the experiment's manifest."""
    from cbm.experiments import figures
    from cbm.experiments.report import write_experiment_report

    def draw(cells, setting, path):  # what savefig would write, where it would write it
        Path(path).write_bytes(b"png")
        return Path(path)

    monkeypatch.setattr(figures, "accuracy_vs_k", draw)
    monkeypatch.setattr(figures, "automation_figure", draw)
    cells = [{"key": "k", "setting": bad, "model": "cbm", "seed": 0, "stage": "train", "status": "failed", "note": "", "dir": "x"}]
    (run / "experiment.json").write_text(json.dumps({"name": "e", "cells": cells, "config": {}}))
    write_experiment_report(run)
    assert len(list((run / "figures").glob("*.png"))) == 2


DATA = {"finetune pair_id": finetune_heatmaps, "edct item id": edct_item, "icl episode id": icl_episode, "report setting": report_setting}


@pytest.mark.parametrize("bad", BAD, ids=BAD_IDS)
@pytest.mark.parametrize("site", list(DATA))
def test_every_path_forming_data_value_is_slugged_inside_the_run_folder(tmp_path, monkeypatch, site, bad):
    run = tmp_path / "outer" / "mid" / "run"
    run.mkdir(parents=True)
    before, before_abs = tree(tmp_path), abs_state()
    fn = DATA[site]
    fn(run, bad, monkeypatch) if site == "report setting" else fn(run, bad)
    new = tree(tmp_path) - before
    assert new and all(run in p.parents for p in new), sorted(new)  # everything new is in the run folder
    assert all(check_component(p.name, "name") for p in new)
    assert tree(tmp_path) >= before and abs_state() == before_abs


@pytest.mark.parametrize(
    "value, message",
    [("..", "out: '..' does not name a file"), (".", "out: "), ("d/", "out: 'd/' does not name a file"),
     ("a\x00b.npz", "config: ")],  # a NUL: Hydra's override lexer refuses it first
    ids=["dotdot", "dot", "dir", "nul"],
)  # fmt: skip
def test_cbm_data_out_is_a_file_path_checked_before_the_data_is_made(tmp_path, capsys, value, message):
    """``out=`` is a path the user chose (anywhere), so only what is not a file name is refused."""
    from cbm.experiments.data_cli import run

    with pytest.raises(SystemExit):
        run(["export", "data.modality=tabular", f"out={value}", f"cache_dir={tmp_path / 'cache'}"])
    assert f"cbm-data: error: {message}" in capsys.readouterr().err
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize(
    "override",
    ["hydra.run.dir={tmp}/../elsewhere/run", "hydra.run.dir=/tmp/cbm-anywhere/run", "hydra.job.name=my_job",
     "hydra.output_subdir=null", "hydra.output_subdir=meta/cfg", "hydra.sweep.subdir=sub/x", "data=robot_paper"],
)  # fmt: skip
def test_explicit_run_directories_and_plain_names_are_allowed(tmp_path, override):
    """A run or sweep directory is a path the user chose: anywhere is fine (as is a relative
    ``.hydra`` subfolder); only names that would leave it are refused."""
    from cbm.core.cli import precheck
    from cbm.experiments.train import validate

    before = tree(tmp_path)
    precheck("train", [override.format(tmp=tmp_path), "logger=csv_only"], validate)
    assert tree(tmp_path) == before and not Path("/tmp/cbm-anywhere").exists()


# --------------------------------------------------------------------------- end to end


def cli(prog: str, args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / prog
    return subprocess.run([str(exe), *args], cwd=cwd, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONWARNINGS": "ignore", **env})  # fmt: skip


@pytest.mark.parametrize("name", ["../../x", "..", "/tmp/x", "a\\b"])
def test_cbm_experiment_name_cannot_leave_experiments(tmp_path, name):
    cwd = tmp_path / "a" / "b"
    cwd.mkdir(parents=True)
    before, before_abs = tree(tmp_path), abs_state()
    res = cli("cbm-experiment", ["+experiment=concept_noise_smoke", f"name={name}"], cwd, CBM_CACHE_DIR=str(tmp_path / "cache"))
    assert res.returncode == 2, res.stderr
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("cbm-experiment: error: ") and "name: " in err[0], res.stderr
    assert repr(name) in err[0]
    assert tree(tmp_path) == before and abs_state() == before_abs


@pytest.mark.slow
def test_cbm_finetune_pair_ids_never_write_outside_the_run(tmp_path):
    """A JSONL whose ``pair_id`` climbs out (``../../../X/p3``), is absolute, has a NUL or a
    backslash: the run trains, every heatmap lands in ``<run>/heatmaps`` under a slugged name."""
    from cbm.vlm.tiny import TinyVLMConfig, build_tiny_vlm

    tiny = build_tiny_vlm(tmp_path / "tiny", TinyVLMConfig(image_px=112))
    data = tmp_path / "data"
    data.mkdir()
    ids = ["../../../X/p3", "/tmp/x", "a\\b", "a\x00b", "..", "ok"]
    mask = np.zeros((64, 64), np.uint8)
    mask[16:48, 16:48] = 255
    Image.fromarray(mask).save(data / "mask.png")  # a mask: the rows get attention maps, hence heatmaps
    lines = []
    for i, pid in enumerate(ids):
        for split, colour in (("original", (200, 30, 30)), ("counterfactual", (30, 30, 200))):
            img = data / f"{i}-{split}.png"
            Image.new("RGB", (64, 64), colour).save(img)
            lines.append(json.dumps({"image": img.name, "question": "Which colour?", "answer": "red" if split == "original" else "blue",
                                     "split": split, "pair_id": pid, "mask": "mask.png"}))  # fmt: skip
    (data / "pairs.jsonl").write_text("\n".join(lines) + "\n")
    run = tmp_path / "work" / "runs" / "run"
    run.parent.mkdir(parents=True)
    before, before_abs = tree(tmp_path), abs_state()
    res = cli("cbm-finetune", [f"model.path={tiny}", f"data.jsonl={data / 'pairs.jsonl'}", "data.eval_fraction=0.8", "train.epochs=1",
                               "eval.heatmaps=100", "logger=csv_only", f"hydra.run.dir={run}", "progress=false"], tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    new = tree(tmp_path) - before
    outside = sorted(p for p in new if p != run and run not in p.parents)
    assert not outside, outside
    assert not (tmp_path / "X").exists() and abs_state() == before_abs
    maps = sorted(p.name for p in (run / "heatmaps").glob("*.png"))
    assert len(maps) == 4 * 5  # five pairs held out: original and counterfactual, before and after
    assert all(check_component(m, "heatmap") for m in maps)
    assert all(any(m.startswith(f"{slug(p)}-") for p in ids) for m in maps)


def test_max_name_bytes_is_what_file_systems_take():
    assert MAX_NAME_BYTES == 255
