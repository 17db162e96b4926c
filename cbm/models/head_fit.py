"""Fit a label predictor on fixed concepts to convergence (the independent CBM's head).

An independent CBM's head learns ``y`` from the *annotated* training concepts, which do not change
while the encoder trains: a fixed, small problem (convex for a linear head). Trained by the
encoder's optimiser for a few epochs it stops wherever the epochs run out, and that point moves
with the machine's floating-point order (a test once reached 97.6% on one machine and 99.98% on
another). Here it is solved instead: full-batch L-BFGS with a strong-Wolfe line search in float64
(on the data's device) on the distinct (concept vector, label) rows weighted by their counts (exactly the mean
cross-entropy of the training set), with a small L2 penalty on the weights so the minimiser is
unique even when the classes are separable. Every machine reaches the same head up to ``tol``.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

log = logging.getLogger("cbm")


@dataclass
class HeadFit:
    """What the solver reached: iterations, final objective, gradient max-norm, training accuracy."""

    iterations: int
    loss: float
    grad_max: float
    train_acc: float
    converged: bool
    rows: int
    distinct: int


def distinct_rows(c: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The distinct ``(c, y)`` rows and their counts (binary concepts collapse a million rows to a few dozen)."""
    joint = torch.cat([c.double(), y.double()[:, None]], dim=1)
    rows, counts = torch.unique(joint, dim=0, return_counts=True)
    return rows[:, :-1], rows[:, -1].long(), counts.double()


def fit_head(head: nn.Module, c: Tensor, y: Tensor, l2: float, max_iter: int, tol: float) -> HeadFit:
    """Fit ``head`` (in place) to minimise ``mean CE(head(c), y) + l2/2 * ||weights||^2``.

    ``c``: ``[N, m]`` concept inputs (0/1 or probabilities), ``y``: ``[N]`` class ids. Computed on
    data's device in float64 and copied back into the head's own dtype and device."""
    if len(y) == 0:
        raise ValueError("cannot fit the label predictor: the training split is empty")
    x, labels, counts = distinct_rows(c.detach(), y.detach().to(c.device))
    weights = counts / counts.sum()
    work = copy.deepcopy(head).to(device=c.device, dtype=torch.float64).requires_grad_(True)
    params = [p for p in work.parameters()]
    penalised = [p for name, p in work.named_parameters() if name.endswith("weight")]
    opt = torch.optim.LBFGS(params, lr=1.0, max_iter=max_iter, tolerance_grad=tol, tolerance_change=0.0,
                            history_size=50, line_search_fn="strong_wolfe")  # fmt: skip

    def objective() -> Tensor:
        opt.zero_grad()
        ce = (F.cross_entropy(work(x), labels, reduction="none") * weights).sum()
        loss = ce + 0.5 * l2 * sum((p * p).sum() for p in penalised)
        loss.backward()
        return loss

    opt.step(objective)
    loss = float(objective().detach())
    grad_max = max(float(p.grad.abs().max()) for p in params)
    with torch.no_grad():
        acc = float(((work(x).argmax(1) == labels).double() * weights).sum())
        for mine, fitted in zip(head.parameters(), params):
            mine.copy_(fitted.to(mine.dtype))
    iterations = int(opt.state[params[0]].get("n_iter", 0))
    return HeadFit(iterations, loss, grad_max, acc, grad_max <= tol, len(y), len(labels))
