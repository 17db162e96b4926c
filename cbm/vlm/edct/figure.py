"""One item's edit chain as a picture: the original, then each counterfactual of the chain with the
mask its verifier checked, titled with the edited concept, the true label and the verdict.

Reads what ``cbm-edct`` writes for an item (``items/<id>/record.json``, ``original.png``,
``step<i>.png``, ``step<i>_mask.png``); drawn on matplotlib's Agg canvas (the global backend is
never changed) and written atomically.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from cbm.core.atomic import savefig_atomic
from cbm.vlm.edct.records import read_record

#: Colour of the mask outline drawn over a counterfactual.
MASK_COLOUR = "#ff00ff"


def _verdict(step: dict[str, Any]) -> str:
    v = step.get("verify")
    if not v:
        return "not verified"
    word = "verified" if v["passed"] else f"rejected ({v.get('reason') or 'not local'})"
    return f"{word}:\n{v['in_ratio']:.0%} of the mask changed,\n{v['out_ratio']:.0%} of the pixels outside it"


def chain_figure(item_dir: str | Path, path: str | Path, title: str | None = None) -> Path:
    """Save a PNG of the EDCT chain in ``item_dir`` (an ``items/<id>`` directory of a run).

    Top row: the original and each step's counterfactual, the mask outlined on it; bottom row:
    each step's mask alone (white: the pixels the edit may change). Every panel says the concept
    edited, the true label after the edit (synthetic items; ``None`` for photographs) and the
    verifier's verdict. Returns ``path``.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from PIL import Image

    d = Path(item_dir)
    rec = read_record(d / "record.json")
    steps = [s for s in rec.get("steps", []) if (d / f"step{s['index']}.png").is_file()]
    n = 1 + len(steps)
    fig = Figure(figsize=(2.4 * n, 5.0), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, n, squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    axes[0][0].imshow(np.asarray(Image.open(d / "original.png").convert("RGB")), interpolation="nearest")
    axes[0][0].set_title(f"original\ntrue label: {rec.get('truth')}", fontsize=8)
    axes[1][0].text(0.5, 0.5, "masks: the pixels\neach edit may change", ha="center", va="center", fontsize=8,
                    transform=axes[1][0].transAxes)  # fmt: skip
    for j, step in enumerate(steps, 1):
        image = np.asarray(Image.open(d / f"step{step['index']}.png").convert("RGB"))
        mask_file = d / f"step{step['index']}_mask.png"
        axes[0][j].imshow(image, interpolation="nearest")
        if mask_file.is_file():
            mask = np.asarray(Image.open(mask_file).convert("L")) > 0
            axes[0][j].contour(mask, levels=[0.5], colors=MASK_COLOUR, linewidths=0.8)
            axes[1][j].imshow(mask, cmap="gray", vmin=0, vmax=1, interpolation="nearest")
        moved = " (label flips)" if step.get("known_change") else ""
        axes[0][j].set_title(f"step {step['index']}: edit the {step['concept']}\ntrue label: {step.get('truth')}{moved}", fontsize=8)
        axes[1][j].set_title(_verdict(step), fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return savefig_atomic(fig, path)
