"""Every example line a command's ``--help`` prints and every command line of the README and the docs
(``docs/**/*.md``, the site) is accepted: run as a dry run (``CBM_DRY_RUN=1``:
the real entry point validates the whole command line, then stops), with the placeholders (``<run>``,
``outputs/robot-cbm/<time>``, ``/models/tiny-vlm``) replaced by fixture paths. Nothing may be left
behind. Examples that need a CUDA GPU are accepted as the one-line GPU refusal on a machine without one.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import docpages
import pytest
from forked import run_forked
from omegaconf import OmegaConf

from cbm.core import forkserver
from cbm.core.cli import compose_plain

PROGS = ["cbm-train", "cbm-intervene", "cbm-automate", "cbm-experiment", "cbm-edct", "cbm-finetune", "cbm-icl",
         "cbm-concepts", "cbm-data", "cbm-report", "cbm-vlm-zoo"]  # fmt: skip
BIN = Path(sys.executable).parent
#: Examples whose validation takes long (every cell of a table; a VLM written): ``-m slow``.
SLOW_PROGS = ("cbm-experiment", "cbm-finetune")
SLOW = pytest.mark.slow
#: The hosted-endpoint examples assume their API keys are set (a dry run never sends them).
KEYS = {"OPENAI_API_KEY": "sk-dry-run", "OPENROUTER_API_KEY": "sk-or-dry-run"}
#: Refusals that only say this machine has no GPU (the example is right on one with a GPU).
NO_GPU = re.compile(r"(no CUDA|CUDA GPU|cuda.*not available|no GPU)", re.I)  # also "only 1 CUDA GPU(s) are available"


def help_text(prog: str) -> str:
    res = subprocess.run([str(BIN / prog), "--help"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def examples(text: str) -> list[str]:
    """The command lines under ``examples:`` (each starts with a ``cbm-`` program)."""
    out, inside = [], False
    for line in text.splitlines():
        if line.strip() == "examples:":
            inside = True
        elif inside and line.startswith("  cbm-"):
            out.append(line.strip())
        elif inside and line.strip():
            inside = line.startswith("  ")  # a continuation; anything else ends the block
    return out


def all_examples() -> list:
    """A ``pytest.param`` per example line (the ``--help`` of every command run side by side)."""
    procs = {p: subprocess.Popen([str(BIN / p), "--help"], stdout=subprocess.PIPE, text=True) for p in PROGS}
    cases = []
    for prog, proc in procs.items():
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, prog
        for i, line in enumerate(examples(out)):
            cases.append(pytest.param(line, id=f"{prog}-{i}", marks=SLOW if prog in SLOW_PROGS or "/models/" in line else ()))
    return cases


README = docpages.README
NOT_COMMANDS, readme_lines = docpages.NOT_COMMANDS, docpages.command_lines


def documented_errors(text: str) -> dict[str, str]:
    """``$ cbm-... `` lines a page shows with the one error line they print."""
    pairs = re.findall(r"^\$ (cbm-[^\n]+)\n(cbm-[a-z]+: error: [^\n]+)$", text, re.M)
    return {cmd.strip(): err.strip() for cmd, err in pairs}


def readme_examples() -> list:
    """A ``pytest.param`` per command line of the README and the docs; whole tables and VLM runs are slow."""
    lines = readme_lines(docpages.text())
    slow = lambda ln: ln.startswith(SLOW_PROGS) or "/models/" in ln or "/tmp/tiny-vlm" in ln  # noqa: E731
    return [pytest.param(ln, id=f"README-{i}", marks=SLOW if slow(ln) else ()) for i, ln in enumerate(lines)]


@pytest.fixture(scope="module")
def places(tmp_path_factory) -> dict[str, Path]:
    """Stand-ins for the placeholders: a killed-run directory (config + checkpoints, no metrics, so
    ``resume=`` accepts it), a black-box run, a cbm-edct run directory, a concept set and a pairs file."""
    root = tmp_path_factory.mktemp("help-examples")
    cfg = compose_plain("train", ["data.modality=tabular", f"hydra.run.dir={root / 'run'}"])
    job = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
    for name in ("run", "bb"):
        (root / name / "checkpoints").mkdir(parents=True)
        for ckpt in ("best.ckpt", "last.ckpt"):
            (root / name / "checkpoints" / ckpt).write_bytes(b"")
        OmegaConf.update(job, "output_dir", str(root / name))
        (root / name / "config.yaml").write_text(OmegaConf.to_yaml(job, resolve=True))
    concepts = Path(__file__).parents[2] / "synthetic" / "robot" / "concept_sets" / "fine.yaml"
    shutil.copy(concepts, root / "vlm.yaml")
    write_pairs(root / "pairs.jsonl")
    write_edct_run(root / "edct")
    write_edct_run(root / "edct2")  # a second run of the same settings (stability_runs)
    from synthetic.real.fixtures import write_awa2, write_celeba, write_cub, write_derm7pt

    write_cub(root / "cub", per_class=1, n_classes=25)  # data.root=/data/cub and CBM_CUB_ROOT: a CUB in its published layout
    write_derm7pt(root / "derm7pt", n_cases=20)  # data.root=/data/derm7pt and CBM_DERM7PT_ROOT
    write_awa2(root / "awa2", per_class=2)  # data.root=/data/Animals_with_Attributes2
    write_celeba(root / "celeba", n_images=120)  # data.root=/data/celeba and CBM_CELEBA_ROOT (1 image in 12 kept: 7 / 1 / 2)
    return {"cub": root / "cub", "derm7pt": root / "derm7pt", "awa2": root / "awa2", "celeba": root / "celeba", "run": root / "run", "bb": root / "bb", "edct": root / "edct", "edct2": root / "edct2", "concepts": root / "vlm.yaml",
            "pairs": root / "pairs.jsonl"}  # fmt: skip


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """A tiny random VLM written by ``python -m cbm.vlm.tiny`` (no download), for ``/models/...``."""
    model = tmp_path_factory.mktemp("models") / "tiny-vlm"
    res = subprocess.run([sys.executable, "-m", "cbm.vlm.tiny", str(model)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    return model


def write_pairs(path: Path) -> None:
    """A small counterfactual Q/A file (``data.jsonl=``): pairs of an original and its counterfactual."""
    from PIL import Image

    from cbm.vlm.finetune.data import SPLITS

    for i in range(4):  # each pair its own original image: the evaluation split goes by original image
        Image.new("RGB", (32, 32), (200, 100, 50 * i)).save(path.parent / f"robot{i}.png")
    rows = [{"image": f"robot{i}.png", "question": "Is it a Glorp?", "answer": answer, "split": split, "pair_id": f"p{i}"}
            for i in range(4) for split, answer in zip(SPLITS, ("yes", "no"))]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def write_edct_run(run: Path) -> None:
    """What ``cbm-finetune data.build=edct`` and ``cbm-edct stability_runs=`` read of a ``cbm-edct``
    run: results.json (scores and settings fingerprint) and one item record with a judged
    counterfactual step and its images."""
    from PIL import Image

    from cbm.vlm.edct.records import write_item

    image = Image.new("RGB", (32, 32), (90, 140, 200))
    write_item(run, "r0", "Glorp", image, [(image, "Drent", "knees")])  # sealed, as cbm-edct writes it
    (run / "results.json").write_text(json.dumps({"scores": {"ccs": {"value": 0.5, "n": 1}}, "fingerprint": {"example": "x"}}))


def fill(line: str, places: dict[str, Path]) -> list[str]:
    """The example's argv with the placeholders replaced by fixture paths."""
    line = re.sub(r"outputs/[\w-]+/<time>", str(places["run"]), line)
    line = line.replace("outputs/edct/<run2>", str(places["edct2"])).replace("outputs/edct/<run>", str(places["edct"]))
    line = line.replace("<black-box run>", str(places["bb"])).replace("<run>", str(places["run"]))
    line = line.replace("<run dir>", str(places["run"]))
    if "/models/" in line or "/tmp/tiny-vlm" in line:
        line = re.sub(r"(/models/[\w.-]+|/tmp/tiny-vlm)", str(places["model"]), line)
    line = line.replace("data.concept_set=vlm.yaml", f"data.concept_set={places['concepts']}")
    line = re.sub(r"data\.concept_set=my_concepts\.yaml", f"data.concept_set={places['concepts']}", line)
    if line.startswith("cbm-report collect "):  # an experiment directory, then the archive's (a new folder)
        line = re.sub(r"cbm-report collect \S+ \S+", f"cbm-report collect {places['run'].parent} {places['run'].parent / 'new-archive'}", line)
    elif line.startswith("cbm-report diagnose "):  # a run or experiment directory
        line = re.sub(r"cbm-report diagnose \S+", f"cbm-report diagnose {places['run']}", line)
    elif line.startswith("cbm-report "):  # a sweep or experiment directory
        line = re.sub(r"cbm-report \S+", f"cbm-report {places['run'].parent}", line)
    line = line.replace("/data/Animals_with_Attributes2", str(places["awa2"])).replace("/data/celeba", str(places["celeba"]))
    line = line.replace("/data/cub", str(places["cub"])).replace("/data/derm7pt", str(places["derm7pt"]))
    return shlex.split(line.replace("data.jsonl=pairs.jsonl", f"data.jsonl={places['pairs']}"))


