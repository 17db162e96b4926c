"""Diagnostic figures of an experiment: *why* an intervention helps or not, each drawn from the stored
results (``results.json``'s ``concept_stats``, ``automation.json``'s ``confidence``, the runs' configs)
and written as a PNG with its data as a CSV beside it.

- per concept: detector accuracy, the share of requests a policy makes, the intervener's accuracy on
  what it was asked (an intervener helps only where it is right on what the model asks);
- answer reliance: accuracy change from k = 0 with the model's own answers (``self``) vs the true ones;
- confidence: predicted probability by true class with the calibrated abstention band, and again with
  every concept confirmed (what no check can rescue);
- intervention heatmap: accuracy change k = max minus k = 0 per model x setting x intervener;
- alignment: constrained vs unconstrained models before and after interventions;
- concept sets: accuracy at every budget per concept set (true / fine / llm) and model.

Means over seeds with ± standard-error bands or bars (SE = stdev / sqrt(n)) where there are several
seeds. CSV values are fractions (accuracies, shares); figures show them in %. Drawn on matplotlib's
Agg canvas (the global backend is never changed); files are written atomically.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from cbm.core.atomic import savefig_atomic, write_csv_atomic
from cbm.core.safe_paths import slugs
from cbm.experiments.figures import MARKERS, curve_with_band, hline_with_band
from cbm.experiments.stats import summarise
from cbm.experiments.tables import ARCH_ORDER, CONFIRMED, by_seed, flatten, k_label, read_json

#: Percent scale of the figures (the CSVs keep fractions).
PCT = 100.0
#: Opacity of the shaded abstention band and of overlapping class histograms.
BAND_SHADE, HIST_ALPHA = 0.15, 0.55
#: Panel size in inches (width, height) and the figures' resolution.
PANEL_W, PANEL_H, DPI = 4.4, 3.4, 110
#: Width of a figure whose single panel carries a long title.
WIDE_W = 6.5
#: Font size of concept names and heatmap annotations.
SMALL = 6
#: Top of the accuracy axes (a little above 100% so full bars stay visible).
ACC_TOP = 1.05
#: Heatmap colour range never narrower than this (points), so noise does not look like a finding.
MIN_RANGE = 1.0


@dataclass(frozen=True)
class Diagnostic:
    """One diagnostic figure: where its PNG and its data's CSV are, its title and how to read it."""

    name: str
    title: str
    read_as: str
    png: Path
    csv: Path

    def markdown(self, base: Path) -> str:
        """The figure as markdown relative to ``base`` (the report's directory), its reading underneath."""
        rel = self.png.relative_to(base) if self.png.is_relative_to(base) else self.png
        return f"![{self.title}]({rel.as_posix()})\n\n*Read it as:* {self.read_as}\n"


# ----------------------------------------------------------------------------- helpers
def _grid(n_rows: int, n_cols: int, width: float = PANEL_W, height: float = PANEL_H) -> tuple[Figure, list[list[Any]]]:
    fig = Figure(figsize=(width * n_cols, height * n_rows), dpi=DPI)
    FigureCanvasAgg(fig)
    axes = fig.subplots(n_rows, n_cols, squeeze=False)
    return fig, [list(row) for row in axes]


def _save(fig: Figure, rows: list[dict[str, Any]], cols: list[str], stem: Path, title: str, read_as: str) -> Diagnostic:
    fig.suptitle(title)
    fig.tight_layout()
    png = savefig_atomic(fig, stem.with_suffix(".png"))
    csv = write_csv_atomic(stem.with_suffix(".csv"), rows, cols)
    return Diagnostic(stem.name, title, read_as, png, csv)


def _models(names: Iterable[str]) -> list[str]:
    return sorted(set(names), key=lambda m: (ARCH_ORDER.get(m, 9), m))


def _label_key(label: str) -> tuple[bool, int]:
    return label == "max", int(label) if label.isdigit() else 0


def _stat(values: Iterable[float | None]) -> tuple[float | None, float | None, int]:
    """Mean, SE (``None`` for one value) and n of the non-missing values."""
    s = summarise(values)
    return (None, None, 0) if s is None else (s.mean, s.se, s.n)


def _nan(v: float | None, scale: float = PCT) -> float:
    return math.nan if v is None else scale * v


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def _pick(have: Iterable[str], preferred: str) -> str | None:
    """``preferred`` when present, else the first name (``None`` when there is none)."""
    have = list(dict.fromkeys(have))
    return preferred if preferred in have else (have[0] if have else None)


