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


def margin_weights(head: nn.Linear) -> tuple[Tensor, Tensor]:
    """``(w [m], b)`` of a two-class linear head's logit margin ``z1 - z0 = w . c + b``."""
    return head.weight[1] - head.weight[0], head.bias[1] - head.bias[0]


def fit_signed_head(head: nn.Linear, c: Tensor, y: Tensor, signs: Tensor, l2: float, max_iter: int, tol: float) -> HeadFit:
    """:func:`fit_head` for a two-class linear head whose margin weights must have the given signs
    (``signs [m]``: +1 ``w_i >= 0``, -1 ``w_i <= 0``, 0 free): the same convex objective on the
    margin ``z = w . c + b`` (the symmetric split ``W1 = -W0 = w/2`` minimises the L2 term for a
    given margin, so the penalty is ``l2/4 ||w||^2``), solved by L-BFGS-B with the signs as bounds
    (exact at the boundary: a weight the data push past 0 stops at 0). Convergence is judged on the
    projected gradient."""
    import numpy as np
    from scipy.optimize import Bounds, minimize

    if len(y) == 0:
        raise ValueError("cannot fit the label predictor: the training split is empty")
    xt, labels, counts = distinct_rows(c.detach(), y.detach().to(c.device))
    x, t, wts = xt.cpu().numpy(), labels.cpu().numpy().astype(np.float64), (counts / counts.sum()).cpu().numpy()
    m = x.shape[1]

    def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = theta[:m], theta[m]
        z = x @ w + b
        # mean CE of softmax([-z/2, z/2]) = softplus(z) - t z, weighted by the rows' counts
        loss = float(wts @ (np.logaddexp(0.0, z) - t * z)) + 0.25 * l2 * float(w @ w)
        r = wts * (1.0 / (1.0 + np.exp(-z)) - t)
        return loss, np.concatenate([x.T @ r + 0.5 * l2 * w, [r.sum()]])

    sign = signs.detach().cpu().numpy()
    lo = np.concatenate([np.where(sign > 0, 0.0, -np.inf), [-np.inf]])  # w_i >= 0 / <= 0 / free; the bias free
    hi = np.concatenate([np.where(sign < 0, 0.0, np.inf), [np.inf]])
    w0, b0 = (v.detach().double().cpu().numpy() for v in margin_weights(head))
    start = np.clip(np.concatenate([w0, [float(b0)]]), lo, hi)
    res = minimize(objective, start, jac=True, method="L-BFGS-B", bounds=Bounds(lo, hi),
                   options={"maxiter": max_iter, "gtol": tol, "ftol": 0.0, "maxcor": 50})  # fmt: skip
    theta = res.x
    _, grad = objective(theta)
    projected = np.clip(theta - grad, lo, hi) - theta  # 0 at a KKT point of the bounded problem
    grad_max = float(np.abs(projected).max())
    w, b = torch.from_numpy(theta[:m]), float(theta[m])
    with torch.no_grad():
        head.weight.copy_(torch.stack([-w / 2, w / 2]).to(head.weight))
        head.bias.copy_(torch.tensor([-b / 2, b / 2]).to(head.bias))
    acc = float(wts @ (((x @ theta[:m] + theta[m]) > 0) == (t > 0.5)))
    return HeadFit(int(res.nit), float(res.fun), grad_max, acc, grad_max <= tol, len(y), len(labels))


def project_signs(head: nn.Linear, signs: Tensor) -> None:
    """Euclidean projection of a two-class linear head onto ``signs_i (W1_i - W0_i) >= 0``: both
    rows of a violating concept move to their mean (its margin weight becomes exactly 0; projected
    gradient descent for heads trained by the optimiser). Idempotent."""
    with torch.no_grad():
        w = head.weight[1] - head.weight[0]
        bad = (signs * w) < 0
        mid = (head.weight[0] + head.weight[1]) / 2
        head.weight[0] = torch.where(bad, mid, head.weight[0])
        head.weight[1] = torch.where(bad, mid, head.weight[1])
