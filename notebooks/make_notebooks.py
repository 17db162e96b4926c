"""Writes the three result notebooks (kept as code so their cells stay reviewable and identical in
structure). Each notebook loads an experiment directory (``CBM_EXPERIMENT_DIR`` or
``experiments/<preset>``) or, when there is none, runs the preset's smoke variant first, then shows
the report's tables and draws its figures. Run: ``python notebooks/make_notebooks.py``."""

from __future__ import annotations

from pathlib import Path

import nbformat as nbf

HERE = Path(__file__).parent

SETUP = '''import json
import os
import subprocess
import sys
from pathlib import Path

from IPython.display import Image, Markdown, display

PRESET = "{preset}"
root = Path(os.environ.get("CBM_EXPERIMENT_DIR", f"experiments/{{PRESET}}"))
if not (root / "report.json").is_file():  # no full run here: make the smoke variant (minutes on a CPU)
    root = Path(os.environ.get("CBM_NOTEBOOK_OUT", "experiments")) / f"{{PRESET}}_smoke"
    subprocess.run([sys.executable, "-m", "cbm.experiments.experiment", f"+experiment={{PRESET}}_smoke",
                    f"output_dir={{root}}"], check=True, capture_output=True)
report = json.loads((root / "report.json").read_text())
print(root, {{k: len(v) for k, v in report.items()}})'''

TABLE = '''from cbm.experiments.tables import render

cols = list(dict.fromkeys(c for r in report["{table}"] for c in r))
display(Markdown(render("{title}", report["{table}"], cols)))'''


def notebook(preset: str, title: str, intro: str, cells: list[tuple[str, str]]) -> nbf.NotebookNode:
    nb = nbf.v4.new_notebook()
    nb.cells = [nbf.v4.new_markdown_cell(f"# {title}\n\n{intro}"), nbf.v4.new_code_cell(SETUP.format(preset=preset))]
    for kind, text in cells:
        nb.cells.append(nbf.v4.new_markdown_cell(text) if kind == "md" else nbf.v4.new_code_cell(text))
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


ACC_FIGURES = '''from cbm.experiments import figures
from cbm.experiments.report import _cells

manifest = json.loads((root / "experiment.json").read_text())
inter = _cells(root, manifest, "intervene", "results.json")
settings = list(dict.fromkeys(c["setting"] for c in manifest["cells"]))
for s in settings:
    p = figures.accuracy_vs_k(inter, s, root / "figures" / f"accuracy_vs_k_{s}.png")
    if p:
        display(Image(str(p)))'''

BOOKS = {
    "robot_decision_support": notebook(
        "robot_decision_support", "Robot decision support",
        "Accuracy of every architecture under test-time interventions (oracle, 80% expert, LLM when a client "
        "is configured) on the three concept sets, and the Gain over the black box.",
        [("code", TABLE.format(table="training", title="Training")),
         ("code", TABLE.format(table="interventions", title="Interventions")),
         ("md", "Accuracy vs the budget k per architecture; the dashed line is the black box."),
         ("code", ACC_FIGURES)],
    ),
    "sudoku_automation": notebook(
        "sudoku_automation", "Sudoku automation",
        "Selective prediction calibrated to 95% accuracy: coverage and NetWorkAutomated (NWA) per architecture "
        "and budget k, and the risk-coverage curves.",
        [("code", TABLE.format(table="automation", title="Automation")),
         ("code", '''from cbm.experiments import figures
from cbm.experiments.report import _cells

manifest = json.loads((root / "experiment.json").read_text())
auto = _cells(root, manifest, "automate", "automation.json")
for s in dict.fromkeys(c["setting"] for c in manifest["cells"]):
    p = figures.automation_figure(auto, s, root / "figures" / f"automation_{s}.png")
    if p:
        display(Image(str(p)))''')],
    ),
    "concept_quality_ablations": notebook(
        "concept_noise", "Concept-quality ablations",
        "Annotation noise vs accuracy and Gain (the same cells work for the `resolution` and `concept_sets` "
        "presets: set `PRESET`).",
        [("code", TABLE.format(table="interventions", title="Interventions")),
         ("code", ACC_FIGURES),
         ("md", "Gain of oracle interventions at k = max over the black box, per setting."),
         ("code", '''p = figures.gain_vs_setting(inter, settings, root / "figures" / "gain_vs_setting.png")
if p:
    display(Image(str(p)))''')],
    ),
}

if __name__ == "__main__":
    for name, nb in BOOKS.items():
        nbf.write(nb, HERE / f"{name}.ipynb")
        print(HERE / f"{name}.ipynb")
