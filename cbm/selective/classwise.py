"""Class-wise thresholds: one abstention threshold per predicted class (concept-benchmark 0.4.1's
``classwise_thresholds``), instead of one for every prediction.

Each predicted class is calibrated on the calibration predictions of that class alone, with the same
method, so each class's accepted predictions reach the target on their own (a guaranteed method runs
each class at ``delta / classes``: the union bound keeps the joint guarantee). A class whose
predictions reach the target at no threshold is never accepted (its threshold is ``None``). For two
classes scored by probability, accepting class 1 iff ``p > tau_1`` and class 0 iff ``1 - p > tau_0``
makes the rejection band ``[1 - tau_0, tau_1]``: the global rule's ``[1 - tau, tau]`` with its two
sides set apart.

>>> import numpy as np
>>> cal = calibrate_classwise(np.array([0.99, 0.9, 0.8, 0.95, 0.7]), np.array([1, 1, 0, 1, 1], bool),
...                           np.array([1, 1, 1, 0, 0]), 2, 0.9, "empirical", 0.1)
>>> cal["tau"]   # class 0: both right (accept all); class 1: above 0.8
[0.0, 0.8]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from cbm.selective.calibration import TargetUnreachable, calibrate, check_inputs

#: The methods whose threshold carries a finite-sample guarantee (each class gets ``delta / classes``).
GUARANTEED = ("sgr", "ltt")

#: A threshold as the flow uses it: one for every prediction, or one per predicted class (``None``:
#: that class is never accepted).
Threshold = float | Sequence[float | None]


def tau_text(tau: Threshold) -> str:
    """A threshold as the reports write it: ``0.9`` or, per class, ``[0.7, never, 0.8]``."""
    if isinstance(tau, int | float):
        return f"{tau:.6g}"
    return "[" + ", ".join("never" if t is None else f"{t:.6g}" for t in tau) + "]"


def per_example(tau: Threshold, preds: Tensor) -> Tensor:
    """``[B]`` the threshold each prediction is held to (``inf`` for a class never accepted)."""
    if isinstance(tau, int | float):
        return torch.full(preds.shape, float(tau), dtype=torch.float64, device=preds.device)
    table = torch.tensor([float("inf") if t is None else float(t) for t in tau], dtype=torch.float64, device=preds.device)
    return table[preds.long()]


def calibrate_classwise(scores, correct, preds, n_classes: int, target_accuracy: float, method: str, delta: float) -> dict[str, Any]:
    """Per predicted class, the threshold ``method`` chooses on that class's calibration predictions;
    the calibration record (``tau``: the list; ``per_class``: each class's record or why it has none).
    Raises :class:`TargetUnreachable` when no class reaches the target."""
    s, c = check_inputs(scores, correct)
    preds = np.asarray(preds).reshape(-1)
    n_classes = max(int(n_classes), 2)
    delta_c = delta / n_classes if method in GUARANTEED else delta
    taus: list[float | None] = []
    per_class: list[dict[str, Any]] = []
    for k in range(n_classes):
        rows = preds == k
        try:
            if not rows.any():
                raise TargetUnreachable(f"no calibration prediction of class {k}")
            cal = calibrate(s[rows], c[rows], target_accuracy, method, delta_c).to_dict()
            taus.append(cal["tau"])
        except TargetUnreachable as err:
            cal = {"failed": str(err), "n_cal": int(rows.sum())}
            taus.append(None)
        per_class.append(cal)
    if all(t is None for t in taus):
        why = "; ".join(f"class {k}: {p['failed']}" for k, p in enumerate(per_class))
        raise TargetUnreachable(f"{method} calibration (class-wise): no predicted class reaches selective accuracy {target_accuracy:.2%} ({why})")
    accepted = (torch.from_numpy(s) > per_example(taus, torch.from_numpy(preds))).numpy()
    done = [p for p in per_class if "failed" not in p]
    return {
        "method": method, "threshold": "classwise", "tau": taus, "target_accuracy": target_accuracy, "delta": delta,
        "n_cal": int(s.size), "n_accepted": int(accepted.sum()), "coverage_cal": float(accepted.mean()),
        "selective_acc_cal": float(c[accepted].mean()) if accepted.any() else None,
        "bound": min(p["bound"] for p in done), "guaranteed": all(p["guaranteed"] for p in done), "per_class": per_class,
    }  # fmt: skip
