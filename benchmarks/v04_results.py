"""The 0.4 tables' committed results: merge a run's seeds into them, and render the docs' tables.

The results files ``benchmarks/results/paper_v04_{alignment,sparse,own_answers}_seeds*.json`` keep,
per seed, what each intervention grid recorded::

    seeds.<seed>.<setting>.<model>.<intervener>.<k label> = {acc, frac_requesting, frac_changed}
    seeds.<seed>.<setting>.blackbox = the black box's test accuracy (when the run trained one)
    k_max.<setting> = the budget "max" stands for; policy = the policy every grid ran

and a Sudoku run's automation (``merge-automation``, the tau sweep's file)::

    automation.<seed>.<setting>.<model> = {n_concepts, target_accuracy, results, sweep[, confidence]}

so a table is re-computed from them with the package's own table code (:func:`cells`, then
:mod:`cbm.experiments.tables`): the docs' numbers are checked against these files by
``tests/experiments/test_v04_results.py``.

    python benchmarks/v04_results.py merge RUN_DIR benchmarks/results/paper_v04_alignment_seeds1014-1023.json
    python benchmarks/v04_results.py table alignment benchmarks/results/paper_v04_alignment_seeds1014-1023.json

``merge`` reads every ``<setting>/<model>/seed<S>/intervene/results.json`` under ``RUN_DIR`` (several
invocations of one experiment may share it) and replaces those seeds' entries; ``--seeds`` keeps to
some, ``--models`` to some models. ``table`` prints the markdown rows the docs show, a block per table.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from cbm.core.atomic import write_json_atomic
from cbm.experiments.stats import mean_se, paired, paired_text
from cbm.experiments.tables import (
    by_seed,
    confirmed_rows,
    grid_max,
    k_label,
    k_order,
    own_answer_rows,
    target_rows,
)

#: What a grid row keeps: the results.json field -> its name here.
KEPT = {"accuracy": "acc", "frac_requesting": "frac_requesting", "frac_changed": "frac_changed"}
#: Entries of a setting that are not models.
NOT_MODELS = {"blackbox", "answer_exchange"}
NAMES = {"cbm": "CBM", "cem": "CEM", "probcbm": "ProbCBM", "ecbm": "ECBM", "cbm_aligned": "constrained"}


def _found(run_dir: str | Path, name: str, seeds: set[int] | None, models: set[str] | None,
           ) -> list[tuple[str, str, int, Path]]:  # fmt: skip
    """``(setting, model, seed, path)`` of every ``<setting>/<model>/seed<S>/<name>`` under the run (of
    ``seeds`` and ``models`` only, when given)."""
    found = sorted(Path(run_dir).glob(f"*/*/seed*/{name}"))
    if not found:
        raise FileNotFoundError(f"{run_dir} holds no <setting>/<model>/seed<S>/{name}")
    out = []
    for path in found:
        setting, model, seed_dir = path.relative_to(run_dir).parts[:3]
        seed = int(seed_dir.removeprefix("seed"))
        if (seeds is None or seed in seeds) and (models is None or model in models):
            out.append((setting, model, seed, path))
    return out


def read_run(run_dir: str | Path, seeds: set[int] | None = None, models: set[str] | None = None,
             ) -> tuple[dict[str, Any], dict[str, int], set[str]]:  # fmt: skip
    """Per seed, setting, model and intervener, each budget's numbers from the run's intervention grids
    (of ``seeds`` and ``models`` only, when given); the budget ``max`` resolved to, per setting; the
    policies the grids ran."""
    out: dict[str, Any] = {}
    k_max: dict[str, int] = {}
    policies: set[str] = set()
    for setting, model, seed, path in _found(run_dir, "intervene/results.json", seeds, models):
        res = json.loads(path.read_text())
        m = grid_max(res)
        if k_max.setdefault(setting, m) != m:
            raise ValueError(f"{path}: budget max {m}, another grid of setting {setting} has {k_max[setting]}")
        slot = out.setdefault(str(seed), {}).setdefault(setting, {})
        if res.get("blackbox_accuracy") is not None:
            slot["blackbox"] = res["blackbox_accuracy"]
        grids = slot.setdefault(model, {})
        for r in res["rows"]:
            policies.add(r["policy"])
            grids.setdefault(r["intervener"], {})[k_label(r["k"], m)] = {name: r.get(f) for f, name in KEPT.items()}
    return out, k_max, policies


def merge(run_dir: str | Path, into: str | Path, seeds: set[int] | None = None, models: set[str] | None = None,
          ) -> dict[str, Any]:  # fmt: skip
    """Replace the per-seed entries of the results file ``into`` with the run's (the seeds and models it
    holds, or those of ``seeds`` and ``models``); every other entry stays. Written atomically. Returns
    the merged file."""
    doc = json.loads(Path(into).read_text())
    new, k_max, policies = read_run(run_dir, seeds, models)
    if not new:
        raise ValueError(f"{run_dir} holds no grid of the seeds {sorted(seeds or [])} and models {sorted(models or [])}")
    for setting, m in k_max.items():
        if doc.setdefault("k_max", {}).setdefault(setting, m) != m:
            raise ValueError(f"setting {setting}: the run's budget max is {m}, {into} has {doc['k_max'][setting]}")
    if len(policies | {doc.setdefault("policy", next(iter(policies)))}) != 1:
        raise ValueError(f"the run's policies {sorted(policies)} are not {into}'s one policy {doc['policy']}")
    for seed, settings in new.items():
        for setting, models in settings.items():
            doc.setdefault("seeds", {}).setdefault(seed, {}).setdefault(setting, {}).update(models)
    doc["seeds"] = dict(sorted(doc["seeds"].items(), key=lambda kv: int(kv[0])))
    write_json_atomic(into, doc)
    return doc


def cells(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The results file's grids as the experiment's intervene cells (``setting``, ``model``, ``seed``,
    ``_results``), which :mod:`cbm.experiments.tables` reads."""
    out = []
    for seed, settings in doc["seeds"].items():
        for setting, models in settings.items():
            m = int(doc["k_max"][setting])
            for model, grids in models.items():
                if model in NOT_MODELS:
                    continue
                rows = [{"intervener": iv, "policy": doc["policy"], "k": m if lab == "max" else int(lab),
                         **{f: v.get(name) for f, name in KEPT.items()}}
                        for iv, ks in grids.items() for lab, v in ks.items()]  # fmt: skip
                out.append({"setting": setting, "model": model, "seed": int(seed), "_results": {
                    "rows": rows, "meta": {"k_max": m}, "blackbox_accuracy": models.get("blackbox")}})  # fmt: skip
    return out