def _bars(ax, names: list[str], series: dict[str, list[tuple[float | None, float | None]]], scale: float = PCT) -> None:
    """Grouped bars: one group per name, one bar per series, with SE error bars where known."""
    n = max(len(series), 1)
    width = 0.8 / n
    for i, (label, vals) in enumerate(series.items()):
        xs = [j + (i - (n - 1) / 2) * width for j in range(len(names))]
        ax.bar(xs, [_nan(m, scale) for m, _ in vals], width, label=label,
               yerr=[0.0 if se is None else scale * se for _, se in vals])  # fmt: skip
    ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=SMALL)
    ax.grid(alpha=0.3, axis="y")


def _k_axis(ax, labels: list[str], xlabel: str, title: str) -> None:
    """Finish a panel whose x axis is the budget labels (categorical: ``max`` differs between concept sets)."""
    ax.set_xticks(range(len(labels)), labels)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=SMALL)


def _acc_view(inter: list[dict[str, Any]]) -> tuple[dict[tuple, dict[int, float]], dict[str, dict[int, float]]]:
    acc, bb, _ = by_seed(inter)
    return acc, bb


def _labels(acc: dict[tuple, Any], setting: str) -> list[str]:
    return sorted({key[4] for key in acc if key[0] == setting}, key=_label_key)


def _delta(acc: dict[tuple, dict[int, float]], key: tuple, label: str) -> list[float]:
    """Per-seed accuracy at ``label`` minus the same seed's at k = 0 (``key`` without the label)."""
    at, zero = acc.get((*key, label), {}), acc.get((*key, "0"), {})
    return [at[s] - zero[s] for s in sorted(set(at) & set(zero))]


# ----------------------------------------------------------------------------- per concept
PER_CONCEPT_COLS = ["setting", "model", "intervener", "policy", "k", "concept", "seeds", "requested", "correct",
                    "request_share", "request_share_se", "intervener_accuracy", "intervener_accuracy_se",
                    "detector_accuracy", "detector_accuracy_se"]  # fmt: skip
PER_CONCEPT_READ = ("an intervener helps only where it is right on what the model asks: compare its accuracy on the "
                    "requested concepts (right) with the detector's (left), on the concepts the policy asks for most "
                    "(middle).")  # fmt: skip


def per_concept_rows(inter: list[dict[str, Any]], setting: str) -> list[dict[str, Any]]:
    """One row per (model, intervener, policy, k, concept) of ``setting``: request counts, the share of
    the requests, the intervener's accuracy on them and the detector's accuracy, over seeds."""
    seeds: dict[str, list[dict[str, Any]]] = {}
    for cell in inter:
        st = cell["_results"].get("concept_stats")
        if cell["setting"] == setting and st:
            seeds.setdefault(cell["model"], []).append(st)
    out = []
    for model in _models(seeds):
        stats = seeds[model]
        names = stats[0]["names"]
        m = len(names)
        det = [_stat(s["detector_accuracy"][j] for s in stats) for j in range(m)]
        per: dict[tuple, list[dict[str, Any]]] = {}
        for s in stats:
            for r in s["rows"]:
                per.setdefault((r["intervener"], r["policy"], r["k"]), []).append(r)
        for (iv, pol, k), rs in per.items():
            for j, name in enumerate(names):
                share = _stat(_ratio(r["requested"][j], sum(r["requested"])) for r in rs)
                right = _stat(_ratio(r["correct"][j], r["requested"][j]) for r in rs)
                out.append({"setting": setting, "model": model, "intervener": iv, "policy": pol, "k": k_label(k, m),
                            "concept": name, "seeds": len(rs), "requested": _stat(r["requested"][j] for r in rs)[0],
                            "correct": _stat(r["correct"][j] for r in rs)[0], "request_share": share[0],
                            "request_share_se": share[1], "intervener_accuracy": right[0], "intervener_accuracy_se": right[1],
                            "detector_accuracy": det[j][0], "detector_accuracy_se": det[j][1]})  # fmt: skip
    return out


