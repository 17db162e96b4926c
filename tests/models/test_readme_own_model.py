"""The docs' "Benchmark your own model" page (docs/guides/own-model.md), run as written: its ``# file:`` blocks are
written into a fresh directory, its ``cbm-*`` lines run there (with the user's package on the path,
plus overrides that make the runs small: tabular robots, a few epochs), and its other Python
block is executed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).parents[2] / "docs" / "guides" / "own-model.md"
#: What the test adds to the page's command lines so they run in seconds.
SMALL = ["trainer=cpu_smoke", "logger=csv_only", "trainer.max_epochs=3", "data.modality=tabular", "data.n_train=600",
         "data.n_calib=200", "data.n_test=300"]  # fmt: skip


def section() -> str:
    return PAGE.read_text()


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", section(), re.S)


def write_files(root: Path) -> list[str]:
    written = []
    for body in blocks("python") + blocks("yaml"):
        first, _, rest = body.partition("\n")
        if first.startswith("# file: "):
            path = root / first.removeprefix("# file: ").strip()
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(rest)
            written.append(str(path.relative_to(root)))
    return written


def test_the_section_has_what_the_test_runs():
    files = [b.partition("\n")[0] for b in blocks("python") + blocks("yaml") if b.startswith("# file: ")]
    assert files == ["# file: mymodels/temp.py", "# file: my_conf/model/temp_cbm.yaml", "# file: my_conf/experiment/mine.yaml"]
    commands = [ln for b in blocks("bash") for ln in b.splitlines() if ln.startswith("cbm-")]
    assert [c.split()[0] for c in commands] == ["cbm-train", "cbm-intervene", "cbm-automate", "cbm-experiment"]
    assert [b for b in blocks("python") if not b.startswith("# file: ")]  # the wrapper's snippet


def exact_oracle_ceiling(root: Path, cache: Path, monkeypatch) -> None:
    """cbm-intervene's k = every concept is the user's head on the true test concepts, and its
    k = 0 the training's test accuracy (the class reloaded here from the checkpoint's _target_)."""
    import torch

    from cbm.models.state import ConceptState
    from cbm.training.checkpoint import load_run

    monkeypatch.syspath_prepend(str(root))
    model, dm, _ = load_run(root / "runs" / "temp", cache_dir=cache)
    assert type(model).__module__ == "mymodels.temp"
    test = dm.split("test").tensors
    with torch.no_grad():
        logits = model.predict(ConceptState(logits=test["c"], probs=test["c"].float()))
    rows = json.loads((root / "runs" / "temp_intervene" / "results.json").read_text())["rows"]
    acc = {r["k"]: r["accuracy"] for r in rows if r["intervener"] == "oracle" and r["policy"] == "random"}
    assert acc[model.n_concepts] == pytest.approx(float((logits.argmax(1) == test["y"]).float().mean()), abs=1e-6)
    metrics = json.loads((root / "runs" / "temp" / "metrics.json").read_text())
    assert acc[0] == pytest.approx(metrics["test/task_acc"], abs=1e-6)


@pytest.mark.slow
def test_the_readme_section_runs_as_written(tmp_path, shared_cache, monkeypatch):
    write_files(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    bin_dir = Path(sys.executable).parent
    for line in (ln for b in blocks("bash") for ln in b.splitlines() if ln.startswith("cbm-")):
        prog, *args = re.split(r"\s+#", line)[0].split()
        extra = [f"cache_dir={shared_cache}"]
        if prog == "cbm-train":
            extra += SMALL
        elif prog == "cbm-experiment":
            extra += ["train=[" + ",".join(SMALL) + "]", f"output_dir={tmp_path / 'exp'}"]
        proc = subprocess.run([str(bin_dir / prog), *args, *extra], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, (line, proc.stdout[-1500:], proc.stderr[-3000:])
    assert json.loads((tmp_path / "runs" / "temp" / "metrics.json").read_text())["model"] == "temp_cbm"
    exact_oracle_ceiling(tmp_path, shared_cache, monkeypatch)
    assert (tmp_path / "runs" / "temp_automate" / "automation.json").is_file()
    report = json.loads((tmp_path / "exp" / "report.json").read_text())
    assert not report["unfinished"] and {r["model"].split()[0] for r in report["interventions"]} >= {"cbm", "temp_cbm"}
    # the wrapper's snippet, executed as written (it asserts its own oracle ceiling)
    snippet = next(b for b in blocks("python") if not b.startswith("# file: "))
    proc = subprocess.run([sys.executable, "-c", snippet], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| oracle" in proc.stdout