#: What an automation row keeps (cbm-automate's automation.json ``results`` and ``sweep``).
AUTO_KEPT = ("k", "tau", "coverage_before", "coverage", "selective_acc", "nwa", "meets_target", "note")


#: What an automation's ``confidence`` keeps (the per-split shares, not the histograms).
CONF_KEPT = ("abstained", "accuracy")


def _trim(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{f: r[f] for f in AUTO_KEPT if f in r} for r in results]


def merge_automation(run_dir: str | Path, into: str | Path, seeds: set[int] | None = None,
                     models: set[str] | None = None) -> dict[str, Any]:  # fmt: skip
    """Replace the per-seed automation entries of the results file ``into`` with the run's
    ``<setting>/<model>/seed<S>/automate/automation.json`` (the global target's rows and every swept
    target's, :data:`AUTO_KEPT` of each row): ``automation.<seed>.<setting>.<model>``. Atomic."""
    doc = json.loads(Path(into).read_text())
    found = _found(run_dir, "automate/automation.json", seeds, models)
    if not found:
        raise ValueError(f"{run_dir} holds no automation of the seeds {sorted(seeds or [])} and models {sorted(models or [])}")
    for setting, model, seed, path in found:
        rep = json.loads(path.read_text())
        entry = {"n_concepts": rep.get("n_concepts"), "target_accuracy": rep["calibration"]["target_accuracy"],
                 "results": _trim(rep["results"]),
                 "sweep": [{"target_accuracy": x["target_accuracy"], "results": _trim(x["results"])} for x in rep.get("sweep", [])]}  # fmt: skip
        conf = rep.get("confidence") or {}
        if conf.get("abstained"):  # confirmed confidence: each split's share held back and accuracy
            entry["confidence"] = {f: conf[f] for f in CONF_KEPT if f in conf}
        doc.setdefault("automation", {}).setdefault(str(seed), {}).setdefault(setting, {})[model] = entry
    doc["automation"] = dict(sorted(doc["automation"].items(), key=lambda kv: int(kv[0])))
    write_json_atomic(into, doc)
    return doc