def per_concept(inter: list[dict[str, Any]], setting: str, stem: Path) -> Diagnostic | None:
    """Per model (rows): detector accuracy, request share per policy and intervener accuracy per
    intervener, concept by concept, at the smallest budget below every concept."""
    rows = per_concept_rows(inter, setting)
    if not rows:
        return None
    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = _grid(len(models), 3)
    for (ax_d, ax_s, ax_i), model in zip(axes, models):
        rs = [r for r in rows if r["model"] == model]
        names = list(dict.fromkeys(r["concept"] for r in rs))
        labels = sorted({r["k"] for r in rs if r["k"] != "0"}, key=_label_key)
        k = next((lab for lab in labels if lab != "max"), labels[0] if labels else "0")
        first_iv = rs[0]["intervener"]
        policies = list(dict.fromkeys(r["policy"] for r in rs))
        asked = [p for p in policies if any(r["policy"] == p and r["k"] == k and r["requested"] for r in rs)]
        asking = next((p for p in asked if p != "random"), (asked or policies)[0])  # the model's own choice first
        det = {r["concept"]: (r["detector_accuracy"], r["detector_accuracy_se"]) for r in rs}
        _bars(ax_d, names, {"detector": [det[n] for n in names]})
        ax_d.set_ylabel(f"{model}\ndetector accuracy (%)")
        share = {p: [(r["request_share"], r["request_share_se"]) for r in rs if (r["intervener"], r["policy"], r["k"]) == (first_iv, p, k)]
                 for p in policies}  # fmt: skip
        _bars(ax_s, names, {p: v for p, v in share.items() if len(v) == len(names)})
        ax_s.set_ylabel("share of the requests (%)")
        ax_s.set_title(f"requests at k = {k}", fontsize=9)
        ivs = list(dict.fromkeys(r["intervener"] for r in rs))
        right = {iv: [(r["intervener_accuracy"], r["intervener_accuracy_se"]) for r in rs
                      if (r["intervener"], r["policy"], r["k"]) == (iv, asking, k)] for iv in ivs}  # fmt: skip
        _bars(ax_i, names, {iv: v for iv, v in right.items() if len(v) == len(names)})
        ax_i.set_ylabel("intervener accuracy on requests (%)")
        ax_i.set_title(f"{asking}, k = {k}", fontsize=9)
        for ax in (ax_d, ax_i):
            ax.set_ylim(0, PCT * ACC_TOP)
        for ax in (ax_s, ax_i):
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=SMALL)
    return _save(fig, rows, PER_CONCEPT_COLS, stem, f"{setting}: per concept", PER_CONCEPT_READ)


# ----------------------------------------------------------------------------- answer reliance
DELTA_COLS = ["setting", "model", "intervener", "policy", "k", "seeds", "delta", "delta_se"]
RELIANCE_READ = ("accuracy change from k = 0 when the model's own thresholded answers (self, dashed) or the true "
                 "values (oracle, solid) are put in: self near 0 means the head already acts on hardened answers; "
                 "the gap between oracle and self is what the true values add.")  # fmt: skip


def answer_reliance(inter: list[dict[str, Any]], stem: Path) -> Diagnostic | None:
    """Per setting: accuracy change vs k = 0 per model and budget, with ``self`` and with ``oracle``."""
    acc, _ = _acc_view(inter)
    ivs = {key[2] for key in acc}
    if not {"self", "oracle"} <= ivs:
        return None
    policy = _pick((key[3] for key in acc), "random")
    settings = list(dict.fromkeys(key[0] for key in acc))
    rows = []
    fig, axes = _grid(1, len(settings))
    for ax, setting in zip(axes[0], settings):
        labels = _labels(acc, setting)
        models = _models(key[1] for key in acc if key[0] == setting)
        for n, model in enumerate(models):
            for iv, style, marker in (("oracle", "-", MARKERS[n % len(MARKERS)]), ("self", "--", "x")):
                deltas = [_delta(acc, (setting, model, iv, policy), lab) for lab in labels]
                if not any(deltas):
                    continue
                for lab, d in zip(labels, deltas):
                    mean, se, cnt = _stat(d)
                    rows.append({"setting": setting, "model": model, "intervener": iv, "policy": policy, "k": lab, "seeds": cnt,
                                 "delta": mean, "delta_se": se})  # fmt: skip
                curve_with_band(ax, list(range(len(labels))), deltas, marker=marker, linestyle=style, color=f"C{n}",
                                label=f"{model} ({iv})")  # fmt: skip
        ax.axhline(0, color="grey", linewidth=0.8)
        _k_axis(ax, labels, f"budget k ({policy} requests)", setting)
    axes[0][0].set_ylabel("accuracy change from k = 0 (points)")
    return _save(fig, rows, DELTA_COLS, stem, "Answer reliance: own answers (self) vs true values (oracle)", RELIANCE_READ)


