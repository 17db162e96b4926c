"""A regular (non-editable) install works outside a checkout: the wheel carries the Hydra configs."""

from __future__ import annotations

import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_wheel_installs_in_a_fresh_venv_and_finds_its_configs(tmp_path):
    wheels, src = tmp_path / "wheels", tmp_path / "src"
    # built from a copy of what the wheel is made of: setuptools writes build/ beside the sources,
    # and a test writes only under its own tmp_path
    for pkg in ("cbm", "synthetic"):
        shutil.copytree(ROOT / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(src)],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    (wheel,) = wheels.glob("cbm-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "cbm/conf/train.yaml" in names and "cbm/conf/model/cem.yaml" in names
    assert "cbm/conf/hydra/launcher/slurm.yaml" in names
    # a fresh venv: the wheel installed without its dependencies, which come from this venv's
    # site-packages through a .pth line (its editable-install hook of cbm is not loaded that way)
    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    fresh_site = subprocess.run([str(py), "-c", "import site; print(site.getsitepackages()[0])"],
                                check=True, capture_output=True, text=True).stdout.strip()  # fmt: skip
    Path(fresh_site, "deps.pth").write_text(site.getsitepackages()[0] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", str(wheel)],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = subprocess.run([str(py), "-c", "import cbm; print(cbm.__file__)"], cwd=elsewhere,
                           capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert where.startswith(str(venv))  # the installed copy, not this checkout
    res = subprocess.run(
        [str(venv / "bin" / "cbm-data"), "info", "data.n_train=50", "data.n_calib=0", "data.n_test=20", "cache_dir=null"],
        cwd=elsewhere, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "train:     40 samples" in res.stdout and "concept prevalence" in res.stdout
