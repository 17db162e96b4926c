"""Risk–coverage plot of the automation flow and reliability diagram of a model's confidence (matplotlib, no display needed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from cbm.core.atomic import savefig_atomic


def plot_risk_coverage(
    curves: Mapping[str, tuple[np.ndarray, np.ndarray]],
    path: str | Path,
    target_accuracy: float | None = None,
    points: Sequence[tuple[str, float, float]] = (),
    title: str = "Risk-coverage",
) -> Path:
    """Save one risk–coverage curve per entry of ``curves`` (label -> (coverage, risk)).

    ``points``: operating points ``(curve label, coverage, risk)`` drawn as markers in their
    curve's colour (the calibrated ``tau`` per budget; ``risk=None`` is skipped);
    ``target_accuracy`` draws the risk target ``1 - target`` as a line.
    The file is written atomically.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(5.5, 4.0))
    try:
        colors = {}
        for label, (cov, risk) in curves.items():
            first = risk[0] if len(risk) else 0.0
            (line,) = ax.step(
                np.concatenate([[0.0], cov]), np.concatenate([[first], risk]), where="pre", label=label
            )
            colors[label] = line.get_color()
        marked = False
        for label, cov, risk in points:
            if risk is None:
                continue
            ax.plot(
                [cov],
                [risk],
                "o",
                ms=7,
                mec="black",
                color=colors.get(label, "black"),
                label=None if marked else "operating point at tau",
            )
            marked = True
        if target_accuracy is not None:
            ax.axhline(
                1.0 - target_accuracy,
                color="grey",
                ls="--",
                lw=1,
                label=f"target risk {1 - target_accuracy:.2%}",
            )
        ax.set_xlabel("coverage")
        ax.set_ylabel("selective risk")
        ax.set_xlim(0.0, 1.0)
        ax.set_ylim(bottom=0.0)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        savefig_atomic(fig, path, dpi=120, format="png")
    finally:
        plt.close(fig)
    return path


def plot_reliability(
    curves: Mapping[str, tuple[np.ndarray, np.ndarray]],
    path: str | Path,
    n_bins: int = 10,
    low: float = 0.0,
    title: str = "Reliability",
) -> Path:
    """Save a reliability diagram: one line per entry of ``curves`` (label -> (confidence, correct)).

    Each point is a bin of :func:`~cbm.selective.metrics.reliability_bins` (``n_bins`` on
    ``[low, 1]``; ``low=0.5`` for binary models) at its mean confidence and accuracy, its marker's
    area the bin's share of the examples; the diagonal is perfect calibration and each label
    carries its expected calibration error. The file is written atomically.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from cbm.selective.metrics import expected_calibration_error, reliability_bins

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig = Figure(figsize=(5.0, 4.4))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    ax.plot([low, 1.0], [low, 1.0], ":", color="grey", lw=1, label="perfectly calibrated")
    for label, (confidence, correct) in curves.items():
        conf, acc, count = reliability_bins(confidence, correct, n_bins, low)
        ece = expected_calibration_error(confidence, correct, n_bins, low)
        (line,) = ax.plot(conf, acc, "-", lw=1, label=f"{label} (ECE {ece:.3f})")
        ax.scatter(conf, acc, s=8 + 200 * count / count.sum(), color=line.get_color(), zorder=3)
    ax.set_xlabel("confidence (mean of the bin)")
    ax.set_ylabel("accuracy in the bin")
    ax.set_xlim(low, 1.0)
    ax.set_ylim(min(low, ax.get_ylim()[0]), 1.0)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return savefig_atomic(fig, path, dpi=120, format="png")
