"""Comparison figures of an experiment: accuracy vs k per architecture (black box as a line),
NWA vs k, risk-coverage per architecture, Gain vs the swept setting. Every curve is the mean over
seeds with a band of ± one standard error (error bars on categorical axes) where there are several
seeds. Drawn on matplotlib's Agg canvas (the global backend is never changed) and written atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from cbm.core.atomic import savefig_atomic
from cbm.experiments.stats import summarise
from cbm.experiments.tables import ARCH_ORDER, grid_max, k_label

MARKERS = "osD^v<>ph*"


def _figure(n_panels: int, width: float = 4.2, height: float = 3.6) -> tuple[Figure, list]:
    fig = Figure(figsize=(width * n_panels, height), dpi=110)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, n_panels, squeeze=False)[0]
    return fig, list(axes)


#: Opacity of the ± SE bands.
BAND_ALPHA = 0.18


def curve_with_band(ax, xs: list[float], values: list[list[float]], scale: float = 100.0, **kw) -> None:
    """Plot the mean of each ``values[i]`` at ``xs[i]`` with a ± SE band where there are several."""
    stats = [summarise(v) for v in values]
    means = [scale * s.mean for s in stats]
    (line,) = ax.plot(xs, means, **kw)
    if any(s.se is not None for s in stats):
        se = [scale * (s.se or 0.0) for s in stats]
        ax.fill_between(xs, [m - e for m, e in zip(means, se)], [m + e for m, e in zip(means, se)], color=line.get_color(),
                        alpha=BAND_ALPHA, linewidth=0)  # fmt: skip


def hline_with_band(ax, values: list[float], label: str, scale: float = 100.0) -> None:
    """A horizontal reference line (e.g. the black box) at the mean, with its ± SE band."""
    s = summarise(values)
    ax.axhline(scale * s.mean, color="black", linestyle="--", linewidth=1, label=label)
    if s.se is not None:
        ax.axhspan(scale * (s.mean - s.se), scale * (s.mean + s.se), color="black", alpha=BAND_ALPHA / 2, linewidth=0)


def _positions(labels: list[str]) -> dict[str, int]:
    """x positions of budget labels (``max`` after the largest integer)."""
    ints = sorted(int(k) for k in labels if k != "max")
    pos = {str(k): k for k in ints}
    if "max" in labels:
        pos["max"] = (ints[-1] + 1) if ints else 1
    return pos


def accuracy_vs_k(cells: list[dict[str, Any]], setting: str, path: Path, intervener: str = "oracle") -> Path | None:
    """One panel per policy: mean accuracy vs k of every architecture under ``intervener``."""
    curves: dict[tuple[str, str], dict[str, list[float]]] = {}
    bb: dict[int, float] = {}
    for cell in cells:
        if cell["setting"] != setting:
            continue
        res = cell["_results"]
        m = grid_max(res)
        if res.get("blackbox_accuracy") is not None:
            bb[cell["seed"]] = res["blackbox_accuracy"]
        for r in res["rows"]:
            if r["intervener"] == intervener:
                curves.setdefault((r["policy"], cell["model"]), {}).setdefault(k_label(r["k"], m), []).append(r["accuracy"])
    if not curves:
        return None
    policies = sorted({p for p, _ in curves})
    fig, axes = _figure(len(policies))
    for ax, policy in zip(axes, policies):
        models = sorted({m for p, m in curves if p == policy}, key=lambda m: (ARCH_ORDER.get(m, 9), m))
        for n, model in enumerate(models):
            pts = curves[policy, model]
            pos = _positions(list(pts))
            xs = sorted(pts, key=lambda k: pos[k])
            curve_with_band(ax, [pos[k] for k in xs], [pts[k] for k in xs], marker=MARKERS[n % len(MARKERS)], label=model)
            ax.set_xticks([pos[k] for k in xs], xs)
        if bb:
            hline_with_band(ax, list(bb.values()), "black box")
        ax.set_title(f"{intervener} / {policy}", fontsize=9)
        ax.set_xlabel("budget k")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("task accuracy (%)")
    axes[0].legend(fontsize=7)
    fig.suptitle(f"{setting}: accuracy under interventions")
    fig.tight_layout()
    return savefig_atomic(fig, path)


def automation_figure(cells: list[dict[str, Any]], setting: str, path: Path) -> Path | None:
    """NWA vs k per architecture (left) and the test risk-coverage curves at k = 0 (right)."""
    nwa: dict[str, dict[str, list[float]]] = {}
    rc: dict[str, dict[str, list[float]]] = {}
    target = None
    for cell in cells:
        if cell["setting"] != setting:
            continue
        rep = cell["_results"]
        m = int(rep.get("n_concepts") or 0)
        target = rep.get("calibration", {}).get("target_accuracy", target)
        for r in rep["results"]:
            if r.get("nwa") is not None:
                nwa.setdefault(cell["model"], {}).setdefault(k_label(r["k"], m), []).append(r["nwa"])
        curve = rep.get("curves", {}).get("test k=0")
        if curve and cell["model"] not in rc:
            rc[cell["model"]] = curve
    if not nwa and not rc:
        return None
    fig, (ax_n, ax_r) = _figure(2)
    for n, model in enumerate(sorted(nwa, key=lambda m: (ARCH_ORDER.get(m, 9), m))):
        pts = nwa[model]
        pos = _positions(list(pts))
        xs = sorted(pts, key=lambda k: pos[k])
        curve_with_band(ax_n, [pos[k] for k in xs], [pts[k] for k in xs], marker=MARKERS[n % len(MARKERS)], label=model)
    ax_n.axhline(0, color="grey", linewidth=0.8)
    ax_n.set_xlabel("budget k (max = every concept)")
    ax_n.set_ylabel("NetWorkAutomated (%)")
    ax_n.grid(alpha=0.3)
    ax_n.legend(fontsize=7)
    for model in sorted(rc, key=lambda m: (ARCH_ORDER.get(m, 9), m)):
        ax_r.plot([100 * c for c in rc[model]["coverage"]], [100 * r for r in rc[model]["risk"]], label=model)
    if target is not None:
        ax_r.axhline(100 * (1 - target), color="black", linestyle="--", linewidth=1, label=f"target risk {100 * (1 - target):.0f}%")
    ax_r.set_xlabel("coverage (%)")
    ax_r.set_ylabel("selective risk (%)")
    ax_r.set_title("test risk-coverage, k = 0", fontsize=9)
    ax_r.grid(alpha=0.3)
    ax_r.legend(fontsize=7)
    fig.suptitle(f"{setting}: automation")
    fig.tight_layout()
    return savefig_atomic(fig, path)


def gain_vs_setting(cells: list[dict[str, Any]], settings: list[str], path: Path) -> Path | None:
    """Gain over the black box at k = max (oracle, random) of every architecture per setting."""
    gains: dict[str, dict[str, list[float]]] = {}
    for cell in cells:
        res = cell["_results"]
        m = grid_max(res)
        for r in res["rows"]:
            if (r["intervener"], r["policy"], k_label(r["k"], m)) == ("oracle", "random", "max") and r.get("gain") is not None:
                gains.setdefault(cell["model"], {}).setdefault(cell["setting"], []).append(r["gain"])
    if len(settings) < 2 or not gains:
        return None
    fig, (ax,) = _figure(1, width=max(4.5, 1.2 * len(settings)))
    for n, model in enumerate(sorted(gains, key=lambda m: (ARCH_ORDER.get(m, 9), m))):
        xs = [i for i, s in enumerate(settings) if s in gains[model]]
        st = [summarise(gains[model][settings[i]]) for i in xs]
        ax.errorbar(xs, [100 * s.mean for s in st], yerr=[100 * (s.se or 0.0) for s in st], marker=MARKERS[n % len(MARKERS)],
                    capsize=3, label=model)  # fmt: skip
    ax.set_xticks(range(len(settings)), settings, rotation=20, fontsize=8)
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.set_ylabel("Gain at k = max, oracle (points)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return savefig_atomic(fig, path)
