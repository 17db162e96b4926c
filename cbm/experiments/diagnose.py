"""``cbm-report diagnose DIR``: does each trained model use its concepts?

``DIR`` is a ``cbm-train`` run or a ``cbm-experiment`` (every finished training cell with concepts;
black boxes are listed as skipped). Each model is read on its test split by
:func:`cbm.interventions.diagnose.diagnose` (leakage, shuffled concepts, per-concept sensitivity,
the concept ceiling, unseen sub-types, hierarchy violations). Written to ``DIR/diagnose/``:

- ``report.md``: one table per setting, a row per model (mean ± SE over seeds), how to read it, the figures;
- ``runs.csv`` (a row per trained model) and ``concepts.csv`` (a row per model and concept);
- ``diagnose.json``: everything, per cell;
- ``leakage.png`` (accuracy as predicted, with every concept revealed, with the concepts at their
  marginals, and the own-label share under shuffled concepts) and ``sensitivity.png`` (per concept:
  accuracy with its true value minus accuracy with it flipped).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from cbm.core.atomic import savefig_atomic, write_csv_atomic, write_json_atomic, write_text_atomic
from cbm.core.common import say
from cbm.core.tables import markdown_table
from cbm.experiments.archive import read_manifest
from cbm.experiments.stats import mean_se, summarise
from cbm.experiments.tables import ARCH_ORDER, run_config

#: Percent scale of the figures and tables (the CSVs and JSON keep fractions).
PCT = 100.0
#: Panel size in inches and the figures' resolution.
PANEL_W, PANEL_H, DPI = 6.0, 3.6, 110
#: Font size of concept names.
SMALL = 6

RUN_COLUMNS = ["setting", "model", "seed", "accuracy", "oracle", "marginal", "majority", "leakage", "follows_concepts",
               "follows_own", "oracle_error", "ceiling", "unseen_vectors", "violating_fraction"]  # fmt: skip
CONCEPT_COLUMNS = ["setting", "model", "seed", "concept", "detector", "true", "flipped", "changed"]

READ_AS = """\
How to read it (fractions in the CSVs, % here; mean ± SE over seeds):

- **k = 0 / oracle**: accuracy as predicted / with every concept set to its true value.
- **marginal** vs **majority**: accuracy with every concept set to its training marginal P(c = 1),
  against the best constant guess. **leakage** = marginal - majority: what reaches the label past the
  concepts (0 or below for a model that reads only its concepts).
- **own label**: with every concept set to another row's true concepts, the share of rows (whose two
  labels differ) on which the model keeps its own row's label; a model that reads only its concepts
  does so exactly where it errs on the donor rows with their true concepts (**oracle error**, two
  classes). More is read past the concepts.