@pytest.mark.parametrize("line", all_examples() + readme_examples())
def test_help_example_is_accepted(line, places, tmp_path, request):
    if "/models/" in line or "/tmp/tiny-vlm" in line:
        places = {**places, "model": request.getfixturevalue("model_dir")}
    prog, *args = fill(line, places)
    env = {**os.environ, **KEYS, "CBM_DRY_RUN": "1", "PYTHONWARNINGS": "ignore", "CBM_CUB_ROOT": str(places["cub"]),
           "CBM_DERM7PT_ROOT": str(places["derm7pt"]), "CBM_CELEBA_ROOT": str(places["celeba"])}  # fmt: skip
    before = set(tmp_path.rglob("*"))
    if forkserver.available():  # the console script's module, forked without its imports' cost
        res = run_forked(prog, args, tmp_path, env, timeout=300)
    else:
        res = subprocess.run([str(BIN / prog), *args], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    err = res.stderr.strip()
    if res.returncode == 2 and NO_GPU.search(err) and len(err.splitlines()) == 1:
        import torch

        # refused only for want of a GPU, or of as many GPUs as the example asks for
        assert not torch.cuda.is_available() or "CUDA GPU(s) are available" in err, err
        return
    documented = documented_errors(docpages.text()).get(line)
    if documented is not None:  # the docs show this line's refusal: it must be that (a "...)" shortens it)
        assert res.returncode == 2 and len(err.splitlines()) == 1, err
        assert err == documented or (documented.endswith("...)") and err.startswith(documented[:-4])), (err, documented)
        return
    if "--help" in args:
        assert res.returncode == 0 and res.stdout.startswith("usage:"), res.stderr[-1500:]
        return
    assert res.returncode == 0, f"{line}\n{res.stdout[-1500:]}\n{err[-1500:]}"
    assert "dry run" in res.stdout, res.stdout[-1500:]
    assert set(tmp_path.rglob("*")) == before  # a dry run writes nothing


def test_the_readme_lines_are_found():
    text = docpages.text()
    lines = readme_lines(text)
    assert "cbm-train model=cem" in lines and "cbm-train model.zero_concepts=[knees]" in lines
    assert any(ln.startswith("cbm-intervene checkpoint=outputs/robot-cbm/<time> 'policy=") for ln in lines)  # joined continuation
    assert len(lines) >= 50 and len(documented_errors(text)) >= 3


def test_examples_are_found():
    assert len(examples(help_text("cbm-experiment"))) >= 4 and len(examples(help_text("cbm-data"))) == 3