def automation_cells(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The results file's automation entries as the experiment's automate cells."""
    return [{"setting": setting, "model": model, "seed": int(seed), "_results": {
                "n_concepts": e["n_concepts"], "calibration": {"target_accuracy": e["target_accuracy"]},
                "results": e["results"], "sweep": e["sweep"], **({"confidence": e["confidence"]} if "confidence" in e else {})}}
            for seed, settings in doc["automation"].items() for setting, models in settings.items()
            for model, e in models.items()]  # fmt: skip


def _md(cols: list[str]) -> str:
    """One markdown table row, with the typographic minus the docs use."""
    return "| " + " | ".join(cols).replace("-", "−") + " |"


def alignment_table(doc: dict[str, Any]) -> list[list[str]]:
    """One table, a row per concept set: seeds, the CBM and the constrained head at k = 0 → max (mean ± SE), their paired
    differences at k = 0 and max (constrained − CBM), and the paper's numbers."""
    acc, _, _ = by_seed(cells(doc))
    out = []
    for setting in ("true", "human"):
        def get(model: str, k: str, setting: str = setting) -> dict[int, float]:
            return acc.get((setting, model, "oracle", doc["policy"], k), {})

        ends = [" → ".join(mean_se(get(model, k).values()) for k in ("0", "max")) for model in ("cbm", "cbm_aligned")]
        diffs = [paired_text(paired(get("cbm_aligned", k), get("cbm", k))) for k in ("0", "max")]
        paper = "; ".join(" → ".join(str(x) for x in doc["paper"][setting][model]) for model in ("cbm", "cbm_aligned"))
        out.append(_md([setting, str(len(get("cbm", "0"))), *ends, *diffs, paper]))
    return [out]


def sparse_table(doc: dict[str, Any]) -> list[list[str]]:
    """A table per concept set, a row per model: k = 0, oracle k = 1 / 3 / max and expert k = max (mean ±
    SE). The black box reads the images alone, so it is one model for both sets: the true set's table
    shows it."""
    acc, bb, _ = by_seed(cells(doc))
    out = []
    for setting in ("true", "human"):
        block = [f"| black box | {mean_se(bb[setting].values())} | | | | |"] if setting == "true" and setting in bb else []
        for model in ("cbm", "cem", "probcbm", "ecbm"):
            got = [acc.get((setting, model, iv, doc["policy"], k), {}).values()
                   for iv, k in (("oracle", "0"), ("oracle", "1"), ("oracle", "3"), ("oracle", "max"), ("expert", "max"))]  # fmt: skip
            block.append(_md([NAMES[model], *(mean_se(v) for v in got)]))
        out.append(block)
    return out


def own_answers_table(doc: dict[str, Any]) -> list[list[str]]:
    """One table, a row per model: its seeds, the accuracy change on the robots intervened on (points,
    mean ± SE) with its own answers and with the true values, on true and on human concepts
    (:func:`own_answer_rows`)."""
    grids = cells(doc)
    rows, _ = own_answer_rows(grids)
    by = {(r["setting"], r["model"]): r for r in rows}
    models = sorted({r["model"] for r in rows}, key=lambda m: list(NAMES).index(m))
    return [[_md([NAMES[m], span(sorted({c["seed"] for c in grids if c["model"] == m})),
                  *(by[(s, m)][c] for s in ("true", "human") for c in ("own answers (points)", "true values (points)"))])
             for m in models]]  # fmt: skip


def span(seeds: list[int]) -> str:
    """``1014–1016`` for consecutive seeds, else ``1014, 1016``."""
    if len(seeds) > 1 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}–{seeds[-1]}"
    return ", ".join(map(str, seeds))


