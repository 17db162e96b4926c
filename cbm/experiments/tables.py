"""The tables of an experiment (``cbm-experiment``'s report) and of any sweep of ``cbm-train`` runs.

Rows are read from the runs' own files (``metrics.json``, ``results.json``, ``automation.json``),
summarised over seeds (mean ± standard error, and n), with the swept settings as columns, Gain against the paired black
box, the paper's numbers beside ours where the preset names them, and ``n/a`` rows (with the reason)
for parts of the grid that could not run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cbm.core.tables import markdown_table
from cbm.experiments.stats import mean_se, paired, paired_text

#: Config keys that locate or label a run rather than define it (never a "swept setting").
NOT_SETTINGS = ("output_dir", "cache_dir", "seed", "interventions", "eval_batch_size", "trainer.enable_progress_bar", "data.root")
ARCH_ORDER = {"blackbox": 0, "cbm": 1, "cem": 2, "probcbm": 3, "ecbm": 4, "hybrid_cbm": 5, "scbm": 6, "intcem": 7, "dcr": 8}


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    """``{"data": {"blur": 1}}`` -> ``{"data.blur": 1}`` (lists as their JSON text)."""
    if not isinstance(d, dict):
        return {prefix: json.dumps(d) if isinstance(d, list) else d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def _varied(flat: list[dict[str, Any]]) -> list[str]:
    keys = sorted({k for f in flat for k in f})
    return [k for k in keys if len({json.dumps(f.get(k), sort_keys=True) for f in flat}) > 1]


def canonical_data(cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` with its ``data`` block as the generator records it (knobs added later dropped at
    their neutral value): runs written before and after such a knob compare equal."""
    from cbm.core.validation import ConfigError
    from synthetic.registry import data_config

    data = cfg.get("data")
    if not isinstance(data, dict):
        return cfg
    try:
        dc = data_config(data)
    except (ConfigError, ValueError, TypeError):
        return cfg
    return {**cfg, "data": dc.record() if hasattr(dc, "record") else dc.to_dict()}


def swept_keys(configs: list[dict[str, Any]], flat: list[dict[str, Any]] | None = None) -> list[str]:
    """The settings a sweep varied: data keys whose value differs between runs, other keys whose
    value differs between runs of the same architecture (two architectures' own defaults are not
    a swept setting). ``flat``: the configs already canonical and flattened (computed if absent)."""
    flat = [flatten(canonical_data(c)) for c in configs] if flat is None else flat
    keys = [k for k in _varied(flat) if k.startswith("data.")]
    by_arch: dict[Any, list[dict[str, Any]]] = {}
    for f in flat:
        by_arch.setdefault(f.get("model.name"), []).append(f)
    for group in by_arch.values():
        keys += [k for k in _varied(group) if not k.startswith("data.") and k not in keys]
    return [k for k in sorted(keys) if not k.startswith(NOT_SETTINGS)]


def run_config(run_dir: Path) -> dict[str, Any]:
    """The resolved config a cbm-train run stored (``{}`` when absent)."""
    import yaml

    try:
        return yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}


def k_label(k: int, m: int) -> str:
    return "max" if m and k == m else str(k)


def k_order(label: str) -> tuple[bool, int]:
    """Sort key of a :func:`k_label`: the integers in order, ``max`` last."""
    return label == "max", int(label) if label.isdigit() else 0


def grid_max(results: dict[str, Any]) -> int:
    """The budget ``max`` resolved to in an intervention grid's ``results.json``: ``meta.k_max`` (groups
    or cost units), else the number of concepts (grids written before it was recorded)."""
    meta = results.get("meta", {})
    return int(meta.get("k_max") or len(meta.get("concepts", [])))


