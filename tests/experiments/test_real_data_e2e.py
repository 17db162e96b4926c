"""Every real dataset end to end on its fixture (the published layout): cbm-experiment trains the black
box, CBM, CEM and ProbCBM, intervenes and writes its report, in seconds on a CPU. CUB (by attribute
group) and Derm7pt / CUB-25 run as the real_cbm_smoke / real_data_v04_smoke presets; this adds AwA2,
CelebA and Derm7pt's criteria as categorical concepts (each revealed whole)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from synthetic.real.fixtures import write_awa2, write_celeba, write_derm7pt


@pytest.mark.slow
def test_awa2_celeba_and_categorical_derm7pt_train_intervene_and_report(tmp_path, shared_cache):
    awa2, celeba, derm = write_awa2(tmp_path / "awa2"), write_celeba(tmp_path / "celeba"), write_derm7pt(tmp_path / "derm")
    settings = {"awa2": f"[data=awa2,data.root={awa2},data.image_size=32]", "celeba": f"[data=celeba,data.root={celeba},data.image_size=32]",
                "derm": f"[data=derm7pt,data.root={derm},data.concepts=categorical,data.image_size=32]"}  # fmt: skip
    out = tmp_path / "exp"
    args = [sys.executable, "-m", "cbm.experiments.experiment", "+experiment=real_cbm_smoke", *(f"+settings.{k}={v}" for k, v in settings.items()),
            f"select.settings=[{','.join(settings)}]", "intervene.overrides=[]", f"output_dir={out}", f"cache_dir={shared_cache}"]  # fmt: skip
    res = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path, timeout=1200)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    got = {(r["setting"], r["model"]) for r in report["interventions"]}
    assert got == {(s, m) for s in settings for m in ("blackbox", "cbm", "cem", "probcbm")}, got
    assert (out / "report.md").read_text().startswith("# real_cbm_smoke") and list((out / "figures").glob("accuracy_vs_k_*.png"))
    manifest = json.loads((out / "experiment.json").read_text())
    for cell in (c for c in manifest["cells"] if c["stage"] == "intervene" and c["setting"] == "derm"):
        meta = json.loads((out / cell["dir"] / "results.json").read_text())["meta"]
        assert meta["k_max"] == 7 < len(meta["concepts"]) == 28  # seven criteria, each asked whole
