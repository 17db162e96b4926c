"""The GPU check scripts say what is missing in their first second (benchmarks/deps_check.py), and
the wheels `make gpu-wheels` carries cover what the GPU machine's image lacks."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import deps_check  # noqa: E402


def pyproject_dependencies() -> list[str]:
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return [re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].lower() for d in deps]


def test_every_runtime_dependency_is_checked_or_said_to_be_unneeded():
    for dist in pyproject_dependencies():
        assert dist in deps_check.GROUPS["gpu"] or dist in deps_check.NOT_NEEDED, dist
    for group in deps_check.GROUPS.values():
        assert set(group) <= set(deps_check.MODULES)
    # the image lacked these when last measured: each must come as a carried wheel
    for dist in ("hydra-core", "omegaconf", "antlr4-python3-runtime", "highspy", "bitsandbytes"):
        assert dist in deps_check.WHEELS


def test_missing_modules_are_listed_in_one_line_without_importing_anything(monkeypatch, capsys):
    real = importlib.util.find_spec
    gone = {"hydra", "highspy", "omegaconf"}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in gone else real(name, *a))
    start = time.perf_counter()
    assert deps_check.main(["gpu"]) == 1
    assert time.perf_counter() - start < 1.0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["deps_check: missing 3 of 17 for gpu: hydra-core, omegaconf, highspy (in .whl/ after `make gpu-wheels`)"]


def test_the_check_runs_in_a_fresh_process_in_well_under_a_second():
    start = time.perf_counter()
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "deps_check.py"), "gpu"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "all 17 dependencies of gpu found" in res.stdout
    assert time.perf_counter() - start < 1.0  # no torch import: find_spec only
    assert "torch" not in res.stderr


def test_the_environment_checks_dependencies_before_anything_imports_torch():
    """benchmarks/gpu_lib.sh's gpu_env: deps_check (through gpu_deps.sh) before any torch import."""
    lines = (ROOT / "benchmarks" / "gpu_lib.sh").read_text().splitlines()
    first_check = next(i for i, ln in enumerate(lines) if "gpu_deps.sh" in ln and ln.lstrip().startswith("source"))
    torch_uses = [i for i, ln in enumerate(lines) if "import" in ln and "torch" in ln and "PY" in ln and not ln.lstrip().startswith("#")]
    # the base interpreter's choice may probe a local .venv for CUDA before (absent on the GPU machine: nothing runs)
    assert torch_uses and all(i > first_check or ".venv/bin/python -c" in lines[i] for i in torch_uses)


@pytest.mark.parametrize("script, main", [("gpu_check.sh", "gpu_check_main"), ("qlora_gpu_check.sh", "qlora_check_main"),
                                          ("gpu_all.sh", None)])  # fmt: skip
def test_the_scripts_set_up_the_environment_before_any_step(script, main):
    """The code that runs (the main function, or gpu_all.sh's top level): gpu_env first, then the steps."""
    lines, body, inside = (ROOT / "benchmarks" / script).read_text().splitlines(), [], None
    for ln in lines:
        head = re.match(r"(\w+)\(\) \{", ln)
        if head:
            inside = head[1]
        elif ln == "}":
            inside = None
        elif inside == main and not ln.lstrip().startswith("#"):
            body.append(ln.strip())
    setup = next(i for i, ln in enumerate(body) if re.match(r"gpu_env (gpu|qlora)\b", ln))
    steps = [i for i, ln in enumerate(body) if re.match(r"(cbm|vlm|lane)_\w+", ln) or "import torch" in ln]
    assert steps and min(steps) > setup, script


def test_a_wheel_folder_is_checked(tmp_path, capsys):
    for name in ("hydra_core-1.3.8-py3-none-any.whl", "omegaconf-2.3.1-py3-none-any.whl"):
        (tmp_path / name).write_bytes(b"x")
    assert deps_check.main(["--wheels", str(tmp_path)]) == 1
    assert "lacks wheels for antlr4-python3-runtime, highspy, bitsandbytes" in capsys.readouterr().err


def test_the_csv_logger_path_never_imports_wandb(tmp_path):
    """The GPU image has no wandb: a cbm-train run with logger=csv_only must not import it."""
    code = (
        "import sys; from cbm.experiments.train import main; sys.argv = ['cbm-train', 'data.modality=tabular', "
        "'data.n_train=200', 'data.n_calib=0', 'data.n_test=100', 'trainer.max_epochs=1', 'logger=csv_only', "
        f"'hydra.run.dir={tmp_path / 'run'}', 'cache_dir={tmp_path / 'c'}']\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "assert 'wandb' not in sys.modules, 'wandb was imported'\nprint('NO-WANDB')"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert res.returncode == 0 and "NO-WANDB" in res.stdout, res.stderr[-2000:]
