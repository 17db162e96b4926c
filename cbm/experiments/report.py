"""Reports: the table of a sweep of ``cbm-train`` runs, or the whole report of an experiment.

``cbm-report DIR`` on a ``cbm-experiment`` directory writes ``report.md`` (training,
interventions with Gain, automation with NWA; the paper's numbers beside ours), one CSV per table,
``report.json`` and ``figures/``; on any other directory it collects the ``metrics.json`` of every
run below into ``results.md`` / ``results.json``, with a column for every setting the runs differ
in. Also a Hydra callback: ``on_multirun_end`` prints the sweep's table.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from cbm.core.atomic import ensure_dir, write_csv_atomic
from cbm.core.common import (
    dry_run,
    fail,
    markdown_table,
    one_line,
    say,
    write_json_atomic,
    write_text_atomic,
)
from cbm.core.concurrency import stoppable
from cbm.core.safe_paths import slugs
from cbm.experiments.archive import read_manifest
from cbm.experiments.tables import (
    ARCH_ORDER,
    automation_rows,
    comparisons,
    confirmed_rows,
    cost_rows,
    exchange_rows,
    intervention_rows,
    own_answer_rows,
    paired_rows,
    read_json,
    render,
    rule_rows,
    run_config,
    target_rows,
    threshold_rows,
    training_rows,
)

if TYPE_CHECKING:  # matplotlib loads only when a report draws
    from cbm.experiments.diagnostics import Diagnostic


def read_metrics(path: Path) -> dict[str, Any] | str:
    """One run's ``metrics.json``, or why it is not one."""
    try:
        m = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        return f"unreadable ({type(err).__name__})"
    if not isinstance(m, dict) or not isinstance(m.get("model"), str) or not isinstance(m.get("dataset"), str):
        return "not a cbm-train metrics.json (no model / dataset)"
    oracle = m.get("oracle_random", {})
    if not isinstance(oracle, dict) or not all(str(k).isdigit() and isinstance(v, int | float) for k, v in oracle.items()):
        return "oracle_random must map integer budgets to accuracies"
    if not isinstance(m.get("seed", 0), int):
        m["seed"] = 0
    return m


def collect(root: str | Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The runs under ``root`` in a stable order (dataset, model, seed), and one note per
    ``metrics.json`` that is not a run's."""
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"{root} does not exist")
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a directory (give a run or sweep directory)")
    runs, skipped = [], []
    for path in sorted(root.rglob("metrics.json")):
        m = read_metrics(path)
        if isinstance(m, str):
            skipped.append(f"{path}: {m}")
        else:
            m["_config"] = run_config(path.parent)
            runs.append(m)
    return sorted(runs, key=lambda r: (r.get("dataset", ""), ARCH_ORDER.get(r.get("model"), 9), r.get("seed", 0))), skipped


def write_report(root: str | Path) -> str:
    """The table of every run under ``root``, also written to ``results.md`` / ``results.json``
    there; files that are not a run's are named on stderr. An experiment directory gets its
    whole report (:func:`write_experiment_report`)."""
    if (Path(root) / "experiment.json").is_file():
        return write_experiment_report(root)
    runs, skipped = collect(root)
    if not runs:
        why = f" ({len(skipped)} skipped, e.g. {skipped[0]})" if skipped else ""
        raise FileNotFoundError(f"no usable metrics.json under {root}{why}")
    for note in skipped:
        print(f"cbm-report: skipping {note}", file=sys.stderr)
    rows, cols = training_rows(runs)
    table = markdown_table(rows, cols)
    write_text_atomic(Path(root) / "results.md", table + "\n")
    write_json_atomic(Path(root) / "results.json", [{k: v for k, v in r.items() if k != "_config"} for r in runs])
    return table


def _cells(root: Path, manifest: dict[str, Any], stage: str, result: str) -> list[dict[str, Any]]:
    """The finished cells of one stage, each with its result file as ``_results`` (cell
    directories are relative to the experiment's, so a moved experiment still reports)."""
    out = []
    for cell in manifest.get("cells", []):
        if cell.get("stage") == stage and cell.get("status") == "done":
            res = read_json(root / cell["dir"] / result)
            if isinstance(res, dict):
                out.append({**cell, "dir": str(root / cell["dir"]), "_results": res})
    return out