# ----------------------------------------------------------------------------- confidence
CONFIDENCE_COLS = ["setting", "model", "split", "quantity", "class", "bin_low", "bin_high", "seeds", "count", "fraction",
                   "fraction_se", "band_low", "band_high", "abstained", "accuracy"]  # fmt: skip
CONFIDENCE_READ = ("the predicted probability of each true class's test examples; the model abstains on those inside "
                   "the shaded band (calibrated on held-out data), so the band should cover where the classes "
                   "overlap and little else. The lower row, where drawn, scores the same examples with every concept "
                   "set to its true value: what is still inside the band no check can rescue.")  # fmt: skip
#: Row titles of the confidence figure per split.
CONFIDENCE_SPLITS = {"test": "test", CONFIRMED: "test, every concept true"}


def confidence_rows(auto: list[dict[str, Any]], setting: str, split: str = "test") -> list[dict[str, Any]]:
    """Per (model, true class, bin) of ``setting``: the fraction of the class's examples in the bin
    (mean over seeds), the summed count, the mean calibrated band, the mean share held back and the
    mean accuracy on the split."""
    seeds: dict[str, list[dict[str, Any]]] = {}
    for cell in auto:
        conf = cell["_results"].get("confidence")
        if cell["setting"] == setting and conf and split in conf.get("splits", {}):
            seeds.setdefault(cell["model"], []).append(conf)
    out = []
    for model in _models(seeds):
        confs = seeds[model]
        edges = confs[0]["edges"]
        band = [_stat(c["band"][i] for c in confs)[0] for i in (0, 1)]
        held = _stat(c.get("abstained", {}).get(split) for c in confs)[0]
        acc = _stat(c.get("accuracy", {}).get(split) for c in confs)[0]
        classes = sorted({c for conf in confs for c in conf["splits"][split]}, key=lambda c: (len(c), c))
        for cls in classes:
            hists = [conf["splits"][split][cls] for conf in confs if cls in conf["splits"][split]]
            for b in range(len(edges) - 1):
                mean, se, n = _stat(_ratio(h[b], sum(h)) for h in hists)
                out.append({"setting": setting, "model": model, "split": split, "quantity": confs[0]["quantity"],
                            "class": cls, "bin_low": edges[b], "bin_high": edges[b + 1], "seeds": n,
                            "count": sum(h[b] for h in hists), "fraction": mean, "fraction_se": se,
                            "band_low": band[0], "band_high": band[1], "abstained": held, "accuracy": acc})  # fmt: skip
    return out


def confidence(auto: list[dict[str, Any]], setting: str, stem: Path) -> Diagnostic | None:
    """Per model: histograms of the predicted probability by true class, the abstention band shaded;
    a second row with every concept confirmed where the runs scored it."""
    per_split = {split: confidence_rows(auto, setting, split) for split in CONFIDENCE_SPLITS}
    if not per_split["test"]:
        return None
    splits = [split for split, rows in per_split.items() if rows]
    models = list(dict.fromkeys(r["model"] for r in per_split["test"]))
    fig, axes = _grid(len(splits), len(models))
    for row_axes, split in zip(axes, splits):
        for ax, model in zip(row_axes, models):
            rs = [r for r in per_split[split] if r["model"] == model]
            if not rs:
                ax.set_axis_off()
                continue
            _confidence_panel(ax, rs, f"{model}, {CONFIDENCE_SPLITS[split]}")
        row_axes[0].set_ylabel("share of the class's examples (%)")
    rows = [r for split in splits for r in per_split[split]]
    return _save(fig, rows, CONFIDENCE_COLS, stem, f"{setting}: confidence by class and the abstention band", CONFIDENCE_READ)


