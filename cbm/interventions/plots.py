"""Intervention curves: accuracy (and concepts requested) vs budget ``k``; under costs, accuracy vs
budget and vs the cost actually spent.

Drawn with matplotlib's Agg canvas directly, so importing this module never changes
the global backend of an interactive session.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from cbm.core.atomic import savefig_atomic


def plot_accuracy_vs_k(grid: Any, path: str | Path, blackbox_accuracy: float | None = None, title: str | None = None) -> Path:
    """Save a two-panel PNG: task accuracy vs ``k`` (one line per intervener/policy, the black
    box as a dashed horizontal line) and mean number of concepts requested vs ``k``; for a grid with
    costs (``meta['budget_unit'] == 'cost'``) the second panel is accuracy vs the mean cost spent.

    ``grid``: a :class:`~cbm.interventions.engine.ResultsGrid` or its list of rows.
    """
    rows = grid.rows if hasattr(grid, "rows") else list(grid)
    if blackbox_accuracy is None:
        blackbox_accuracy = getattr(grid, "blackbox_accuracy", None)
    by_cost = getattr(grid, "meta", {}).get("budget_unit") == "cost"
    lines: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        lines.setdefault((r["intervener"], r["policy"]), []).append(r)
    fig = Figure(figsize=(10, 4), dpi=120)
    FigureCanvasAgg(fig)
    ax_acc, ax_req = fig.subplots(1, 2)
    markers = "osD^v<>ph*"
    for n, ((iname, pname), rs) in enumerate(sorted(lines.items())):
        rs = sorted(rs, key=lambda r: r["k"])
        ks = [r["k"] for r in rs]
        label = f"{iname} / {pname}"
        ax_acc.plot(ks, [100 * r["accuracy"] for r in rs], marker=markers[n % len(markers)], label=label)
        if by_cost:
            ax_req.plot([r["mean_cost"] for r in rs], [100 * r["accuracy"] for r in rs], marker=markers[n % len(markers)], label=label)
        else:
            ax_req.plot(ks, [r["mean_requested"] for r in rs], marker=markers[n % len(markers)], label=label)
    if blackbox_accuracy is not None:
        ax_acc.axhline(100 * blackbox_accuracy, color="black", linestyle="--", linewidth=1, label="black box")
    ax_acc.set_xlabel("budget k (cost units per example)" if by_cost else "budget k (concepts per example)")
    ax_acc.set_ylabel("task accuracy after intervention (%)")
    ax_acc.grid(alpha=0.3)
    ax_acc.legend(fontsize=7)
    ax_req.set_xlabel("mean cost spent per example" if by_cost else "budget k")
    ax_req.set_ylabel("task accuracy after intervention (%)" if by_cost else "concepts requested per example")
    ax_req.grid(alpha=0.3)
    for ax in (ax_acc,) if by_cost else (ax_acc, ax_req):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return savefig_atomic(fig, path)
