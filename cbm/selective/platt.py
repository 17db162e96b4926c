"""Platt scaling of a binary model's ``P(y=1)`` on the calibration split (``cbm-automate platt=true``).

concept-benchmark 0.4.1 (``concept_benchmark/evaluation/metrics.py``, ``PlattScaling``) rescales the
label probability before its abstention threshold: ``p -> sigmoid(a * logit(p) + b)`` with ``p``
clipped to ``[1e-6, 1 - 1e-6]``, ``(a, b)`` fitted by scikit-learn's ``LogisticRegression(C=1e6)``
on the calibration predictions (``a`` penalised by ``a^2 / (2C)``, ``b`` free; nothing is fitted
when the labels hold one class). The fit here is Newton's method on that same objective, in float64;
the scaled predictions are float64 logits ``[0, z]`` (their softmax gives back ``sigmoid(z)``), so
confidences near 1 stay apart as in 0.4's numpy.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

#: 0.4's clip of the probability before its logit, and of the scaled logit.
CLIP, Z_MAX = 1e-6, 500.0


def logit(p: np.ndarray) -> np.ndarray:
    q = np.clip(np.asarray(p, dtype=np.float64).reshape(-1), CLIP, 1.0 - CLIP)
    return np.log(q / (1.0 - q))


@dataclass(frozen=True)
class Platt:
    """``p -> sigmoid(a * logit(p) + b)``; the identity is ``a = 1, b = 0``."""

    a: float = 1.0
    b: float = 0.0
    n: int = 0
    iterations: int = 0

    def __call__(self, p: np.ndarray) -> np.ndarray:
        z = np.clip(self.a * logit(p) + self.b, -Z_MAX, Z_MAX)
        return 1.0 / (1.0 + np.exp(-z))

    def to_dict(self) -> dict:
        return asdict(self)

    def logits(self, task_logits):
        """Scaled two-class logits ``float64 [B, 2]`` of a binary model's task logits ``[B, 2]``."""
        import torch

        if task_logits.dim() != 2 or task_logits.shape[1] != 2:
            raise ValueError(f"platt scaling needs a two-class model (task logits [B, 2]), got {tuple(task_logits.shape)}")
        p = torch.softmax(task_logits.double(), dim=1)[:, 1].clamp(CLIP, 1.0 - CLIP)
        z = (self.a * torch.log(p / (1.0 - p)) + self.b).clamp(-Z_MAX, Z_MAX)
        return torch.stack([torch.zeros_like(z), z], dim=1)


def fit_platt(p: np.ndarray, y: np.ndarray, C: float = 1e6, max_iter: int = 100, tol: float = 1e-10) -> Platt:
    """Fit ``(a, b)`` minimising ``C * sum(log-loss) + a^2 / 2`` (scikit-learn's objective) by Newton
    steps with backtracking; one-class labels give the identity, as in 0.4."""
    x = logit(p)
    y = np.asarray(y).astype(np.float64).reshape(-1)
    if x.shape != y.shape:
        raise ValueError(f"fit_platt: {x.size} probabilities but {y.size} labels")
    if len(np.unique(y)) < 2:
        return Platt(n=len(y))
    X = np.stack([x, np.ones_like(x)], axis=1)
    w = np.zeros(2)

    def objective(w: np.ndarray) -> float:
        z = X @ w
        return float(C * np.sum(np.logaddexp(0.0, z) - y * z) + 0.5 * w[0] ** 2)

    it = 0
    while it < max_iter:
        it += 1
        z = X @ w
        q = 1.0 / (1.0 + np.exp(-z))
        grad = C * X.T @ (q - y) + np.array([w[0], 0.0])
        hess = C * (X.T * (q * (1 - q))) @ X + np.diag([1.0, 0.0]) + 1e-12 * np.eye(2)
        step = np.linalg.solve(hess, grad)
        f0, t = objective(w), 1.0
        while objective(w - t * step) > f0 - 1e-4 * t * float(grad @ step) and t > 1e-10:
            t *= 0.5
        w = w - t * step
        if np.max(np.abs(t * step)) < tol * (1 + np.max(np.abs(w))):
            break
    return Platt(float(w[0]), float(w[1]), int(len(y)), it)