def _confidence_panel(ax, rs: list[dict[str, Any]], title: str) -> None:
    lo, hi = rs[0]["band_low"], rs[0]["band_high"]
    if lo is not None and hi is not None and hi > lo:
        ax.axvspan(lo, hi, color="black", alpha=BAND_SHADE, linewidth=0, label=f"abstain [{lo:.3g}, {hi:.3g}]")
    for n, cls in enumerate(dict.fromkeys(r["class"] for r in rs)):
        cr = [r for r in rs if r["class"] == cls]
        se = [0.0 if r["fraction_se"] is None else PCT * r["fraction_se"] for r in cr]
        ax.bar([r["bin_low"] for r in cr], [_nan(r["fraction"]) for r in cr], [r["bin_high"] - r["bin_low"] for r in cr],
               align="edge", alpha=HIST_ALPHA, color=f"C{n}", yerr=se, label=f"true class {cls}")  # fmt: skip
    held, acc = rs[0]["abstained"], rs[0]["accuracy"]
    notes = [f"{PCT * v:.1f}% {what}" for v, what in ((held, "held back"), (acc, "right")) if v is not None]
    ax.set_xlabel(rs[0]["quantity"])
    ax.set_title(f"{title}: {', '.join(notes)}" if notes else title, fontsize=9)
    ax.set_xlim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=SMALL)


# ----------------------------------------------------------------------------- heatmap
HEATMAP_COLS = ["intervener", "policy", "model", "setting", "k", "seeds", "delta", "delta_se"]
HEATMAP_READ = ("accuracy change from k = 0 to the largest budget under the same requests, per model (row) and "
                "concept set or setting (column): green where interventions help, red where they hurt, one panel per "
                "intervener.")  # fmt: skip