def tau_table(doc: dict[str, Any]) -> list[list[str]]:
    """0.4.1's accuracy-target (tau) sweep, one table per setting, a row per target: the CBM's coverage at
    every budget, its NWA at k > 0 (at k = 0 it is the coverage), its selective accuracy at k = 0 and the
    DNN's coverage (mean ± SE over seeds, in %; :func:`target_rows`)."""
    rows, _ = target_rows(automation_cells(doc))
    by = {(r["setting"], r["model"], r["target %"], r["k"]): r for r in rows}
    out = []
    for setting in dict.fromkeys(r["setting"] for r in rows):
        ks = sorted({r["k"] for r in rows if r["setting"] == setting and r["model"] == "cbm"}, key=k_order)
        block = []
        for target in sorted({r["target %"] for r in rows if r["setting"] == setting}, key=float):
            cbm = [by[(setting, "cbm", target, k)] for k in ks]
            dnn = by.get((setting, "blackbox", target, "0"), {}).get("coverage %", "")
            block.append(_md([f"{target}%", *(r["coverage %"] for r in cbm), *(r["NWA %"] for r in cbm[1:]),
                              cbm[0]["sel. acc %"], dnn]))  # fmt: skip
        out.append(block)
    return out


def confirmed_table(doc: dict[str, Any]) -> list[list[str]]:
    """Confirmed confidence, a row per (setting, model) that scored it: seeds, the share held back and the
    accuracy as predicted → with every concept true (mean ± SE, %), and the paired differences
    (:func:`confirmed_rows`)."""
    rows, _ = confirmed_rows(automation_cells(doc))
    return [[_md([NAMES.get(r["model"], r["model"]), str(r["seeds"]),
                  f"{r['held back %']} → {r['held back, every concept true %']}", r["held back: difference (points) [95% CI]"],
                  f"{r['accuracy %']} → {r['accuracy, every concept true %']}", r["accuracy: difference (points) [95% CI]"]])
             for r in rows]]  # fmt: skip


TABLES = {"confirmed": confirmed_table, "alignment": alignment_table, "sparse": sparse_table, "own_answers": own_answers_table, "tau": tau_table}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("merge", help="merge a run's seeds into a results file")
    m.add_argument("run_dir")
    m.add_argument("into")
    ma = sub.add_parser("merge-automation", help="merge a run's automation (cbm-automate) into a results file")
    ma.add_argument("run_dir")
    ma.add_argument("into")
    for p in (m, ma):
        p.add_argument("--seeds", type=lambda s: {int(x) for x in s.split(",")}, help="comma-separated seeds to take (default: all)")
        p.add_argument("--models", type=lambda s: set(s.split(",")), help="comma-separated models to take (default: all)")
    t = sub.add_parser("table", help="print the docs' markdown rows of a results file")
    t.add_argument("table", choices=sorted(TABLES))
    t.add_argument("results")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "merge":
            doc = merge(a.run_dir, a.into, a.seeds, a.models)
            print(f"{a.into}: seeds {', '.join(doc['seeds'])}")
        elif a.cmd == "merge-automation":
            doc = merge_automation(a.run_dir, a.into, a.seeds, a.models)
            print(f"{a.into}: automation of seeds {', '.join(doc['automation'])}")
        else:
            print("\n\n".join("\n".join(block) for block in TABLES[a.table](json.loads(Path(a.results).read_text()))))
    except (OSError, ValueError, KeyError) as e:
        print(f"v04_results: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