# ----------------------------------------------------------------------------- training
def training_rows(runs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per (setting, model) over seeds: swept settings, task / concept accuracy, oracle."""
    flats = [flatten(canonical_data(r["_config"])) for r in runs]  # once per run: it builds the data config
    swept = swept_keys([], flats)
    groups: dict[tuple, list[dict[str, Any]]] = {}
    first_flat: dict[tuple, dict[str, Any]] = {}
    for r, flat in zip(runs, flats):
        key = (r.get("_setting", ""), r["model"], *(json.dumps(flat.get(k)) for k in swept))
        groups.setdefault(key, []).append(r)
        first_flat.setdefault(key, flat)
    def oracle(r: dict[str, Any]) -> dict[str, float]:  # budgets as labels: the largest is every concept
        o = r.get("oracle_random", {})
        top = max(o, key=int) if o else None
        return {("max" if k == top and int(k) > 0 else k): v for k, v in o.items()}

    ks = sorted({k for r in runs for k in oracle(r)}, key=lambda k: (k == "max", int(k) if k != "max" else 0))
    rows = []
    for key, rs in groups.items():
        flat = first_flat[key]
        row: dict[str, Any] = {"setting": key[0]} if key[0] else {}
        row["model"] = rs[0]["model"] + (f" ({rs[0]['training']})" if rs[0].get("training") and rs[0]["model"] != "blackbox" else "")
        row.update({k: "" if flat.get(k) is None else str(flat.get(k)) for k in swept})
        row["seeds"] = len(rs)
        row["task acc"] = mean_se(r.get("test/task_acc") for r in rs)
        row["concept acc"] = mean_se(r.get("test/concept_acc") for r in rs)
        for k in ks:
            row[f"oracle k={k}"] = mean_se(oracle(r).get(k) for r in rs)
        rows.append(row)
    cols = [c for c in rows[0]] if rows else []
    for row in rows:
        cols += [c for c in row if c not in cols]
    return rows, cols


# ----------------------------------------------------------------------------- interventions
def intervention_rows(cells: list[dict[str, Any]], paper: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """Wide rows: accuracy and Gain at every budget per (setting, model, intervener, policy)."""
    seeded, bb, labels = by_seed(cells)
    acc: dict[tuple, dict[str, list[float]]] = {}  # (setting, model, intervener, policy) -> label -> values
    gain: dict[tuple, dict[str, list[float]]] = {}  # the same, accuracy - the same seed's black box
    for (setting, model, iv, pol, lab), vals in seeded.items():
        acc.setdefault((setting, model, iv, pol), {})[lab] = list(vals.values())
        if setting in bb:
            paired_bb = [v - bb[setting][s] for s, v in vals.items() if s in bb[setting]]
            gain.setdefault((setting, model, iv, pol), {})[lab] = paired_bb
    na: dict[tuple, str] = {}
    for cell in cells:
        res = cell["_results"]
        for name, why in (cell.get("skipped") or {}).items():
            for pol in res.get("meta", {}).get("config", {}).get("policy", {}):
                na[(cell["setting"], cell["model"], name, pol)] = why
    paper_t = paper.get("interventions", {})
    paper_policy = paper.get("policy", "random")  # the policy that chose the paper's interventions
    rows: list[dict[str, Any]] = []
    for setting in dict.fromkeys(k[0] for k in [*acc, *na]):
        if setting in bb:
            row = {"setting": setting, "model": "blackbox", "intervener": "", "policy": "", "seeds": len(bb[setting]),
                   **{f"acc k={k}": "" for k in labels}}  # fmt: skip
            row["acc k=0"] = mean_se(bb[setting].values())
            rows.append(_with_paper(row, paper_t.get(setting, {}).get("blackbox", {})))
        keys = sorted([k for k in [*acc, *na] if k[0] == setting], key=lambda k: (ARCH_ORDER.get(k[1], 9), k[1], k[2], k[3]))
        for key in dict.fromkeys(keys):
            row = {"setting": setting, "model": key[1], "intervener": key[2], "policy": key[3]}
            if key in na and key not in acc:
                row.update({f"acc k={k}": "n/a" for k in labels})
                row["note"] = na[key]
            else:
                row["seeds"] = max(len(v) for v in acc[key].values())
                row.update({f"acc k={k}": mean_se(acc[key].get(k, [])) for k in labels})
                if key in gain:
                    row.update({f"Gain k={k}": mean_se(gain[key].get(k, []), signed=True) for k in labels})
            if key[2] == "oracle" and key[3] == paper_policy:  # the paper's numbers are oracle interventions
                row = _with_paper(row, paper_t.get(setting, {}).get(key[1], {}))
            rows.append(row)
    cols = ["setting", "model", "intervener", "policy", "seeds", *[f"acc k={k}" for k in labels]]
    if gain:
        cols += [f"Gain k={k}" for k in labels]
    cols += sorted({c for r in rows for c in r if c.startswith("paper ")}) + (["note"] if na else [])
    return rows, cols


# ----------------------------------------------------------------------------- paired differences
def by_seed(cells: list[dict[str, Any]]) -> tuple[dict[tuple, dict[int, float]], dict[str, dict[int, float]], list[str]]:
    """Intervention accuracies ``(setting, model, intervener, policy, k label) -> {seed: acc}``, the
    black boxes ``setting -> {seed: acc}`` and the budget labels in order."""
    acc: dict[tuple, dict[int, float]] = {}
    bb: dict[str, dict[int, float]] = {}
    labels: list[str] = []
    for cell in cells:
        res = cell["_results"]
        m = grid_max(res)
        if res.get("blackbox_accuracy") is not None:
            bb.setdefault(cell["setting"], {})[cell["seed"]] = res["blackbox_accuracy"]
        for r in res["rows"]:
            lab = k_label(r["k"], m)
            labels += [lab] if lab not in labels else []
            acc.setdefault((cell["setting"], cell["model"], r["intervener"], r["policy"], lab), {})[cell["seed"]] = r["accuracy"]
    labels.sort(key=k_order)
    return acc, bb, labels


def paired_rows(cells: list[dict[str, Any]], model_pairs: list[list[str]], policy_pairs: list[list[str]],
                ) -> tuple[list[dict[str, Any]], list[str]]:  # fmt: skip
    """Paired differences over seeds, each the mean of the per-seed differences with its 95% t
    interval: Gain (model - its black box) at k = 0 and k = max, every policy pair at the budgets
    between, every model pair at k = 0 and k = max. ``resolved``: the interval excludes 0."""
    acc, bb, labels = by_seed(cells)
    ends = [k for k in ("0", "max") if k in labels]
    inner = [k for k in labels if k not in ("0", "max")]
    rows: list[dict[str, Any]] = []

    def add(what: str, setting: str, model: str, intervener: str, policy: str, k: str, a: dict, b: dict) -> None:
        p = paired(a, b)
        if p is not None:
            rows.append({"comparison": what, "setting": setting, "model": model, "intervener": intervener, "policy": policy,
                         "k": k, "difference (points) [95% CI]": paired_text(p), "seeds": p.n,
                         "resolved": "yes" if p.excludes_zero else ("no" if p.low is not None else "")})  # fmt: skip

    keys = sorted({key[:4] for key in acc}, key=lambda t: (t[0], ARCH_ORDER.get(t[1], 9), *t[1:]))
    for setting, model, iv, pol in keys:
        if setting in bb:
            for k in ends:
                add("Gain (model - black box)", setting, model, iv, pol, k, acc.get((setting, model, iv, pol, k), {}), bb[setting])
    for a, b in policy_pairs:
        for setting, model, iv in dict.fromkeys(key[:3] for key in keys):
            for k in inner:
                add(f"policy {a} - {b}", setting, model, iv, "", k, acc.get((setting, model, iv, a, k), {}),
                    acc.get((setting, model, iv, b, k), {}))  # fmt: skip
    for a, b in model_pairs:
        for setting, iv, pol in dict.fromkeys((key[0], key[2], key[3]) for key in keys):
            for k in ends:
                add(f"model {a} - {b}", setting, "", iv, pol, k, acc.get((setting, a, iv, pol, k), {}),
                    acc.get((setting, b, iv, pol, k), {}))  # fmt: skip
    cols = ["comparison", "setting", "model", "intervener", "policy", "k", "difference (points) [95% CI]", "seeds", "resolved"]
    return rows, cols


# ----------------------------------------------------------------------------- own answers
#: The interveners the own-answers table compares: the model's own ``1[p > 0.5]`` and the true values.
OWN, TRUE = "self", "oracle"


def change_on_intervened(rows: list[dict[str, Any]]) -> tuple[float | None, float | None]:
    """For one grid (intervener, policy) of one cell: the accuracy change on the rows intervened on,
    ``(acc_k - acc_0) / frac_requesting`` (0.4.1's own-answers table), and the share intervened on,
    each averaged over the budgets ``k > 0`` that intervene on some row; ``(None, None)`` when none does."""
    base = next((r["accuracy"] for r in rows if r["k"] == 0), None)
    later = [r for r in rows if r["k"] != 0 and (r.get("frac_requesting") or 0) > 0]
    if base is None or not later:
        return None, None
    changes = [(r["accuracy"] - base) / r["frac_requesting"] for r in later]
    return sum(changes) / len(changes), sum(r["frac_requesting"] for r in later) / len(later)


def own_answer_rows(cells: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Per (setting, model, policy) whose grid has both the ``self`` and the ``oracle`` intervener:
    the change on the rows intervened on with the model's own answers and with the true values (points,
    mean ± SE over seeds) and their paired difference. Own answers change no concept value, so what they
    move comes from the intervention mechanism alone (a soft readout made hard, a side channel cut)."""
    per: dict[tuple[str, str, str], dict[str, dict[int, float]]] = {}
    for cell in cells:
        grid: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for r in cell["_results"]["rows"]:
            grid.setdefault((r["intervener"], r["policy"]), []).append(r)
        for (iv, pol), rows in grid.items():
            if iv not in (OWN, TRUE) or (OWN if iv == TRUE else TRUE, pol) not in grid:
                continue
            change, share = change_on_intervened(rows)
            if change is None:
                continue
            slot = per.setdefault((cell["setting"], cell["model"], pol), {OWN: {}, TRUE: {}, "share": {}})
            slot[iv][cell["seed"]] = change
            slot["share"][cell["seed"]] = share
    rows = []
    for (setting, model, pol), v in sorted(per.items(), key=lambda kv: (kv[0][0], ARCH_ORDER.get(kv[0][1], 9), kv[0][1], kv[0][2])):
        p = paired(v[TRUE], v[OWN])
        rows.append({"setting": setting, "model": model, "policy": pol, "seeds": len(v[OWN]),
                     "intervened on %": mean_se(v["share"].values()),
                     "own answers (points)": mean_se(v[OWN].values(), signed=True),
                     "true values (points)": mean_se(v[TRUE].values(), signed=True),
                     "true - own [95% CI]": paired_text(p),
                     "resolved": "" if p is None or p.low is None else ("yes" if p.excludes_zero else "no")})  # fmt: skip
    cols = ["setting", "model", "policy", "seeds", "intervened on %", "own answers (points)", "true values (points)",
            "true - own [95% CI]", "resolved"]  # fmt: skip
    return rows, cols


# ----------------------------------------------------------------------------- answer exchange
def exchange_rows(cells: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """0.4.1's answer-exchange table: per (setting, model, policy) of grids run with ``exchange``, the
    accuracy (mean ± SE over seeds) at every budget k > 0 of each intervener on every concept and of
    each with the other's answers on the exchanged concept, and how many points that one concept's
    answers move at the largest budget (paired over seeds, 95% CI)."""
    acc, _, labels = by_seed(cells)
    ks = [k for k in labels if k != "0"]
    swaps: dict[tuple[str, str, str], dict[str, tuple[str, str]]] = {}  # (setting, model, policy) -> row -> (answers, with)
    concept: dict[tuple[str, str], str] = {}
    for cell in cells:
        meta = cell["_results"].get("meta", {})
        for name, x in (meta.get("exchange") or {}).items():
            for pol in meta.get("policies", []):
                swaps.setdefault((cell["setting"], cell["model"], pol), {})[name] = (x["answers"], x["with"])
            names = meta.get("concepts") or []
            cols = [names[j] for j in x["columns"] if j < len(names)]
            concept[(cell["setting"], cell["model"])] = ", ".join(cols)
    rows: list[dict[str, Any]] = []
    last = ks[-1] if ks else None
    for (setting, model, pol), named in sorted(swaps.items(), key=lambda kv: (kv[0][0], ARCH_ORDER.get(kv[0][1], 9), *kv[0][1:])):
        first, second = next(iter(named.values()))
        for iv, label in ((second, f"{second} on every concept"), (first, f"{first} on every concept"),
                          *((name, f"{a}, with {b}'s answers on {concept[(setting, model)]}") for name, (a, b) in named.items())):  # fmt: skip
            row = {"setting": setting, "model": model, "policy": pol, "answers": label,
                   "seeds": max((len(acc.get((setting, model, iv, pol, k), {})) for k in ks), default=0)}  # fmt: skip
            row.update({f"acc k={k}": mean_se(acc.get((setting, model, iv, pol, k), {}).values()) for k in ks})
            own = named.get(iv, (iv, iv))[0]
            p = paired(acc.get((setting, model, iv, pol, last), {}), acc.get((setting, model, own, pol, last), {})) if iv in named else None
            row[f"moves k={last} (points) [95% CI]"] = paired_text(p) if p is not None else ""
            rows.append(row)
    cols = ["setting", "model", "policy", "answers", "seeds", *[f"acc k={k}" for k in ks], f"moves k={last} (points) [95% CI]"]
    return rows, cols


def _with_paper(row: dict[str, Any], numbers: dict[str, Any]) -> dict[str, Any]:
    for col, v in numbers.items():
        row[f"paper {col}"] = f"{v:.1f}" if isinstance(v, int | float) else str(v)
    return row


# ----------------------------------------------------------------------------- automation
def automation_rows(cells: list[dict[str, Any]], paper: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per (setting, model, k): coverage before/after, selective accuracy, NWA."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    order: list[tuple] = []
    for cell in cells:
        rep = cell["_results"]
        m = int(rep.get("n_concepts") or 0)
        for r in rep["results"]:
            key = (cell["setting"], cell["model"], k_label(r["k"], m))
            if key not in groups:
                order.append(key)
            groups.setdefault(key, []).append(r)
    paper_t = paper.get("automation", {})
    rows = []
    settings = list(dict.fromkeys(k[0] for k in order))
    for key in sorted(order, key=lambda k: (settings.index(k[0]), ARCH_ORDER.get(k[1], 9), k[1], k_order(k[2]))):
        rs = groups[key]
        row = {"setting": key[0], "model": key[1], "k": key[2], "seeds": len(rs),
               "coverage before %": mean_se(r["coverage_before"] for r in rs), "coverage %": mean_se(r["coverage"] for r in rs),
               "sel. acc %": mean_se(r["selective_acc"] for r in rs), "NWA %": mean_se((r["nwa"] for r in rs), signed=True)}  # fmt: skip
        notes = sorted({r["note"] for r in rs if r.get("note")})
        if notes:
            row["note"] = notes[0]
        p = paper_t.get(key[0], {}).get(key[1], {})
        for metric, fmt in (("coverage", "{:.1f}"), ("NWA", "{:+.1f}")):  # the paper's numbers, where it gives them
            if f"{metric} k={key[2]}" in p:
                row[f"paper {metric} %"] = fmt.format(p[f"{metric} k={key[2]}"])
        rows.append(row)
    cols = ["setting", "model", "k", "seeds", "coverage before %", "coverage %", "sel. acc %", "NWA %"]
    cols += [c for c in ("paper coverage %", "paper NWA %", "note") if any(c in r for r in rows)]
    return rows, cols


#: The test split scored with every concept set to its true value (``automation.json``'s ``confidence``).
CONFIRMED = "test_confirmed"


def target_rows(cells: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The accuracy-target sweep (0.4.1's tau table): per (setting, model, target, k), coverage,
    selective accuracy and NWA over seeds, from the automation runs that swept targets
    (``automation.json``'s ``sweep``; the run's own target is one of the rows)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for cell in cells:
        rep = cell["_results"]
        if not rep.get("sweep"):
            continue
        m = int(rep.get("n_concepts") or 0)
        runs = [(rep["calibration"]["target_accuracy"], rep["results"])] + [(s["target_accuracy"], s["results"]) for s in rep["sweep"]]
        for target, results in runs:
            for r in results:
                groups.setdefault((cell["setting"], cell["model"], float(target), k_label(r["k"], m)), []).append(r)
    keys = sorted(groups, key=lambda k: (k[0], ARCH_ORDER.get(k[1], 9), k[1], k[2], k_order(k[3])))
    rows = []
    for s, m, t, k in keys:
        rs = groups[(s, m, t, k)]
        row = {"setting": s, "model": m, "target %": f"{100 * t:g}", "k": k, "seeds": len(rs),
               "coverage %": mean_se(r["coverage"] for r in rs), "sel. acc %": mean_se(r["selective_acc"] for r in rs),
               "NWA %": mean_se((r["nwa"] for r in rs), signed=True)}  # fmt: skip
        notes = sorted({r["note"] for r in rs if r.get("note")})
        if notes:
            row["note"] = notes[0]
        rows.append(row)
    cols = ["setting", "model", "target %", "k", "seeds", "coverage %", "sel. acc %", "NWA %"]
    return rows, cols + (["note"] if any("note" in r for r in rows) else [])


def threshold_rows(cells: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Threshold rules side by side (0.4.1's class-wise thresholds beside its global one): per
    (setting, model, rule, k), coverage, selective accuracy and NWA over seeds, from the automation
    runs that swept rules (``automation.json``'s ``threshold_sweep``), and each swept rule's paired
    difference in coverage and in selective accuracy from the run's own rule on the same seeds."""
    groups: dict[tuple, dict[int, dict[str, Any]]] = {}
    own: dict[tuple, str] = {}
    for cell in cells:
        rep = cell["_results"]
        if not rep.get("threshold_sweep"):
            continue
        m = int(rep.get("n_concepts") or 0)
        base = (rep.get("config") or {}).get("threshold", "global")
        own[(cell["setting"], cell["model"])] = base
        for rule, results in [(base, rep["results"]), *((s["threshold"], s["results"]) for s in rep["threshold_sweep"])]:
            for r in results:
                groups.setdefault((cell["setting"], cell["model"], rule, k_label(r["k"], m)), {})[cell["seed"]] = r
    keys = sorted(groups, key=lambda k: (k[0], ARCH_ORDER.get(k[1], 9), k[1], k_order(k[3]), k[2] != own[k[:2]], k[2]))
    moved = ("coverage", "selective_acc")
    rows = []
    for s, m, rule, k in keys:
        rs = groups[(s, m, rule, k)]
        row = {"setting": s, "model": m, "k": k, "threshold": rule, "seeds": len(rs),
               "coverage %": mean_se(r["coverage"] for r in rs.values()), "sel. acc %": mean_se(r["selective_acc"] for r in rs.values()),
               "NWA %": mean_se((r["nwa"] for r in rs.values()), signed=True)}  # fmt: skip
        base = groups.get((s, m, own[(s, m)], k), {})
        for name, col in zip(moved, ("coverage", "sel. acc")):
            by_seed = [{seed: r[name] for seed, r in runs.items() if r.get(name) is not None} for runs in (rs, base)]
            row[f"{col} vs {own[(s, m)]} (points) [95% CI]"] = "" if rule == own[(s, m)] else paired_text(paired(*by_seed))
        rows.append(row)
    cols = ["setting", "model", "k", "threshold", "seeds", "coverage %", "sel. acc %", "NWA %"]
    cols += list(dict.fromkeys(c for r in rows for c in r if c.endswith("[95% CI]")))
    return rows, cols


def confirmed_rows(cells: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Confirmed confidence (0.4.1's ``p_test_true_concepts``): per (setting, model) whose automation
    scored the test split with every concept true (``automation.json``'s ``confidence``), the share the
    abstention rule holds back and the accuracy, as predicted and with every concept confirmed, over
    seeds, with their paired differences (confirmed minus as predicted)."""
    groups: dict[tuple, dict[int, dict[str, Any]]] = {}
    for cell in cells:
        conf = cell["_results"].get("confidence") or {}
        if CONFIRMED in (conf.get("abstained") or {}):
            groups.setdefault((cell["setting"], cell["model"]), {})[cell["seed"]] = conf
    rows = []
    for s, m in sorted(groups, key=lambda k: (k[0], ARCH_ORDER.get(k[1], 9), k[1])):
        confs = groups[(s, m)]
        row: dict[str, Any] = {"setting": s, "model": m, "seeds": len(confs)}
        for field, col in (("abstained", "held back"), ("accuracy", "accuracy")):
            split = [{seed: c[field][name] for seed, c in confs.items() if c.get(field, {}).get(name) is not None}
                     for name in ("test", CONFIRMED)]  # fmt: skip
            row[f"{col} %"] = mean_se(split[0].values())
            row[f"{col}, every concept true %"] = mean_se(split[1].values())
            row[f"{col}: difference (points) [95% CI]"] = paired_text(paired(split[1], split[0]))
        rows.append(row)
    cols = ["setting", "model", "seeds"] + [c for c in (rows[0] if rows else {}) if c not in ("setting", "model", "seeds")]
    return rows, cols


def cost_rows(cells: list[dict[str, Any]], cost_models: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """The "cost of a check" table (0.4.1's make_sudoku_sensitivity_tables.py): per (setting, model,
    price, k), coverage and NWA with each check priced by ``cost_models[price]``, from the share of
    examples each concept was asked for (``automation.json`` results' ``requested_share``)."""
    from cbm.interventions.costs import cost_list

    if not cost_models:
        return [], []
    groups: dict[tuple, dict[str, list[float]]] = {}
    for cell in cells:
        rep = cell["_results"]
        names = list(rep.get("concept_costs") or [])
        if not names:  # a black box asks for no concept: nothing to price
            continue
        priced = {price: cost_list(names, spec, f"cost_models.{price}") for price, spec in cost_models.items()}
        for r in rep["results"]:
            share = r.get("requested_share")
            if share is None or r.get("coverage") is None or len(share) != len(names):
                continue
            for price, w in priced.items():
                nwa = r["coverage"] - sum(c * s for c, s in zip(w, share)) / len(names)
                g = groups.setdefault((cell["setting"], cell["model"], price, k_label(r["k"], len(names))), {"coverage": [], "nwa": []})
                g["coverage"].append(r["coverage"])
                g["nwa"].append(nwa)
    prices = list(cost_models)
    keys = sorted(groups, key=lambda k: (k[0], prices.index(k[2]), ARCH_ORDER.get(k[1], 9), k[1], k_order(k[3])))
    rows = [{"setting": s, "price": p, "model": m, "k": k, "seeds": len(groups[(s, m, p, k)]["nwa"]),
             "coverage %": mean_se(groups[(s, m, p, k)]["coverage"]), "NWA %": mean_se(groups[(s, m, p, k)]["nwa"], signed=True)}
            for s, m, p, k in keys]  # fmt: skip
    return rows, ["setting", "price", "model", "k", "seeds", "coverage %", "NWA %"]


#: A concept-reasoning model's rules over the test split (``[{rule, examples, share, accuracy}]``,
#: written by ``cbm-train``), and how many per training cell the experiment report shows.
RULES_FILE = "rules.json"
RULES_PER_CELL = 5


def rule_rows(root: Path, manifest: dict[str, Any], top: int = RULES_PER_CELL) -> tuple[list[dict[str, Any]], list[str]]:
    """The most used rules of every finished training cell that wrote ``rules.json`` (a DCR's): what
    the model predicted with on the test split, how often, and how often it was right."""
    rows = []
    for cell in manifest.get("cells", []):
        if cell.get("stage") != "train" or cell.get("status") != "done":
            continue
        rules = read_json(root / cell["dir"] / RULES_FILE)
        for r in rules[:top] if isinstance(rules, list) else []:
            if isinstance(r, dict) and isinstance(r.get("rule"), str):
                rows.append({"setting": cell.get("setting"), "model": cell.get("model"), "seed": cell.get("seed"),
                             **{k: r.get(k) for k in ("rule", "examples", "share", "accuracy")}})  # fmt: skip
    return rows, ["setting", "model", "seed", "rule", "examples", "share", "accuracy"]


def render(title: str, rows: list[dict[str, Any]], cols: list[str]) -> str:
    return f"## {title}\n\n" + (markdown_table(rows, cols) if rows else "(no finished runs)") + "\n"


def comparisons(cfg: dict[str, Any]) -> tuple[list[list[str]], list[list[str]]]:
    """The model pairs and policy pairs an experiment's config asks the report to compare."""
    from cbm.config.experiment import Compare

    raw = cfg.get("compare") or {}
    compare = Compare(models=[list(p) for p in raw.get("models") or []], policies=raw.get("policies"))
    policies = list((cfg.get("intervene") or {}).get("policy") or [])
    return compare.models, compare.policy_pairs(policies)