def heatmap_rows(inter: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (intervener, model, setting): accuracy at the largest budget minus at k = 0 (random requests,
    else the first policy), mean over seeds of the per-seed differences."""
    acc, _ = _acc_view(inter)
    policy = _pick((key[3] for key in acc), "random")
    out = []
    for iv in dict.fromkeys(key[2] for key in acc):
        for setting in dict.fromkeys(key[0] for key in acc):
            top = (_labels(acc, setting) or ["0"])[-1]
            for model in _models(key[1] for key in acc if key[0] == setting and key[2] == iv):
                mean, se, n = _stat(_delta(acc, (setting, model, iv, policy), top))
                if n:
                    out.append({"intervener": iv, "policy": policy, "model": model, "setting": setting, "k": top,
                                "seeds": n, "delta": mean, "delta_se": se})  # fmt: skip
    return out


def intervention_heatmap(inter: list[dict[str, Any]], stem: Path) -> Diagnostic | None:
    """One heatmap per intervener: models x settings, accuracy change k = max minus k = 0."""
    rows = heatmap_rows(inter)
    if not rows:
        return None
    ivs = list(dict.fromkeys(r["intervener"] for r in rows))
    models = _models(r["model"] for r in rows)
    settings = list(dict.fromkeys(r["setting"] for r in rows))
    cell = {(r["intervener"], r["model"], r["setting"]): r for r in rows}
    lim = max(MIN_RANGE, *(abs(PCT * r["delta"]) for r in rows))
    fig, axes = _grid(1, len(ivs), width=max(PANEL_W, 1.1 * len(settings) + 1.5), height=max(PANEL_H, 0.5 * len(models) + 1.5))
    for ax, iv in zip(axes[0], ivs):
        grid = [[_nan(cell[iv, m, s]["delta"]) if (iv, m, s) in cell else math.nan for s in settings] for m in models]
        im = ax.imshow(grid, cmap="RdYlGn", vmin=-lim, vmax=lim, aspect="auto")
        for i, m in enumerate(models):
            for j, s in enumerate(settings):
                r = cell.get((iv, m, s))
                if r is not None:
                    txt = f"{PCT * r['delta']:+.1f}" + ("" if r["delta_se"] is None else f"\n±{PCT * r['delta_se']:.1f}")
                    ax.text(j, i, txt, ha="center", va="center", fontsize=SMALL + 1)
        ax.set_xticks(range(len(settings)), settings, rotation=20, fontsize=8)
        ax.set_yticks(range(len(models)), models, fontsize=8)
        ax.set_title(f"{iv} ({rows[0]['policy']} requests)", fontsize=9)
        fig.colorbar(im, ax=ax, label="points")
    return _save(fig, rows, HEATMAP_COLS, stem, "Interventions: accuracy change k = max minus k = 0", HEATMAP_READ)


# ----------------------------------------------------------------------------- alignment
ACC_COLS = ["setting", "model", "role", "intervener", "policy", "k", "seeds", "accuracy", "accuracy_se"]
ALIGNMENT_READ = ("accuracy before (k = 0) and after interventions (largest budget) of the constrained model beside "
                  "the unconstrained one: equal before but lower after means the constraint removed what the "
                  "interventions act on.")  # fmt: skip


def _constrained(overrides: list[str]) -> bool:
    """A model entry whose head is constrained (``model.zero_concepts`` set to a non-empty list)."""
    for o in overrides:
        key, _, value = str(o).partition("=")
        if key.lstrip("+") == "model.zero_concepts" and value.strip() not in ("", "[]", "null"):
            return True
    return False


def alignment_pairs(config: dict[str, Any]) -> list[tuple[str, str]]:
    """``(constrained, unconstrained)`` model pairs of an experiment's config: its ``compare.models``
    pairs with exactly one constrained side, else each constrained model with the unconstrained ones
    of the same ``model=`` architecture."""
    models = {k: [str(o) for o in v] for k, v in (config.get("models") or {}).items() if isinstance(v, list)}
    flags = {name: _constrained(over) for name, over in models.items()}
    pairs = []
    for pair in (config.get("compare") or {}).get("models") or []:
        a, b = pair
        if flags.get(a) != flags.get(b) and a in flags and b in flags:
            pairs.append((a, b) if flags[a] else (b, a))
    if pairs:
        return pairs

    def arch(name: str) -> list[str]:
        return [o for o in models[name] if o.startswith("model=")]

    return [(c, u) for c in models if flags[c] for u in models if not flags[u] and u != config.get("blackbox") and arch(u) == arch(c)]


def alignment(inter: list[dict[str, Any]], config: dict[str, Any], stem: Path) -> Diagnostic | None:
    """Per setting: accuracy at k = 0 and at the largest budget of each constrained / unconstrained pair."""
    acc, bb = _acc_view(inter)
    pairs = [p for p in alignment_pairs(config) if any(key[1] in p for key in acc)]
    if not pairs:
        return None
    iv = _pick((key[2] for key in acc), "oracle")
    policy = _pick((key[3] for key in acc), "random")
    settings = list(dict.fromkeys(key[0] for key in acc))
    rows = []
    fig, axes = _grid(1, len(settings), width=max(WIDE_W, 2.0 * len(pairs) + 2.0))
    for ax, setting in zip(axes[0], settings):
        top = (_labels(acc, setting) or ["0"])[-1]
        stages = list(dict.fromkeys(["0", top]))
        series = {}
        for c, u in pairs:
            for model, role in ((u, "unconstrained"), (c, "constrained")):
                vals = []
                for lab in stages:
                    mean, se, n = _stat(acc.get((setting, model, iv, policy, lab), {}).values())
                    vals.append((mean, se))
                    rows.append({"setting": setting, "model": model, "role": role, "intervener": iv, "policy": policy, "k": lab,
                                 "seeds": n, "accuracy": mean, "accuracy_se": se})  # fmt: skip
                series[f"{model} ({role})"] = vals
        if setting in bb:
            mean, se, n = _stat(bb[setting].values())
            rows.append({"setting": setting, "model": "blackbox", "role": "black box", "k": "0", "seeds": n, "accuracy": mean,
                         "accuracy_se": se})  # fmt: skip
            hline_with_band(ax, list(bb[setting].values()), "black box")
        _bars(ax, [f"k = {lab}" for lab in stages], series)
        ax.set_xticks(range(len(stages)), ["before (k = 0)", f"after (k = {top}, {iv})"], rotation=0, fontsize=8)
        ax.set_title(setting, fontsize=9)
        ax.legend(fontsize=SMALL)
    axes[0][0].set_ylabel("task accuracy (%)")
    return _save(fig, rows, ACC_COLS, stem, "Alignment: constrained vs unconstrained, before and after interventions",
                 ALIGNMENT_READ)  # fmt: skip


# ----------------------------------------------------------------------------- concept sets
CONCEPT_SET_COLS = ["model", "setting", "concept_set", "intervener", "policy", "k", "seeds", "accuracy", "accuracy_se"]
CONCEPT_SET_READ = ("accuracy at every budget with each concept set, per model: a set whose curve reaches 100% "
                    "captures the label; one that stays flat or falls with k holds concepts the head cannot use or "
                    "leans on wrongly (e.g. discovered, task-irrelevant ones).")  # fmt: skip


def concept_sets_of(runs: list[dict[str, Any]]) -> dict[str, str]:
    """``setting -> data.concept_set`` from the training runs' configs (settings without one left out)."""
    out: dict[str, str] = {}
    for r in runs:
        cs = flatten(r.get("_config") or {}).get("data.concept_set")
        if r.get("_setting") and cs is not None:
            out.setdefault(r["_setting"], str(cs))
    return out


def concept_sets(inter: list[dict[str, Any]], runs: list[dict[str, Any]], stem: Path) -> Diagnostic | None:
    """Per model: accuracy vs budget with each concept-set setting (drawn with >= 2 concept sets)."""
    acc, bb = _acc_view(inter)
    sets = {s: cs for s, cs in concept_sets_of(runs).items() if any(key[0] == s for key in acc)}
    if len(set(sets.values())) < 2:
        return None
    iv = _pick((key[2] for key in acc), "oracle")
    policy = _pick((key[3] for key in acc), "random")
    models = _models(key[1] for key in acc if key[0] in sets)
    labels = sorted({key[4] for key in acc if key[0] in sets}, key=_label_key)
    rows = []
    fig, axes = _grid(1, len(models))
    for ax, model in zip(axes[0], models):
        for n, (setting, cs) in enumerate(sets.items()):
            pts = {lab: list(acc.get((setting, model, iv, policy, lab), {}).values()) for lab in labels}
            pts = {lab: v for lab, v in pts.items() if v}
            for lab, v in pts.items():
                mean, se, cnt = _stat(v)
                rows.append({"model": model, "setting": setting, "concept_set": cs, "intervener": iv, "policy": policy, "k": lab,
                             "seeds": cnt, "accuracy": mean, "accuracy_se": se})  # fmt: skip
            if pts:
                name = setting if setting == cs else f"{setting} ({cs})"
                curve_with_band(ax, [labels.index(lab) for lab in pts], list(pts.values()), marker=MARKERS[n % len(MARKERS)],
                                label=name)  # fmt: skip
        bbs = [v for s in sets for v in bb.get(s, {}).values()]
        if bbs:
            hline_with_band(ax, bbs, "black box")
        _k_axis(ax, labels, f"budget k ({iv}, {policy} requests)", model)
    axes[0][0].set_ylabel("task accuracy (%)")
    return _save(fig, rows, CONCEPT_SET_COLS, stem, "Concept sets: accuracy at every budget per model", CONCEPT_SET_READ)


# ----------------------------------------------------------------------------- entry point
def write_diagnostics(root: Path, inter: list[dict[str, Any]], auto: list[dict[str, Any]], runs: list[dict[str, Any]],
                      figs_dir: Path, failed: list[str] | None = None) -> list[Diagnostic]:  # fmt: skip
    """Every diagnostic figure the experiment's stored results allow, written into ``figs_dir`` as
    ``diag_<name>.png`` with ``diag_<name>.csv``; those that do not apply are left out.

    ``inter`` / ``auto``: the finished intervene / automate cells with their ``results.json`` /
    ``automation.json`` as ``_results``; ``runs``: the training runs' ``metrics.json`` with ``_config``
    and ``_setting`` (as :func:`cbm.experiments.report.write_experiment_report` builds them).
    ``failed`` (given): a figure whose stored data it cannot draw is named there with the reason and
    the others are still drawn (one odd results file never costs the whole report).
    """
    root, figs_dir = Path(root), Path(figs_dir)
    manifest = read_json(root / "experiment.json")
    config = manifest.get("config", {}) if isinstance(manifest, dict) else {}
    settings = list(dict.fromkeys(c["setting"] for c in [*inter, *auto]))
    safe = slugs(settings, "diagnostics: setting")
    stem = figs_dir.joinpath
    builders: list[Callable[[], Diagnostic | None]] = []
    builders += [lambda s=s: per_concept(inter, s, stem(f"diag_per_concept_{safe[s]}")) for s in settings]
    builders.append(lambda: answer_reliance(inter, stem("diag_answer_reliance")))
    builders += [lambda s=s: confidence(auto, s, stem(f"diag_confidence_{safe[s]}")) for s in settings]
    builders.append(lambda: intervention_heatmap(inter, stem("diag_intervention_heatmap")))
    builders.append(lambda: alignment(inter, config, stem("diag_alignment")))
    builders.append(lambda: concept_sets(inter, runs, stem("diag_concept_sets")))
    out: list[Diagnostic] = []
    for build in builders:
        try:
            d = build()
        except (KeyError, TypeError, ValueError, IndexError, ZeroDivisionError) as err:
            if failed is None:
                raise
            failed.append(f"{type(err).__name__}: {err}")
            continue
        if d is not None:
            out.append(d)
    return out
