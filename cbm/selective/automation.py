"""The automation flow: decide the confident cases, rescue some abstained ones with a few concepts.

For every example of a split, with the threshold ``tau`` calibrated beforehand:

1. encode + predict; if ``score > tau`` the model decides (*automated*, cost 0);
2. otherwise a policy picks ``S`` (``|S| <= k``) among the concepts, an intervener supplies
   their values, the model re-predicts and the example is re-scored with the **same** ``tau``;
3. if it is now confident it is *rescued* (automated, at cost ``cost(S)``); otherwise it is
   *deferred* to a human (not automated, and the requested concepts are still paid for).

Everything runs batch-wise on tensors: the abstained rows of a batch are gathered once per
budget ``k`` and intervened on together (no Python loop over examples).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from cbm.interventions.engine import apply_intervention
from cbm.interventions.interveners.base import Intervener
from cbm.interventions.interveners.oracle import OracleIntervener
from cbm.interventions.policies.base import Policy
from cbm.selective.abstention import confidence, predictions
from cbm.selective.calibration import Calibration, calibrate
from cbm.selective.classwise import Threshold, per_example, tau_text
from cbm.selective.metrics import (
    aurc,
    concept_costs,
    excess_aurc,
    net_work_automated,
    request_cost,
    risk_coverage_curve,
    selective_summary,
)

Batch = dict[str, Tensor]



# ----------------------------------------------------------------------------- scoring
@dataclass
class Scored:
    """Per-example confidence scores, predictions and labels of one split."""

    scores: np.ndarray
    preds: np.ndarray
    y: np.ndarray

    @property
    def correct(self) -> np.ndarray:
        return self.preds == self.y

    def __len__(self) -> int:
        return len(self.y)


def _to_device(batch: Mapping[str, Any], device) -> Batch:
    return {k: v.to(device) if isinstance(v, Tensor) else v for k, v in batch.items()}


class EncodedSplit(list):
    """A split read once: its batches on the model's device, each with the model's encoding of it,
    ``(batch, state)``. A flow that reads one split several times (Platt scaling and the threshold on
    the calibration split; the flow at each swept target or threshold rule on the test split) encodes
    it once: a two-stage model's OCR reads each board once, and every reading sees the same encoding
    (a sampling encoder's one draw). :func:`score_split` and :func:`run_automation` take it wherever
    they take batches."""


@torch.no_grad()
def encode_split(model, batches: Iterable[Batch]) -> EncodedSplit:
    """``batches`` encoded once by ``model`` (in evaluation mode)."""
    model.eval()
    return EncodedSplit(_encoded(model, batches))


def _encoded(model, batches: Iterable[Batch]) -> Iterator[tuple[Batch, Any]]:
    if isinstance(batches, EncodedSplit):
        yield from batches
        return
    for batch in batches:
        batch = _to_device(batch, model.device)
        yield batch, model.encode(batch["x"])


#: Maps a batch's task logits to the ones the flow scores (Platt scaling: ``Platt.logits``); ``None``: as predicted.
LogitMap = Callable[[Tensor], Tensor] | None


def _task_logits(model, state, transform: LogitMap) -> Tensor:
    logits = model.predict(state)
    return logits if transform is None else transform(logits)


@torch.no_grad()
def score_split(model, batches: Iterable[Batch], score: str = "probability", transform: LogitMap = None) -> Scored:
    """Confidence scores and predictions of ``model`` on every example of ``batches`` (``transform``:
    applied to the task logits first, e.g. Platt scaling)."""
    return _scored(model, batches, score, transform, lambda batch, state: state)


@torch.no_grad()
def score_confirmed(model, batches: Iterable[Batch], score: str = "probability", transform: LogitMap = None) -> Scored:
    """Like :func:`score_split`, after every concept of every example is set to its true value through
    the model's own intervention (0.4.1's ``p_test_true_concepts``): how confident checks can make the
    model at most. Examples still inside the abstention band are deferred whatever a human checks."""
    oracle = OracleIntervener()

    def confirmed(batch: Batch, state):
        mask = torch.ones(state.probs.shape, dtype=torch.bool, device=state.probs.device)
        return model.intervene(state, mask, oracle(batch, state, mask))

    return _scored(model, batches, score, transform, confirmed)


def _scored(model, batches: Iterable[Batch], score: str, transform: LogitMap, state_of: Callable[[Batch, Any], Any]) -> Scored:
    model.eval()
    scores, preds, ys = [], [], []
    for batch, state in _encoded(model, batches):
        state = state_of(batch, state)
        logits = _task_logits(model, state, transform)
        scores.append(confidence(model, state, logits, score).double().cpu())
        preds.append(predictions(logits).cpu())
        ys.append(batch["y"].cpu())
    if not scores:
        return Scored(np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    return Scored(torch.cat(scores).numpy(), torch.cat(preds).numpy(), torch.cat(ys).numpy())


def calibrate_model(
    model,
    calib_batches: Iterable[Batch],
    target_accuracy: float = 0.95,
    method: str = "ltt",
    delta: float = 0.1,
    score: str = "probability",
    transform: LogitMap = None,
) -> tuple[Calibration, Scored]:
    """Choose ``tau`` on the calibration split (and only there)."""
    cal = score_split(model, calib_batches, score, transform)
    return calibrate(cal.scores, cal.correct, target_accuracy, method, delta), cal


# ----------------------------------------------------------------------------- flow
@dataclass
class AutomationOutcome:
    """Per-example outcome of the flow at one budget ``k`` (all arrays ``[n]``)."""

    k: int
    tau: Threshold
    accepted_before: np.ndarray
    automated: np.ndarray
    correct_before: np.ndarray
    correct_final: np.ndarray
    score_final: np.ndarray
    n_requested: np.ndarray
    cost_uniform: np.ndarray
    cost_weighted: np.ndarray
    #: ``[n, m]`` bool: the concepts each example was asked about (the cost of any other pricing
    #: follows from it: the report's "cost of a check" table)
    asked: np.ndarray

    @property
    def n(self) -> int:
        return len(self.automated)

    def summary(self, target_accuracy: float | None = None) -> dict[str, Any]:
        """Coverage before/after, selective accuracy, rescued/deferred fractions, NWA, AURC."""
        before = selective_summary(self.accepted_before, self.correct_before)
        after = selective_summary(self.automated, self.correct_final)
        abstained = ~self.accepted_before
        rescued = abstained & self.automated
        deferred = abstained & ~self.automated
        out: dict[str, Any] = {
            "k": self.k,
            "tau": self.tau,
            "n": self.n,
            "coverage_before": before["coverage"],
            "selective_acc_before": before["selective_accuracy"],
            "rescued": float(rescued.mean()),
            "deferred": float(deferred.mean()),
            "coverage": after["coverage"],
            "selective_acc": after["selective_accuracy"],
            "rescued_acc": float(self.correct_final[rescued].mean()) if rescued.any() else None,
            "mean_requested": float(self.n_requested.mean()),
            "mean_cost_uniform": float(self.cost_uniform.mean()),
            "mean_cost": float(self.cost_weighted.mean()),
            "nwa": net_work_automated(self.automated, self.cost_uniform),
            "nwa_cost": net_work_automated(self.automated, self.cost_weighted),
            "requested_share": self.asked.mean(0).tolist(),
            "aurc": aurc(self.score_final, self.correct_final),
            "eaurc": excess_aurc(self.score_final, self.correct_final),
        }
        if target_accuracy is not None and out["selective_acc"] is not None:
            out["meets_target"] = bool(out["selective_acc"] >= target_accuracy)
        if not self.automated.any():
            out["note"] = (
                f"all {self.n} examples abstained or were deferred at tau={tau_text(self.tau)}: "
                "selective accuracy is undefined"
            )
        return out

    def curve(self) -> tuple[np.ndarray, np.ndarray]:
        """Risk–coverage curve of the final scores (abstained rows scored after their intervention)."""
        cov, risk, _ = risk_coverage_curve(self.score_final, self.correct_final)
        return cov, risk


def _rows(batch: Batch, idx: Tensor, n: int) -> Batch:
    return {
        k: v[idx] if isinstance(v, Tensor) and v.dim() > 0 and v.shape[0] == n else v
        for k, v in batch.items()
    }


@torch.no_grad()
def run_automation(
    model,
    batches: Iterable[Batch],
    tau: Threshold,
    ks: Sequence[int],
    policy_factory: Callable[[], Policy],
    intervener: Intervener,
    score: str = "probability",
    costs: Tensor | None = None,
    transform: LogitMap = None,
) -> dict[int, AutomationOutcome]:
    """Run the flow for every budget in ``ks`` on ``batches`` (encoded once per batch).

    ``tau``: one threshold, or one per predicted class (:mod:`cbm.selective.classwise`).
    ``policy_factory`` makes a fresh policy per ``k`` so results do not depend on the order of
    ``ks``; ``costs`` are normalised per-concept costs (:func:`~cbm.selective.metrics.concept_costs`),
    uniform when ``None``; ``transform`` maps every task logit the flow scores (before and after an
    intervention alike, e.g. Platt scaling).
    """
    model.eval()
    m = model.n_concepts
    for k in ks:
        if k < 0 or k > m:
            raise ValueError(f"intervention budget k={k} is outside [0, {m}] (the model has {m} concepts)")
    w_uniform = concept_costs([str(i) for i in range(m)])
    w = w_uniform if costs is None else costs.to(torch.float64)
    if w.shape != (m,):
        raise ValueError(f"costs must have one entry per concept ({m}), got shape {tuple(w.shape)}")
    policies = {k: policy_factory() for k in ks}
    parts: dict[int, dict[str, list[Tensor]]] = {k: {} for k in ks}

    def add(k: int, **cols: Tensor) -> None:
        for name, v in cols.items():
            parts[k].setdefault(name, []).append(v.detach().cpu())

    for batch, state in _encoded(model, batches):
        n = len(batch["y"])
        logits = _task_logits(model, state, transform)
        s0 = confidence(model, state, logits, score).double()
        pred0 = predictions(logits)
        acc0 = s0 > per_example(tau, pred0)
        idx = torch.nonzero(~acc0).flatten()
        sub_state = state.index(idx) if idx.numel() else None
        sub_batch = _rows(batch, idx, n) if idx.numel() else None
        for k in ks:
            score_f, pred_f, automated = s0.clone(), pred0.clone(), acc0.clone()
            n_req = torch.zeros(n, dtype=torch.long, device=s0.device)
            cost_u = torch.zeros(n, dtype=torch.float64, device=s0.device)
            cost_w = torch.zeros(n, dtype=torch.float64, device=s0.device)
            asked = torch.zeros(n, m, dtype=torch.bool, device=s0.device)
            if k > 0 and sub_state is not None:
                new_state, mask = apply_intervention(model, sub_state, sub_batch, policies[k], intervener, k)
                if mask.any():
                    new_logits = _task_logits(model, new_state, transform)
                    s1 = confidence(model, new_state, new_logits, score).double()
                    score_f[idx] = s1
                    pred_f[idx] = predictions(new_logits)
                    automated[idx] = s1 > per_example(tau, pred_f[idx])
                    n_req[idx] = mask.sum(dim=1)
                    cost_u[idx] = request_cost(mask, w_uniform)
                    cost_w[idx] = request_cost(mask, w)
                    asked[idx] = mask.to(asked.device)
            add(
                k,
                accepted_before=acc0,
                automated=automated,
                correct_before=pred0 == batch["y"],
                correct_final=pred_f == batch["y"],
                score_final=score_f,
                n_requested=n_req,
                cost_uniform=cost_u,
                cost_weighted=cost_w,
                asked=asked,
            )
    out = {}
    for k in ks:
        if not parts[k]:
            raise ValueError("no test examples to automate (the split is empty)")
        cols = {name: torch.cat(v).numpy() for name, v in parts[k].items()}
        out[k] = AutomationOutcome(k=k, tau=float(tau) if isinstance(tau, int | float) else list(tau), **cols)
    return out