def time_table(root: Path, manifest: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """Where the wall time went: per stage, and inside training (data, fit, test, oracle table)."""
    totals: dict[str, float] = {}
    for cell in manifest.get("cells", []):
        if cell.get("seconds"):
            totals[cell["stage"]] = totals.get(cell["stage"], 0.0) + cell["seconds"]
            if cell["stage"] == "train":
                t = read_json(root / cell["dir"] / "timing.json") or {}
                for k in ("data_s", "fit_s", "test_s", "interventions_s"):
                    if isinstance(t.get(k), int | float):
                        totals[f"  train: {k[:-2]}"] = totals.get(f"  train: {k[:-2]}", 0.0) + t[k]
    rows = [{"part": k, "seconds": f"{v:.1f}"} for k, v in totals.items()]
    return rows, ["part", "seconds"]


#: How to read the numbers of every table (printed under the report's title).
SEEDS_NOTE = ("Accuracies in %: mean ± standard error over the `seeds` column's seeds (one seed: the value alone). "
              "Paired differences: the mean of the per-seed differences and its 95% t interval; "
              "`resolved`: the interval excludes 0.")  # fmt: skip


def oracle_from_interventions(runs: list[dict[str, Any]], inter: list[dict[str, Any]]) -> None:
    """Training runs of an experiment whose intervene stage measured oracle x random (the plan then
    turns the training's own oracle table off) get that table from their intervene cell."""
    grids = {(c["setting"], c["model"], c["seed"]): c["_results"] for c in inter}
    for m in runs:
        res = grids.get((m["_setting"], m.get("_model"), m.get("seed")))
        if m.get("oracle_random") or res is None:
            continue
        table = {str(r["k"]): r["accuracy"] for r in res["rows"] if (r["intervener"], r["policy"]) == ("oracle", "random")}
        if table:
            m["oracle_random"] = table


def write_experiment_report(root: str | Path) -> str:
    """report.md / report.json / one CSV per table / figures/ of a cbm-experiment directory; the
    markdown text."""
    from cbm.experiments import figures
    from cbm.experiments.diagnostics import write_diagnostics

    root = Path(root)
    manifest = read_manifest(root)
    cfg = manifest.get("config", {})
    paper = cfg.get("paper") or {}
    runs = []
    for cell in _cells(root, manifest, "train", "metrics.json"):
        m = cell["_results"]
        m["_config"], m["_setting"], m["_model"] = run_config(Path(cell["dir"])), cell["setting"], cell["model"]
        runs.append(m)
    inter = _cells(root, manifest, "intervene", "results.json")
    auto = _cells(root, manifest, "automate", "automation.json")
    oracle_from_interventions(runs, inter)
    tables = {"training": training_rows(runs) if runs else ([], []),
              "interventions": intervention_rows(inter, paper), "automation": automation_rows(auto, paper),
              "paired differences": paired_rows(inter, *comparisons(cfg)), "own answers": own_answer_rows(inter), "answer exchange": exchange_rows(inter),
              "cost of a check": cost_rows(auto, cfg.get("cost_models") or {}), "accuracy target sweep": target_rows(auto),
              "threshold rules": threshold_rows(auto), "confirmed confidence": confirmed_rows(auto),
              "rules": rule_rows(root, manifest)}  # fmt: skip
    cells = manifest["cells"]
    unfinished = [{"cell": c["key"], "status": c["status"], "why": c.get("note", "")} for c in cells if c["status"] != "done"]
    head = [f"# {manifest.get('name', root.name)}", "", manifest.get("description", ""), "",
            f"{sum(c['status'] == 'done' for c in cells)} of {len(cells)} cells finished"
            + (f"; wall time of the last invocation {manifest['wall_s']:.0f} s" if manifest.get("wall_s") else "") + ".",
            "", SEEDS_NOTE]  # fmt: skip
    parts = ["\n".join(head) + "\n"]
    for name, (rows, cols) in tables.items():
        if rows:
            parts.append(render(name.capitalize(), rows, cols))
            write_csv_atomic(root / f"{name.replace(' ', '_')}.csv", rows, cols)
    if unfinished:
        parts.append(render("Cells not finished", unfinished, ["cell", "status", "why"]))
    parts.append(render("Where the time went", *time_table(root, manifest)))
    settings = list(dict.fromkeys(c["setting"] for c in cells))
    safe = slugs(settings, f"{root / 'experiment.json'}: setting")  # read back: only safe file names
    figs = ensure_dir(root / "figures")
    drawn = [figures.accuracy_vs_k(inter, s, figs / f"accuracy_vs_k_{safe[s]}.png") for s in settings]
    drawn += [figures.automation_figure(auto, s, figs / f"automation_{safe[s]}.png") for s in settings]
    drawn.append(figures.gain_vs_setting(inter, settings, figs / "gain_vs_setting.png"))
    drawn_paths = [p for p in drawn if p is not None]
    if drawn_paths:
        parts.append("## Figures\n\n" + "\n".join(f"![{p.stem}](figures/{p.name})" for p in drawn_paths) + "\n")
    failed: list[str] = []
    diags = write_diagnostics(root, inter, auto, runs, figs, failed)
    if diags or failed:
        notes = [f"(a diagnostic figure could not be drawn: {why})" for why in failed]
        parts.append("## Diagnostics\n\n" + "\n\n".join([*(d.markdown(root) for d in diags), *notes]) + "\n")
    if (root / "diagnose" / "report.md").is_file():  # written by cbm-report diagnose
        parts.append("## Does each model use its concepts?\n\nLeakage, shuffled concepts, per-concept sensitivity, the concept "
                     "ceiling and unseen sub-types: [diagnose/report.md](diagnose/report.md) (`cbm-report diagnose`).\n")
    text = "\n".join(parts)
    write_text_atomic(root / "report.md", text)
    write_json_atomic(root / "report.json", {name: rows for name, (rows, _) in tables.items()} | {"unfinished": unfinished})
    if cfg.get("wandb"):
        log_to_wandb(manifest, tables, drawn_paths, root, diags, inter, auto)
    return text


def log_to_wandb(manifest: dict[str, Any], tables: dict[str, tuple[list, list]], images: list[Path], root: Path,
                 diags: Sequence[Diagnostic] = (), inter: Sequence[dict] = (), auto: Sequence[dict] = ()) -> None:  # fmt: skip
    """The report's W&B run, in the experiment's group with a stable id (a rerun of the report
    updates the same run): every cell's intervention and automation results as long-format tables
    (one row per setting x model x seed x intervener x policy x k, numeric columns) with accuracy-vs-k
    plots, each report table, the figures, and each diagnostic figure captioned with how to read
    it beside its data."""
    import csv

    import wandb

    from cbm.config.train import WandbConfig
    from cbm.tracking import wandb_run

    cfg = manifest.get("config") or {}
    name = str(manifest.get("name") or root.name)
    settings = WandbConfig(**{k: v for k, v in (cfg.get("wandb_settings") or {}).items() if k in WandbConfig.__dataclass_fields__})
    settings.mode = os.environ.get("WANDB_MODE", settings.mode)
    if settings.mode == "disabled":
        return
    kw = wandb_run.identity(settings, job_type="report", name=f"{name}-report", run_dir=root, job={}, group=name,
                            run_id=wandb_run.stable_id(settings.project, str(root.resolve()), "report"))  # fmt: skip
    run = wandb_run.start(kw, wandb_run.run_config(cfg, "cbm-report", job={}), root)
    try:
        cell_keys = ("setting", "model", "seed")
        rows = [{**{k: c[k] for k in cell_keys}, **r} for c in inter for r in c["_results"].get("rows", [])]
        if rows:
            cols = [*cell_keys, "intervener", "policy", "k", "accuracy", "gain", "mean_requested", "frac_requesting", "n_examples"]
            wandb_run.log_curves(run, "interventions", rows, cols, "k", "accuracy", [*cell_keys, "intervener", "policy"], "accuracy vs k")
        rows = [{**{k: c[k] for k in cell_keys}, **r} for c in auto for r in c["_results"].get("results", [])]
        if rows:
            cols = [*cell_keys, "k", "coverage", "selective_acc", "nwa", "nwa_cost", "rescued", "deferred"]
            wandb_run.log_curves(run, "automation", rows, cols, "k", "coverage", list(cell_keys), "coverage vs k")
        for tname, (trows, tcols) in tables.items():
            if trows:
                run.log({f"tables/{tname}": wandb.Table(columns=tcols, data=[[str(r.get(c, "")) for c in tcols] for r in trows])})
        run.log({p.stem: wandb.Image(str(p)) for p in images})
        for d in diags:
            with d.csv.open(newline="") as f:
                drows = list(csv.reader(f))
            panel = {f"diagnostics/{d.png.stem}": wandb.Image(str(d.png), caption=d.read_as)}
            if drows:
                panel[f"diagnostics/{d.png.stem}_data"] = wandb.Table(columns=drows[0], data=drows[1:])
            run.log(panel)
    except BaseException as err:
        wandb_run.finish(wandb_run.exit_code_for(err))
        raise
    wandb_run.finish(0)
    say(f"W&B: logged the report to group '{name}' as run {run.id} ({settings.mode})")


class ReportCallback(Callback):
    """Hydra callback: print the combined table when a multirun ends."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        root = Path(config.hydra.sweep.dir)
        try:
            print(f"\nResults of {root}:\n" + write_report(root))
        except FileNotFoundError as err:
            print(f"cbm-report: {err}", file=sys.stderr)


USAGE = ("usage: cbm-report RUN_SWEEP_OR_EXPERIMENT_DIR | cbm-report collect EXPERIMENT_DIR ARCHIVE_DIR | "
         "cbm-report diagnose RUN_OR_EXPERIMENT_DIR")


def collect_main(args: list[str]) -> None:
    """``cbm-report collect EXPERIMENT_DIR ARCHIVE_DIR``: the results archive (cbm.experiments.archive)."""
    from cbm.core.safe_paths import check_creatable
    from cbm.experiments.archive import collect

    if len(args) != 2 or any(a.startswith("-") for a in args):
        fail("cbm-report", "collect needs two folders: cbm-report collect EXPERIMENT_DIR ARCHIVE_DIR")
    root, out = Path(args[0]), Path(args[1])
    if not root.is_dir():
        fail("cbm-report", f"{root} " + ("is not a directory" if root.exists() else "does not exist"))
    try:
        check_creatable(out, "ARCHIVE_DIR")
        if dry_run("cbm-report"):
            return
        index = collect(root, out)
    except (OSError, ValueError) as err:  # not an experiment, archive inside it or unwritable
        fail("cbm-report", one_line(err))
    print(f"archive {out}: {len(index['cells'])} cell records of {len(index['seeds'])} seed(s)"
          + (f", {len(index['skipped'])} not archived (archive.json 'skipped' says why)" if index["skipped"] else ""))  # fmt: skip


def diagnose_main(args: list[str]) -> None:
    """``cbm-report diagnose RUN_OR_EXPERIMENT_DIR``: does each model use its concepts (cbm.experiments.diagnose)."""
    from cbm.experiments.diagnose import write

    if len(args) != 1 or args[0].startswith("-"):
        fail("cbm-report", "diagnose needs one folder: cbm-report diagnose RUN_OR_EXPERIMENT_DIR")
    root = Path(args[0])
    if not root.is_dir():
        fail("cbm-report", f"{root} " + ("is not a directory" if root.exists() else "does not exist"))
    if dry_run("cbm-report"):
        return
    try:
        print(f"diagnostics: {write(root)}")
    except (OSError, ValueError) as err:  # not a run or experiment, no concept model, unwritable
        fail("cbm-report", one_line(err))


@stoppable("cbm-report")
def main() -> None:
    if len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help"):
        print(f"{USAGE}\n\nA cbm-experiment directory: its report (report.md, one CSV per table, report.json,\n"
              "figures/). Any other directory: the metrics.json of every cbm-train run below it in one table,\n"
              "a column for every setting the runs differ in; writes results.md and results.json there.\n"
              "collect: an experiment's records (metrics, test predictions and concept probabilities, intervention\n"
              "and automation results) in one documented layout that the tables and paired tests read back.\n"
              "diagnose: does each trained model use its concepts? Leakage, shuffled concepts, per-concept\n"
              "sensitivity, the concept ceiling, unseen sub-types, hierarchy violations (DIR/diagnose/).")
        return
    if len(sys.argv) > 1 and sys.argv[1] == "collect":
        collect_main(sys.argv[2:])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "diagnose":
        diagnose_main(sys.argv[2:])
        return
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        fail("cbm-report", USAGE)
    target = Path(sys.argv[1])
    if not target.is_dir():
        fail("cbm-report", f"{target} " + ("is not a directory" if target.exists() else "does not exist"))
    if dry_run("cbm-report"):  # CBM_DRY_RUN=1: the command line is valid
        return
    try:
        print(write_report(sys.argv[1]))
    except OSError as err:  # missing directory, no runs in it, results not writable
        fail("cbm-report", one_line(err))


if __name__ == "__main__":
    main()
