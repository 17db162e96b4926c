"""The bad-input corpus of ``cbm-experiment`` and of ``cbm-train``'s sizes and epochs (harness:
``badinput.py``; ``device=cuda`` of cbm-intervene / cbm-automate too): unknown presets, bad seeds / jobs / stage overrides / settings, user presets with
YAML errors reached through ``--config-dir`` and ``hydra.searchpath``, datasets larger than this
machine, absurd epoch counts, and a run directory another live process holds. Each is one line,
exit 2, nothing left behind.

``FX`` is this module's own small fixture (no trained model): user presets under ``FX/conf``, a
killed-run stand-in for ``resume=``, an experiment whose cell was run with other settings, and ``FX/locked``, a directory whose lock a background process
holds for the module's lifetime. Most cases use the one-cell ``tiny`` preset, so each costs a
process start and one cell's validation.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from badinput import SLOW, assert_refused, params
from omegaconf import OmegaConf

TINY = ["--config-dir", "FX/conf", "+experiment=tiny"]
#: Cases that are refusals only on a machine without a CUDA GPU.
NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="refused only without a CUDA GPU")
#: Lower bounds are reported for memory and disk alike; which one is short depends on the machine.
TOO_BIG = "need at least"

PRESETS = {
    "tiny": """\
        # @package _global_
        name: tiny
        settings:
          tab: [data.modality=tabular, data.n_train=300, data.n_calib=100, data.n_test=100]
        models:
          cbm: [model=cbm]
        blackbox: null
        train: [trainer=cpu_smoke, logger=csv_only]
        intervene: {intervener: [oracle], policy: [random], ks: [0, max]}
        automate: {ks: [0], target_accuracy: 0.9}
        """,
    "malformed": "# @package _global_\nname: malformed\nsettings: {a: [x\n",
    "tabs": "# @package _global_\nname: tabs\nsettings:\n\t- a\n",
    "list": "# @package _global_\n- a\n- b\n",
    "nopkg": "name: nopkg\nsettings: {a: [data.modality=tabular]}\nmodels: {cbm: [model=cbm]}\n",
    "scalar": "just a string\n",
    "empty": "",
    "badtype": "# @package _global_\nname: badtype\nsettings: [1, 2]\nmodels: {cbm: [model=cbm]}\n",
    "unknown": "# @package _global_\nname: unknown\nfrobnicate: 1\nsettings: {a: []}\nmodels: {cbm: [model=cbm]}\n",
    "huge": "# @package _global_\nname: huge\nsettings: {a: [data.n_train=100000000000]}\nmodels: {cbm: [model=cbm]}\n",
    "epochs": "# @package _global_\nname: epochs\nsettings: {a: [data.modality=tabular]}\nmodels: {cbm: [model=cbm]}\ntrain: [trainer.max_epochs=100000000]\n",
    "noseeds": "# @package _global_\nname: noseeds\nseeds: 0\nsettings: {a: [data.modality=tabular]}\nmodels: {cbm: [model=cbm]}\n",
    "badstage": "# @package _global_\nname: badstage\nsettings: {a: [data.modality=tabular]}\nmodels: {cbm: [model=cbm, model.training=magic]}\n",
}

EXPERIMENT = [
    # presets
    ([], "no experiment chosen: cbm-experiment +experiment=<name>", ()),
    (["+experiment=nope"], "config: unknown experiment 'nope' (choose from: alignment", ()),
    (["experiment=alignment"], "experiment", ()),
    (["+experiment=paper_v04_sudoku", "automate.method=plug"], "automate.method must be one of ('empirical', 'plugin', 'sgr', 'ltt'), got 'plug'", ()),
    (["+experiment=alignment", "+experiment=tiny"], "experiment", (SLOW,)),
    # seeds and jobs
    ([*TINY, "seeds=[]"], "seeds must be a count (seeds=10) or distinct integers >= 0 ('seeds=[0,1,2]'), got []", ()),
    ([*TINY, "seeds=[0,0]"], "distinct integers >= 0 ('seeds=[0,1,2]'), got [0, 0]", ()),
    ([*TINY, "seeds=[-1]"], "distinct integers >= 0", (SLOW,)),
    ([*TINY, "seeds=0"], "seeds: a count must be >= 1 (seeds=10 runs seeds 0..9), got 0", ()),
    ([*TINY, "seeds=-3"], "seeds: a count must be >= 1", (SLOW,)),
    ([*TINY, "seeds=true"], "seeds must be a count", (SLOW,)),
    ([*TINY, "seeds=2.5"], "seeds must be a count", (SLOW,)),
    # paired comparisons
    ([*TINY, "compare.models=[[cbm,nope]]"], "compare.models: unknown ['nope'] (the experiment has ['cbm'])", ()),
    ([*TINY, "compare.models=[[cbm,cbm]]"], "compare.models: each entry is a pair of two different names", (SLOW,)),
    ([*TINY, "compare.policies=[[random]]"], "compare.policies: each entry is a pair of two different names", (SLOW,)),
    ([*TINY, "compare.policies=[[random,psychic]]"], "compare.policies: unknown ['psychic']", (SLOW,)),
    ([*TINY, "compare=5"], "int is not a subclass of Compare", (SLOW,)),
    ([*TINY, "+compare.pairs=[]"], "pairs", (SLOW,)),
    ([*TINY, "seeds=abc"], "seeds", (SLOW,)),
    ([*TINY, "seeds=[a]"], "seeds", (SLOW,)),
    ([*TINY, "seeds=[0,1"], "bad override", (SLOW,)),
    ([*TINY, "jobs=0"], "jobs must be >= 1, got 0", ()),
    ([*TINY, "jobs=-2"], "jobs must be >= 1", (SLOW,)),
    ([*TINY, "jobs=two"], "jobs", (SLOW,)),
    ([*TINY, "launcher=thread"], "launcher must be one of ['fork', 'spawn'], got 'thread'", ()),
    ([*TINY, "launcher=[fork]"], "launcher", ()),
    ([*TINY, "jobs=1.5"], "jobs", (SLOW,)),
    # the training cells' overrides
    ([*TINY, "train=[trainer.max_epochs=0]"], "tab/cbm (train): config: trainer.max_epochs must be >= 1", ()),
    ([*TINY, "train=[trainer.max_epochs=1e23]"], "could not be converted to Integer (key: trainer.max_epochs)", (SLOW,)),
    ([*TINY, "train=[trainer.max_epochs=10000000]"], "trainer.max_epochs must be <= 1,000,000", ()),
    ([*TINY, "train=[trainer.max_epochs=2.5]"], "trainer.max_epochs", (SLOW,)),
    ([*TINY, "models.cbm=[model=nope]"], "tab/cbm (train): config: unknown model 'nope'", ()),
    ([*TINY, "train=[nope=1]"], "unknown key 'nope'", (SLOW,)),
    ([*TINY, "train=[trainer.max_epochs=20"], "bad override", (SLOW,)),
    ([*TINY, "train=[batch_size=0]"], "batch_size", (SLOW,)),
    ([*TINY, "train=[data_storage=tape]"], "data_storage must be", (SLOW,)),
    # every override of every list checked on its own, also one a later list replaces or the selection leaves out
    (["+experiment=alignment_smoke", "train=[model=cbmm]"], "paper/blackbox (train; model=cbmm, replaced by a later override): config: unknown model 'cbmm' (choose from: blackbox,", ()),
    ([*TINY, "train=[model=cbmm]"], "tab/cbm (train; model=cbmm, replaced by a later override): config: unknown model 'cbmm'", ()),
    ([*TINY, "settings.tab=[data=robt]", "train=[data=robot,data.modality=tabular]"], "tab/cbm (train; data=robt, replaced by a later override): config: unknown data 'robt'", ()),
    ([*TINY, "train=[trainer.max_epochs=0]", "models.cbm=[model=cbm,trainer.max_epochs=1]"],
     "tab/cbm (train; trainer.max_epochs=0, replaced by a later override): config: trainer.max_epochs must be >= 1, got 0", ()),
    ([*TINY, "train=[data.n_train=-5]", "models.cbm=[model=cbm,data.n_train=300]"], "(train; data.n_train=-5, replaced by a later override): ", (SLOW,)),
    (["+experiment=alignment_smoke", "settings.easy=[data=robt]"], "easy/blackbox (train): config: unknown data 'robt'", ()),
    (["+experiment=paper_v04_sudoku_smoke", "+cost_models.free={box1: 0}"], "cost_models.free.box1 must be a finite number > 0, got 0", ()),
    (["+experiment=paper_v04_sudoku_smoke", "+cost_models.flat=3"], "incompatible with type hint 'typing.Dict[str, typing.Any]' (key: cost_models.flat)", ()),
    ([*TINY, "+models.bb=[model=blackbox,trainer.max_epoch=3]", "select.models=[cbm]"], "bb (train): config: unknown key 'trainer.max_epoch'", (SLOW,)),
    # settings and models
    ([*TINY, "~settings"], "settings: the experiment needs at least one entry", ()),
    ([*TINY, "settings.tab=[data=nope]"], "tab/cbm (train): config: unknown data 'nope'", (SLOW,)),
    ([*TINY, "settings.tab=[data.modality=audio]"], "modality", (SLOW,)),
    ([*TINY, "settings.tab=[data.n_train=100000000000]"], TOO_BIG, ()),
    ([*TINY, "settings.tab=[data.n_train=100000000000,data.modality=tabular]"], "100,000,012,000 robots (tabular", (SLOW,)),
    ([*TINY, "settings.tab=[data=sudoku,data.n_train=1000000000]"], "boards (28 px cells, data_storage=memory) need at least", (SLOW,)),
    ([*TINY, "settings.tab=[data.image_size=1024,data.n_train=10000000]", "train=[data_storage=disk]"], TOO_BIG, (SLOW,)),
    ([*TINY, "settings.tab=[data.n_train=1e14]"], "could not be converted to Integer (key: n_train)", ()),
    ([*TINY, "models.cbm=[model=cbm,model.training=magic]"], "model.training must be one of", (SLOW,)),
    ([*TINY, "~models"], "models: the experiment needs at least one entry", (SLOW,)),
    ([*TINY, "select.models=[cnn]"], "select.models: unknown ['cnn'] (the preset has ['cbm'])", ()),
    ([*TINY, "select.settings=[]"], "select: nothing left to run", (SLOW,)),
    # the analysis stages
    ([*TINY, "intervene.ks=[-1]"], "intervene.ks entries must be integers >= 0 or 'max', got -1", ()),
    ([*TINY, "intervene.ks=[0,max,max]"], "intervene.ks lists the budget 'max' twice, got [0, 'max', 'max'] (each budget once)", ()),
    ([*TINY, "automate.ks=[0,0]"], "automate.ks lists the budget 0 twice", ()),
    ([*TINY, "intervene.policy=[psychic]"], "tab/cbm (intervene): config: unknown policy 'psychic'", ()),
    ([*TINY, "intervene.intervener=[]"], "intervene: needs at least one intervener and one policy", (SLOW,)),
    ([*TINY, "+intervene.overrides=[intervener.oracle.nope=1]"], "tab/cbm (intervene): config: unknown key", (SLOW,)),
    ([*TINY, "automate.target_accuracy=2"], "automate.target_accuracy must be in (0, 1], got 2", (SLOW,)),
    ([*TINY, "+automate.method=magic"], "automate.method must be one of", (SLOW,)),
    ([*TINY, "automate.method=sgr"], "unknown key 'automate.method' (automate has: ks, target_accuracy; a key it does not set yet is added with '+automate.method=...')", ()),
    ([*TINY, "+automate.overrides=[delta=5]"], "tab/cbm (automate): ", (SLOW,)),
    ([*TINY, "+intervene.overrides=[device=cuda]"], "tab/cbm (intervene): device=cuda but no CUDA device is available", (NO_GPU,)),
    ([*TINY, "train=[trainer.accelerator=gpu]"], "tab/cbm (train): trainer.accelerator=gpu but no CUDA GPU is available", (NO_GPU, SLOW)),
    # top-level settings and directories
    ([*TINY, "wandb=maybe"], "wandb", (SLOW,)),
    ([*TINY, "wandb_settings.mode=sometimes"], "mode must be offline, online or disabled", ()),
    ([*TINY, "wandb_settings.project=a/b"], "project must be a plain name", ()),
    ([*TINY, "wandb_settings.entity=a/b"], "logger.wandb.entity must be a plain name", ()),
    ([*TINY, f"wandb_settings.tags=[{'t' * 65}]"], "logger.wandb.tags: a tag must be 1 to 64 characters (W&B's limit), got 65", ()),
    ([*TINY, "frobnicate=1"], "unknown key 'frobnicate'", ()),
    ([*TINY, "output_dir=FX/files/a_file/exp"], "hydra.run.dir: cannot create", ()),
    ([*TINY, "cache_dir=FX/files/a_file"], "cache_dir: cannot create FX/files/a_file: FX/files/a_file is a file, not a directory", ()),
    ([*TINY, "output_dir=FX/locked"], "FX/locked is in use by pid ", ()),
    ([*TINY, "output_dir=FX/changed"], "1 cell(s) in FX/changed were run with other settings (e.g. tab/cbm/seed0/train): delete them", ()),
    ([*TINY, "hydra.run.dir=FX/locked"], "FX/locked is in use by pid ", (SLOW,)),
    # user presets through --config-dir / hydra.searchpath
    (["--config-dir", "FX/conf", "+experiment=malformed"], "FX/conf/experiment/malformed.yaml: not valid YAML at line 4", ()),
    (["-cd", "FX/conf", "+experiment=tabs"], "FX/conf/experiment/tabs.yaml: not valid YAML at line", (SLOW,)),
    (["hydra.searchpath=[file://FX/conf]", "+experiment=malformed"], "malformed.yaml: not valid YAML", ()),
    (["--config-dir=FX/conf", "+experiment=list"], "config: experiment/list: a list where the config has a mapping", ()),
    (["--config-dir", "FX/conf", "+experiment=nopkg"], "experiment: the preset was not merged into the config: a preset is a YAML mapping of settings whose first line is '# @package _global_'", ()),
    (["--config-dir", "FX/conf", "+experiment=scalar"], "the preset was not merged", (SLOW,)),
    (["--config-dir", "FX/conf", "+experiment=empty"], "experiment", (SLOW,)),
    (["--config-dir", "FX/conf", "+experiment=badtype"], "config: experiment/badtype: a list where the config has a mapping", ()),
    (["--config-dir", "FX/conf", "+experiment=unknown"], "frobnicate", (SLOW,)),
    (["--config-dir", "FX/conf", "+experiment=huge"], "a/cbm (train): data: 100,000,012,000 robots", ()),
    (["--config-dir", "FX/conf", "+experiment=epochs"], "trainer.max_epochs must be <= 1,000,000", (SLOW,)),
    (["--config-dir", "FX/conf", "+experiment=noseeds"], "seeds", (SLOW,)),
    (["--config-dir", "FX/conf", "+experiment=badstage"], "a/cbm (train): model: model.training must be one of", (SLOW,)),
    (["--config-dir", "FX/conf", "+experiment=missing"], "unknown experiment 'missing' (choose from:", ()),
    (["--config-dir", "FX/nowhere", "+experiment=tiny"], "--config-dir: FX/nowhere is not a directory", ()),
    (["--config-dir", "FX/files/a_file", "+experiment=tiny"], "--config-dir: FX/files/a_file is not a directory", (SLOW,)),
]

TRAIN = [
    (["data.n_train=100000000000"], "100,000,012,000 robots (32 px images, data_storage=memory) need at least", ()),
    (["data.n_train=100000000000", "data.modality=text"], "robots (text, data_storage=memory) need at least", (SLOW,)),
    (["data.n_train=100000000000", "data_storage=render"], "(32 px images, data_storage=render) need at least", (SLOW,)),
    (["data.n_train=100000000000", "data_storage=disk"], "(32 px images, data_storage=disk) need at least", (SLOW,)),
    (["data.renders_per_robot=100000000"], "renders (32 px images", (SLOW,)),
    (["data=sudoku", "data.n_train=1000000000"], "boards (28 px cells, data_storage=memory) need at least", ()),
    (["data=sudoku", "data.n_test=1000000000", "data.modality=tabular"], "boards (tabular, data_storage=memory)", (SLOW,)),
    (["data=sudoku", "data.n_train=1000000000", "data_storage=disk"], "data_storage=disk) need at least", (SLOW,)),
    (["data.image_size=1024", "data.n_train=10000000", "data_storage=disk"], TOO_BIG, (SLOW,)),
    (["data.n_train=1e14"], "could not be converted to Integer (key: n_train)", (SLOW,)),
    (["trainer.max_epochs=1e23"], "could not be converted to Integer (key: trainer.max_epochs)", ()),
    (["trainer.max_epochs=10000000"], "trainer.max_epochs must be <= 1,000,000 (more than any run could finish)", ()),
    (["trainer.max_epochs=2.5"], "trainer.max_epochs", (SLOW,)),
    (["hydra.run.dir=FX/locked"], "FX/locked is in use by pid ", ()),
    (["--config-dir", "FX/nowhere"], "--config-dir: FX/nowhere is not a directory", ()),
    (["resume=FX/killed", "trainer.max_epochs=10000000"], "trainer.max_epochs must be <= 1,000,000", ()),
    (["resume=FX/killed", "trainer.max_epochs=1e23"], "max_epochs", (SLOW,)),
    (["resume=FX/locked"], "FX/locked is in use by pid ", ()),
    (["trainer=gpu", "data.modality=tabular"], "trainer.accelerator=gpu but no CUDA GPU is available", (NO_GPU,)),
]
#: ``device=cuda`` of the evaluation commands is refused before any data is made.
EVALUATE = [
    ("cbm-intervene", ["checkpoint=FX/killed", "device=cuda"], "device=cuda but no CUDA device is available", (NO_GPU,)),
    ("cbm-automate", ["checkpoint=FX/killed", "device=cuda"], "device=cuda but no CUDA device is available", (NO_GPU, SLOW)),
]

CASES = [("cbm-experiment", a, m, k) for a, m, k in EXPERIMENT] + [("cbm-train", a, m, k) for a, m, k in TRAIN] + EVALUATE


@pytest.fixture(scope="module")
def fx(tmp_path_factory):
    """User presets (``FX/conf/experiment/``), a plain file, a killed-run stand-in (config and an
    empty last.ckpt: ``resume=`` validates before loading it) and ``FX/locked``, held by a live
    process until the module ends."""
    import textwrap

    from cbm.core.cli import compose_plain

    root = tmp_path_factory.mktemp("bad-experiment")
    conf = root / "conf" / "experiment"
    conf.mkdir(parents=True)
    for name, text in PRESETS.items():
        (conf / f"{name}.yaml").write_text(textwrap.dedent(text))
    (root / "files").mkdir()
    (root / "files" / "a_file").write_text("not a directory\n")
    (root / "cache").mkdir()
    killed = root / "killed"
    (killed / "checkpoints").mkdir(parents=True)
    (killed / "checkpoints" / "last.ckpt").write_bytes(b"")
    cfg = compose_plain("train", ["data.modality=tabular", f"hydra.run.dir={killed}"])
    job = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
    OmegaConf.update(job, "output_dir", str(killed))
    (killed / "config.yaml").write_text(OmegaConf.to_yaml(job, resolve=True))
    changed = root / "changed" / "tab" / "cbm" / "seed0" / "train"
    changed.mkdir(parents=True)
    (changed / "cell.json").write_text('{"fingerprint": "made-with-other-settings"}')
    (root / "locked").mkdir()
    code = f"from cbm.core import runlock; import threading; runlock.acquire({str(root / 'locked')!r}); print('held', flush=True); threading.Event().wait()"
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    yield root
    holder.kill()
    holder.wait()


@pytest.mark.parametrize("prog, args, message", params(CASES))
def test_bad_experiment_input_gives_one_line_and_leaves_nothing(fx, tmp_path, prog, args, message):
    assert_refused(fx, tmp_path, prog, args, message)


def test_the_corpus_is_large_enough():
    assert len(CASES) >= 40 and len({(p, tuple(a)) for p, a, _, _ in CASES}) == len(CASES)


def test_a_free_lock_file_is_no_refusal(fx, tmp_path):
    """The lock file a finished (or killed) run left does not block the next one."""
    out = Path(tmp_path) / "exp"
    out.mkdir()
    (out / ".lock").write_text('{"pid": 1, "host": "elsewhere", "started": "then", "command": "cbm-experiment"}')
    from cbm.core import runlock

    assert runlock.holder(out) is None
