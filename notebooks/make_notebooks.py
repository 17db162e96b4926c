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

ZOO_SETUP = '''import json
import os
import subprocess
import sys
from pathlib import Path

import matplotlib.pyplot as plt
from IPython.display import Image, Markdown, display

# A full zoo (cbm-vlm-zoo, about 30 minutes on 2 cores) in CBM_ZOO_DIR, else the smoke zoo (a minute:
# untrained models, so its figures show the plumbing, not a finding; the README has the measured run).
root = Path(os.environ.get("CBM_ZOO_DIR", "outputs/zoo/default"))
if not (root / "results.json").is_file():
    root = Path(os.environ.get("CBM_NOTEBOOK_OUT", "outputs")) / "zoo_smoke"
    smoke = ["data.n_train=160", "data.n_test=40", "data.image_size=32", "train.base_epochs=1", "train.member_epochs=1",
             "members={faithful: 0, dial50: 0.5, shortcut: 1}", "edct_items=16", "bootstrap=200", "repair.pairs=24",
             "repair.epochs=1", "logger=csv_only"]
    subprocess.run([sys.executable, "-m", "cbm.vlm.apps.zoo", *smoke, f"output_dir={root}"], check=True, capture_output=True)
result = json.loads((root / "results.json").read_text())
members = result["members"]
display(Markdown((root / "results.md").read_text()))'''

ZOO_RELIANCE = '''names = list(members)
fig, ax = plt.subplots(1, 2, figsize=(10, 3.5))
x = range(len(names))
ax[0].bar([i - 0.2 for i in x], [members[n]["accuracy"] for n in names], 0.4, label="cue agrees (training distribution)")
ax[0].bar([i + 0.2 for i in x], [members[n]["accuracy_cue_flipped"] for n in names], 0.4, label="cue flipped")
ax[0].set(xticks=list(x), xticklabels=names, ylabel="accuracy", ylim=(0, 1.05), title="Flip the cue, re-ask")
ax[0].legend(fontsize=8)
ax[1].plot([members[n]["cue_share"] for n in names], [members[n]["cue_reliance"] for n in names], "o-", label="cue reliance")
ax[1].plot([members[n]["cue_share"] for n in names], [members[n]["part_reliance"] for n in names], "s-", label="part reliance")
ax[1].set(xlabel="planted cue share", ylabel="measured", ylim=(-0.05, 1.05), title="The dial, measured exactly")
ax[1].legend(fontsize=8)
fig.tight_layout()'''

ZOO_REPAIR = '''rep = result.get("repair", {})
if rep.get("pairs"):
    keys = ["accuracy", "accuracy_cue_flipped", "cue_reliance", "part_reliance"]
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.bar([i - 0.2 for i in range(len(keys))], [rep[k]["before"] for k in keys], 0.4, label="before")
    ax.bar([i + 0.2 for i in range(len(keys))], [rep[k]["after"] for k in keys], 0.4, label="after")
    ax.set(xticks=range(len(keys)), xticklabels=keys, ylim=(0, 1.05), title=f"Counterfactual LoRA on {rep['member']}")
    ax.legend(fontsize=8)
    print("McNemar on the part-flip counterfactuals:", rep["mcnemar"], "| attention on the parts / cue:", rep["localisation"])
else:
    print("no counterfactual fine-tuning in this run:", rep)'''

BOOKS["faithfulness_testbed"] = nbf.v4.new_notebook()
BOOKS["faithfulness_testbed"].cells = [
    nbf.v4.new_markdown_cell("# The faithfulness testbed\n\nTiny VLMs whose reliance was planted (faithful, a shortcut on a "
                             "spurious cue, and a dial between), their true reliance from exact counterfactuals, and EDCT with "
                             "the exact judge: does CCS recover what was planted? Then counterfactual LoRA on the shortcut."),
    nbf.v4.new_code_cell(ZOO_SETUP),
    nbf.v4.new_markdown_cell("Each member's answer when only the cue changes, and the dial: the share of robots on which "
                             "the answer follows the cue (planted by palette) against the share of label-changing part flips it follows."),
    nbf.v4.new_code_cell(ZOO_RELIANCE),
    nbf.v4.new_markdown_cell("CCS (exact judge, 95% bootstrap CI) against the true part reliance; the dotted line is CCS = reliance."),
    nbf.v4.new_code_cell('display(Image(str(root / "zoo.png")))\nprint(result["across"])'),
    nbf.v4.new_markdown_cell("Counterfactual fine-tuning: the shortcut member before and after LoRA on the edits EDCT verified it fails."),
    nbf.v4.new_code_cell(ZOO_REPAIR),
]
BOOKS["faithfulness_testbed"].metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}

if __name__ == "__main__":
    for name, nb in BOOKS.items():
        nbf.write(nb, HERE / f"{name}.ipynb")
        print(HERE / f"{name}.ipynb")