- **ceiling**: the best accuracy any rule reading the true concepts reaches (each true concept
  vector's majority training label); the gap to the oracle is the label head's, not the detector's.
- **unseen**: rows whose attribute value (e.g. a foot sub-type) training never saw: k = 0 -> oracle.
- **violating**: rows whose predicted concepts break an implication between concepts.
"""


def _targets(root: Path) -> tuple[list[dict[str, Any]], str | None]:
    """``[{setting, model, seed, dir}]`` of the runs below ``root`` and the cache they read."""
    if (root / "experiment.json").is_file():
        manifest = read_manifest(root)
        cells = [{"setting": c["setting"], "model": c["model"], "seed": int(c["seed"]), "dir": root / c["dir"]}
                 for c in manifest["cells"] if c.get("stage") == "train" and c.get("status") == "done"]  # fmt: skip
        if not cells:
            raise ValueError(f"{root} holds no finished training cell")
        return cells, manifest.get("config", {}).get("cache_dir")
    if (root / "checkpoints").is_dir():
        cfg = run_config(root)
        model = cfg.get("model", {}).get("name", "model") if isinstance(cfg.get("model"), dict) else "model"
        return [{"setting": "-", "model": str(model), "seed": int(cfg.get("seed", 0) or 0), "dir": root}], cfg.get("cache_dir")
    raise ValueError(f"{root} is neither a cbm-train run (no checkpoints/) nor a cbm-experiment (no experiment.json)")


def diagnose_run(run_dir: Path, cache_dir: str | Path | None) -> dict[str, Any] | None:
    """The diagnostics of one trained run on its test split (``None``: a black box)."""
    import torch

    from cbm.interventions.diagnose import diagnose
    from cbm.interventions.hierarchy import Implications
    from cbm.training.checkpoint import load_run
    from synthetic.registry import concept_implications

    model, dm, data_cfg = load_run(run_dir, cache_dir)
    if not model.has_concepts:
        return None
    model.eval()
    names = list(model.info.concept_names)
    implied = concept_implications(data_cfg)
    structure = None if implied is None else Implications.build(names, implied)
    tensors = dm.split("train").tensors
    train = {k: tensors[k] for k in ("c", "c_clean", "y", "meta") if k in tensors}
    meta_names = list(getattr(getattr(dm, "data", None), "meta_names", []) or [])
    with torch.no_grad():
        return diagnose(model, dm.loader("test"), train, names, structure, meta_names)


def _flat(cell: dict[str, Any], d: dict[str, Any]) -> dict[str, Any]:
    h = d.get("hierarchy") or {}
    return {"setting": cell["setting"], "model": cell["model"], "seed": cell["seed"], **d["leakage"],
            "ceiling": d["ceiling"]["concepts"], "unseen_vectors": d["ceiling"]["unseen_vectors"],
            "violating_fraction": h.get("violating_fraction")}  # fmt: skip


def _order(models: list[str]) -> list[str]:
    return sorted(dict.fromkeys(models), key=lambda m: (ARCH_ORDER.get(m, len(ARCH_ORDER)), m))


def summary_rows(results: list[dict[str, Any]], setting: str) -> list[dict[str, Any]]:
    """One row per model of ``setting``: every diagnostic as mean ± SE over seeds (%)."""
    rows = []
    cells = [r for r in results if r["setting"] == setting]
    for model in _order([r["model"] for r in cells]):
        mine = [r for r in cells if r["model"] == model]
        flat = [_flat(r, r["diagnosis"]) for r in mine]
        row = {"model": model, "seeds": len(mine)}
        for col, key in [("k = 0", "accuracy"), ("oracle", "oracle"), ("marginal", "marginal"), ("majority", "majority"),
                         ("leakage", "leakage"), ("own label", "follows_own"), ("oracle error", "oracle_error"),
                         ("ceiling", "ceiling"), ("violating", "violating_fraction")]:  # fmt: skip
            row[col] = mean_se([f[key] for f in flat], PCT, signed=key == "leakage")
        kinds = dict.fromkeys(u["kind"] for r in mine for u in r["diagnosis"]["unseen"] if u["kind"] != "concept vector")
        for kind in kinds:
            got = [u for r in mine for u in r["diagnosis"]["unseen"] if u["kind"] == kind]
            row[f"unseen {kind}"] = f"{mean_se([u['accuracy'] for u in got], PCT)} -> {mean_se([u['oracle'] for u in got], PCT)}"
        rows.append(row)
    return rows


def _bars(ax, groups: list[str], series: dict[str, list[list[float]]]) -> None:
    """Grouped bars (mean over seeds, ± SE whiskers): one group per label, one bar per series."""
    width = 0.8 / max(len(series), 1)
    for i, (name, values) in enumerate(series.items()):
        stats = [summarise(v) for v in values]
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        means = [PCT * s.mean if s else 0.0 for s in stats]
        errs = [PCT * (s.se or 0.0) if s else 0.0 for s in stats]
        ax.bar(xs, means, width, yerr=errs, label=name, capsize=2)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, rotation=30, ha="right", fontsize=7)


def leakage_figure(results: list[dict[str, Any]], path: Path) -> Path:
    """Bars per setting / model: k = 0, oracle, marginal and the own-label share under shuffling."""
    keys = [(r["setting"], r["model"]) for r in results]
    groups = list(dict.fromkeys(keys))
    labels = [m if s == "-" else f"{s}/{m}" for s, m in groups]
    series: dict[str, list[list[float]]] = {}
    for name, key in [("k = 0", "accuracy"), ("oracle", "oracle"), ("concepts at marginals", "marginal"),
                      ("own label, shuffled concepts", "follows_own")]:  # fmt: skip
        series[name] = [[r["diagnosis"]["leakage"][key] for r in results if (r["setting"], r["model"]) == g
                         and r["diagnosis"]["leakage"][key] is not None] for g in groups]  # fmt: skip
    fig = Figure(figsize=(max(PANEL_W, 0.9 * len(groups) + 2), PANEL_H), dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    _bars(ax, labels, series)
    majority = [r["diagnosis"]["leakage"]["majority"] for r in results]
    ax.axhline(PCT * sum(majority) / len(majority), color="black", linestyle="--", linewidth=1, label="majority class")
    ax.set_ylabel("accuracy / share (%)")
    ax.set_ylim(0, 105)
    ax.set_title("Leakage: what reaches the label past the concepts", fontsize=9)
    ax.legend(fontsize=6, loc="lower right")
    fig.tight_layout()
    return savefig_atomic(fig, path)


def sensitivity_figure(results: list[dict[str, Any]], path: Path) -> Path:
    """Per setting, per concept: accuracy with the true value minus with the flipped value, a bar per model."""
    settings = list(dict.fromkeys(r["setting"] for r in results))
    fig = Figure(figsize=(PANEL_W * 1.4, PANEL_H * len(settings)), dpi=DPI)
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(settings), 1, squeeze=False)[:, 0]
    for ax, setting in zip(axes, settings):
        cells = [r for r in results if r["setting"] == setting]
        concepts = [c["concept"] for c in cells[0]["diagnosis"]["sensitivity"]]
        series = {}
        for model in _order([r["model"] for r in cells]):
            per = [r["diagnosis"]["sensitivity"] for r in cells if r["model"] == model]
            series[model] = [[s[j]["true"] - s[j]["flipped"] for s in per] for j in range(len(concepts))]
        _bars(ax, concepts, series)
        for label in ax.get_xticklabels():
            label.set_fontsize(SMALL)
        ax.axhline(0, color="black", linewidth=0.6)
        ax.set_ylabel("true - flipped (points)")
        ax.set_title(f"Sensitivity to each concept ({setting})" if setting != "-" else "Sensitivity to each concept", fontsize=9)
        ax.legend(fontsize=6)
    fig.tight_layout()
    return savefig_atomic(fig, path)


def write(root: str | Path) -> Path:
    """Diagnose every trained model below ``root`` and write ``root/diagnose/`` (module doc)."""
    root = Path(root)
    cells, cache = _targets(root)
    out = root / "diagnose"
    results, skipped = [], []
    for i, cell in enumerate(cells, 1):
        where = f"{cell['setting']}/{cell['model']}/seed{cell['seed']}"
        d = diagnose_run(cell["dir"], cache)
        if d is None:
            skipped.append({"cell": where, "why": "a black box: no concepts"})
            say(f"[{i}/{len(cells)}] {where}: a black box, skipped")
            continue
        lk = d["leakage"]
        say(f"[{i}/{len(cells)}] {where}: k=0 {PCT * lk['accuracy']:.2f}%, concepts at marginals {PCT * lk['marginal']:.2f}% "
            f"(majority {PCT * lk['majority']:.2f}%)")  # fmt: skip
        results.append({"setting": cell["setting"], "model": cell["model"], "seed": cell["seed"], "dir": str(cell["dir"]), "diagnosis": d})
    if not results:
        raise ValueError(f"{root}: no trained model with concepts to diagnose ({len(skipped)} black box(es))")
    write_json_atomic(out / "diagnose.json", {"cells": results, "skipped": skipped})
    write_csv_atomic(out / "runs.csv", [_flat(r, r["diagnosis"]) for r in results], RUN_COLUMNS)
    per_concept = [{"setting": r["setting"], "model": r["model"], "seed": r["seed"], **s} for r in results for s in r["diagnosis"]["sensitivity"]]
    write_csv_atomic(out / "concepts.csv", per_concept, CONCEPT_COLUMNS)
    leakage_figure(results, out / "leakage.png")
    sensitivity_figure(results, out / "sensitivity.png")
    parts = [f"# Diagnostics: {root.name}\n", READ_AS]
    for setting in dict.fromkeys(r["setting"] for r in results):
        rows = summary_rows(results, setting)
        cols = list(dict.fromkeys(k for row in rows for k in row))
        parts.append(("" if setting == "-" else f"## {setting}\n\n") + markdown_table(rows, cols) + "\n")
    if skipped:
        parts.append("Skipped: " + "; ".join(f"{s['cell']} ({s['why']})" for s in skipped) + "\n")
    parts.append("![leakage](leakage.png)\n\n![sensitivity](sensitivity.png)\n")
    report = write_text_atomic(out / "report.md", "\n".join(parts))
    return report
