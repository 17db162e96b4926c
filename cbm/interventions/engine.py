"""The intervention engine: task accuracy after test-time interventions over a grid of
interveners x policies x budgets ``k``.

Each batch is encoded once; each policy chooses its concepts once per budget (shared by
all interveners); each intervener's values go through the model's own ``intervene`` and
``predict``. Metrics per (intervener, policy, k): accuracy after intervention, its gain
over a black-box accuracy when one is given, mean number of concepts requested per
example, fraction of examples requesting any. Runs under ``torch.no_grad`` on the
model's device.

Per concept (``ResultsGrid.concept_stats``, stored in ``results.json`` under ``concept_stats``): the
detector's accuracy (``probs > 0.5`` against the true concepts the oracle uses) and, per (intervener,
policy, k), how often the concept was requested and how often the intervener's value on it was right:
an intervention helps only where the intervener is right on what the model asks.

>>> grid = run_grid(model, loader, {"oracle": OracleIntervener()},
...                 {"random": RandomPolicy(0)}, ks=[0, 1, 2])     # doctest: +SKIP
>>> grid.save(out_dir)  # results.csv, results.json, accuracy_vs_k.png   # doctest: +SKIP
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from cbm.core.atomic import write_csv_atomic, write_json_atomic
from cbm.core.tables import markdown_table
from cbm.interventions.costs import EPS, as_budget, priority, spent, within_budget
from cbm.interventions.encodings import encode_values
from cbm.interventions.hierarchy import Implications
from cbm.interventions.interveners.base import THRESHOLD, Batch, Intervener, true_concepts
from cbm.interventions.policies.base import Policy
from cbm.models.concept_types import expand
from cbm.models.devices import model_device, to_device  # noqa: F401 (the engine's callers import them from here too)

#: Columns of ``results.csv`` (and the keys of each row).
#: ``k`` is the budget: concepts, or cost units when the grid has costs (``mean_cost``: what was spent).
COLUMNS = ["intervener", "policy", "k", "accuracy", "gain", "mean_requested", "frac_requesting", "mean_cost", "mean_edits", "frac_changed",
           "n_examples", "seconds"]  # fmt: skip

PolicyLike = Policy | Callable[[], Policy]
#: The engine sees all the data it scores: its metrics never synchronise across processes
#: (after a DDP run only rank zero evaluates interventions).
LOCAL = {"sync_on_compute": False}


def _policy_for_k(policy: PolicyLike) -> Policy:
    """A fresh policy from a factory (a class or a callable without ``select``), a fork of a policy
    that defines ``fork()`` (random policies), else the policy itself (deterministic policies)."""
    if isinstance(policy, type) or not hasattr(policy, "select"):
        return policy()  # type: ignore[operator]
    fork = getattr(policy, "fork", None)
    return fork() if callable(fork) else policy  # type: ignore[return-value]


def _check_mask(mask: Tensor, state, k: float, name: str, costs: Tensor | None = None) -> Tensor:
    if mask.shape != state.probs.shape or mask.dtype != torch.bool:
        raise ValueError(f"policy '{name}' returned a {mask.dtype} mask of shape {tuple(mask.shape)}, expected bool {tuple(state.probs.shape)}")
    if bool((spent(mask, costs) > k + EPS).any()):
        unit = "cost units" if costs is not None else "concepts"
        raise ValueError(f"policy '{name}' requested more than k={k} {unit} for some example")
    if bool((mask & state.intervened).any()):
        raise ValueError(f"policy '{name}' requested concepts that were already intervened on")
    return mask


@dataclass
class ResultsGrid:
    """Rows of :data:`COLUMNS`, one per (intervener, policy, k), plus run metadata."""

    rows: list[dict[str, Any]]
    blackbox_accuracy: float | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    #: With ``per_example``: ``(intervener, policy, k) -> {mask, pred, y, n_requested[, idx]}``.
    examples: dict[tuple[str, str, int], dict[str, Tensor]] = field(default_factory=dict)
    #: Per-concept statistics (``None`` in results written before they existed, or when the batches'
    #: true concepts do not match the model's): ``names``, ``n_examples``, ``detector_accuracy`` ``[m]``
    #: and ``rows`` of ``{intervener, policy, k, requested [m], correct [m]}`` (counts over examples).
    concept_stats: dict[str, Any] | None = None

    def row(self, intervener: str, policy: str, k: int) -> dict[str, Any]:
        for r in self.rows:
            if r["intervener"] == intervener and r["policy"] == policy and r["k"] == k:
                return r
        raise KeyError(f"no result for intervener={intervener!r}, policy={policy!r}, k={k}")

    def curves(self) -> dict[tuple[str, str], tuple[list[int], list[float]]]:
        """``(intervener, policy) -> (ks, accuracies)``, ks ascending: the intervention curves."""
        out: dict[tuple[str, str], list[tuple[int, float]]] = {}
        for r in self.rows:
            out.setdefault((r["intervener"], r["policy"]), []).append((r["k"], r["accuracy"]))
        return {key: ([k for k, _ in sorted(v)], [a for _, a in sorted(v)]) for key, v in out.items()}

    def with_blackbox(self, accuracy: float | None) -> ResultsGrid:
        """The grid with ``gain = accuracy - accuracy`` of the black box filled in."""
        rows = [{**r, "gain": None if accuracy is None else r["accuracy"] - accuracy} for r in self.rows]
        return ResultsGrid(rows, accuracy, dict(self.meta), self.examples, self.concept_stats)

    def concept_rows(self) -> list[dict[str, Any]]:
        """:attr:`concept_stats` in long form: one ``{intervener, policy, k, concept, requested, correct,
        detector_accuracy}`` per concept and grid row (``[]`` without statistics)."""
        return concept_rows(self.concept_stats)

    def table(self) -> str:
        """Markdown table (accuracies and gains in %)."""
        cols = ["intervener", "policy", "k", "accuracy", "gain", "mean_requested", "frac_requesting"]
        if self.meta.get("budget_unit") == "cost":
            cols.append("mean_cost")
        cols += ["mean_edits", "frac_changed"]
        rows = [{**r, "mean_requested": f"{r['mean_requested']:.2f}", "mean_cost": f"{r.get('mean_cost', 0.0):.2f}",
                 "mean_edits": f"{r.get('mean_edits', 0.0):.2f}", "frac_changed": f"{r.get('frac_changed', 0.0):.3f}"} for r in self.rows]  # fmt: skip
        for r in rows:
            if r.get("gain") is not None:
                r["gain"] = f"{100 * r['gain']:+.2f}"
        return markdown_table(rows, cols)

    def to_csv(self, path: str | Path) -> Path:
        return write_csv_atomic(path, self.rows, COLUMNS)

    def to_json(self, path: str | Path) -> Path:
        obj = {"rows": self.rows, "blackbox_accuracy": self.blackbox_accuracy, "meta": self.meta}
        if self.concept_stats is not None:
            obj["concept_stats"] = self.concept_stats
        return write_json_atomic(path, obj)

    @classmethod
    def from_json(cls, path: str | Path) -> ResultsGrid:
        obj = json.loads(Path(path).read_text())
        stats = obj.get("concept_stats")  # absent in results written before per-concept statistics
        return cls(obj["rows"], obj.get("blackbox_accuracy"), obj.get("meta", {}), concept_stats=stats)

    def save(self, out_dir: str | Path, plot: bool = True) -> dict[str, Path]:
        """Write ``results.csv``, ``results.json`` (and ``accuracy_vs_k.png``) into ``out_dir``."""
        out = Path(out_dir)
        paths = {"csv": self.to_csv(out / "results.csv"), "json": self.to_json(out / "results.json")}
        if plot:
            from cbm.interventions.plots import plot_accuracy_vs_k

            paths["plot"] = plot_accuracy_vs_k(self, out / "accuracy_vs_k.png", title=self.meta.get("title"))
        if self.examples:
            torch.save({"/".join(map(str, key)): v for key, v in self.examples.items()}, out / "per_example.pt")
            paths["per_example"] = out / "per_example.pt"
        return paths


def concept_rows(stats: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Per-concept statistics (``results.json``'s ``concept_stats``) in long form, one row per concept
    and (intervener, policy, k); ``[]`` for results without them."""
    if not stats:
        return []
    names, det = stats["names"], stats["detector_accuracy"]
    return [
        {"intervener": r["intervener"], "policy": r["policy"], "k": r["k"], "concept": name, "requested": req,
         "correct": ok, "detector_accuracy": d}
        for r in stats["rows"]
        for name, req, ok, d in zip(names, r["requested"], r["correct"], det)
    ]  # fmt: skip


class ConceptCounter:
    """Per-concept counts of a grid, accumulated batch by batch on the model's device (vectorised
    over the batch): detector hits, and per (intervener, policy, k) requests and right answers."""

    def __init__(self, names: Sequence[str], device: torch.device):
        self.names = list(names)
        self.device = device
        self.n = 0
        self.detector = torch.zeros(len(self.names), dtype=torch.long, device=device)
        self.requested: dict[tuple[str, str, int], Tensor] = {}
        self.correct: dict[tuple[str, str, int], Tensor] = {}
        self.truth: Tensor | None = None

    def batch(self, batch: Batch, state) -> bool:
        """Start a batch: its true concepts (``False``, and no statistics at all, when they do not
        match the model's concepts, e.g. a checkpoint of another concept set)."""
        truth = true_concepts(batch) if "c" in batch or "c_clean" in batch else None
        if truth is None or tuple(truth.shape) != tuple(state.probs.shape):
            self.truth = None
            return False
        self.truth = truth.to(state.probs.device) > THRESHOLD
        self.detector += ((state.probs > THRESHOLD) == self.truth).sum(0)
        self.n += len(self.truth)
        return True

    def add(self, combo: tuple[str, str, int], mask: Tensor, values: Tensor | None) -> None:
        """Requests ``mask`` and the intervener's ``values`` (``None``: nothing was requested)."""
        zero = torch.zeros(len(self.names), dtype=torch.long, device=self.device)
        self.requested[combo] = self.requested.get(combo, zero) + mask.sum(0)
        right = zero if values is None else (mask & ((values > THRESHOLD) == self.truth)).sum(0)
        self.correct[combo] = self.correct.get(combo, zero) + right

    def to_dict(self, combos: Sequence[tuple[str, str, int]]) -> dict[str, Any]:
        """The ``concept_stats`` of ``results.json`` (counts as integers, one row per combination)."""
        zero = [0] * len(self.names)

        def counts(d: dict[tuple[str, str, int], Tensor], c: tuple[str, str, int]) -> list[int]:
            return d[c].tolist() if c in d else zero

        rows = [{"intervener": c[0], "policy": c[1], "k": c[2], "requested": counts(self.requested, c),
                 "correct": counts(self.correct, c)} for c in combos]  # fmt: skip
        det = (self.detector.double() / max(self.n, 1)).tolist()
        return {"names": self.names, "n_examples": self.n, "detector_accuracy": det, "rows": rows}


def concept_names(model, m: int) -> list[str]:
    """The model's concept names (``info.concept_names``), else ``c0 .. c<m-1>``."""
    names = list(getattr(getattr(model, "info", None), "concept_names", None) or [])
    return names if len(names) == m else [f"c{j}" for j in range(m)]


def apply_intervention(
    model, state, batch: Batch, policy: Policy, intervener: Intervener, k: int
) -> tuple[Any, Tensor]:
    """Ask ``policy`` for up to ``k`` concepts, ``intervener`` for their values, and intervene.

    Returns the new state and the request mask ``[B,m]``.
    """
    mask = policy.select(model, state, k)
    if not mask.any():
        return state, mask
    values = intervener(batch, state, mask)
    return model.intervene(state, mask, values), mask


@torch.no_grad()
def model_accuracy(model, batches: Iterable[Batch]) -> float:
    """Plain task accuracy of ``model`` (any architecture, the black box included)."""
    model.eval()
    device = model_device(model)
    metric = MulticlassAccuracy(num_classes=max(model.n_classes, 2), average="micro", **LOCAL).to(device)
    n = 0
    for batch in batches:
        batch = to_device(batch, device)
        metric.update(model(batch["x"])[1], batch["y"])
        n += len(batch["y"])
    if n == 0:
        raise ValueError("no examples to evaluate the model on")
    return float(metric.compute())


@torch.no_grad()
def run_grid(
    model,
    batches: Iterable[Batch],
    interveners: Mapping[str, Intervener],
    policies: Mapping[str, PolicyLike],
    ks: Sequence[int],
    *,
    per_example: bool = False,
    blackbox_accuracy: float | None = None,
    encoding: Tensor | None = None,
    costs: Tensor | None = None,
    per_cost: bool = True,
    implications: Implications | None = None,
    propagate: bool = False,
    exchange: tuple[str, str, Sequence[int]] | None = None,
    units: Tensor | None = None,
) -> ResultsGrid:
    """Evaluate every (intervener, policy, k) on ``batches`` (budgets ``ks`` already resolved).

    ``policies`` maps names to policies or to zero-argument factories (called once per ``k``).
    Policies that define ``fork()`` (random ones) get one fork per ``k``; others are shared
    across budgets and may define ``prepare_batch(model, state, ks)`` to evaluate once per batch.
    ``encoding``: levels ``[2, m]`` the model reads for an answer 0 / 1
    (:mod:`cbm.interventions.encodings`; ``None``: the answers themselves).
    ``costs``: per-concept costs ``[m]`` (:mod:`cbm.interventions.costs`): budgets are cost units, each
    policy's concepts are asked in its order of preference while they fit (value per cost for the
    policies with ``values`` when ``per_cost``).
    ``implications`` (:mod:`cbm.interventions.hierarchy`): the model's predictions that break them are
    counted (``meta['hierarchy']``); with ``propagate`` every answer also sets the concepts it implies
    (counted once, as the concept asked).
    ``exchange`` ``(first, second, columns)``: two of ``interveners`` answer the same requests; rows
    ``first+second`` (the first's answers with the second's on ``columns``, one concept) and
    ``second+first`` say how much of the gap between them that concept's answers make (0.4.1's
    answer-exchange table).
    ``units`` (``long [m]``, :attr:`cbm.models.concept_types.ConceptTypes.unit_of`): groups of concepts
    one answer reveals (the data's, e.g. CUB's attribute groups): asking one asks its group, a budget
    counts groups; default: the model's categorical concepts.
    """
    if not getattr(model, "has_concepts", True):
        raise ValueError("the black-box model has no concepts to intervene on")
    ks = list(dict.fromkeys(as_budget(k) if costs is not None else int(k) for k in ks))
    types = getattr(model, "types", None)
    # typed concepts: asking one value of a categorical concept asks the concept (one request, one
    # cost; every column of it answered); budgets are filled through the policies' rankings
    unit_of = units if units is not None else types.unit_of if types is not None and types.groups else None
    if any(k < 0 for k in ks):
        raise ValueError(f"intervention budgets must be >= 0, got {ks}")
    if not interveners or not policies:
        raise ValueError("run_grid needs at least one intervener and one policy")
    swaps = _exchanges(exchange, interveners)
    model.eval()
    device = model_device(model)
    n_classes = max(int(getattr(model, "n_classes", 2)), 2)
    pol = {name: {k: _policy_for_k(p) for k in ks} for name, p in policies.items()}
    combos = [(i, p, k) for i in interveners for p in policies for k in ks]
    acc = {c: MulticlassAccuracy(num_classes=n_classes, average="micro", **LOCAL).to(device)
           for c in combos + [(s, p, k) for s in swaps for p in policies for k in ks]}  # fmt: skip
    req = {(p, k): MeanMetric(**LOCAL).to(device) for p in policies for k in ks}
    cost = {(p, k): MeanMetric(**LOCAL).to(device) for p in policies for k in ks}
    frac = {(p, k): MeanMetric(**LOCAL).to(device) for p in policies for k in ks}
    every = combos + [(s, p, k) for s in swaps for p in policies for k in ks]
    edits = {c: MeanMetric(**LOCAL).to(device) for c in every}  # answers unlike the model's 1[p > 0.5], per example
    changed = {c: MeanMetric(**LOCAL).to(device) for c in every}  # predictions the answers change
    seconds = {c: 0.0 for c in combos}
    keep: dict[tuple[str, str, int], dict[str, list[Tensor]]] = {c: {} for c in combos} if per_example else {}
    counter: ConceptCounter | None = None
    stats_ok = True  # every batch had true concepts of the model's shape
    total = 0
    broken = torch.zeros(2, dtype=torch.long, device=device)  # rows with a violation, violations
    for batch in batches:
        batch = to_device(batch, device)
        state = model.encode(batch["x"])
        if implications is not None:
            v = implications.violations(state.probs)
            broken += torch.stack([(v > 0).sum(), v.sum()])
        base_pred = model.predict(state).argmax(1)
        y = batch["y"]
        total += len(y)
        counter = counter or ConceptCounter(concept_names(model, state.n_concepts), device)
        stats_ok = counter.batch(batch, state) and stats_ok
        for pname in policies:
            t0 = time.perf_counter()
            shared = {id(pk) for pk in pol[pname].values()}
            if len(shared) == 1 and hasattr(pol[pname][ks[0]], "prepare_batch") and costs is None and unit_of is None:
                pol[pname][ks[0]].prepare_batch(model, state, [k for k in ks if k > 0])
            masks, ranks = {}, {}
            for k in ks:
                if k == 0:
                    masks[k] = torch.zeros_like(state.probs, dtype=torch.bool)
                elif costs is None and unit_of is None:
                    masks[k] = _check_mask(pol[pname][k].select(model, state, k), state, k, pname)
                else:
                    pk = pol[pname][k]
                    unit_costs = costs if costs is not None else torch.ones(state.n_concepts)
                    if id(pk) not in ranks:  # a shared (deterministic) policy ranks once per batch
                        ranks[id(pk)] = priority(pk, model, state, unit_costs, per_cost)
                    masks[k] = _check_mask(within_budget(ranks[id(pk)], unit_costs, k, unit_of), state, k, pname, costs)
            t_policy = (time.perf_counter() - t0) / len(ks)
            for k, mask in masks.items():
                n_req = mask.sum(1)
                req[(pname, k)].update(n_req.float())
                cost[(pname, k)].update(spent(mask, costs))
                frac[(pname, k)].update((n_req > 0).float())
                answered = mask if unit_of is None else expand(mask, unit_of)
                own = state.probs > THRESHOLD
                answers: dict[str, Tensor] = {}
                for iname, intervener in interveners.items():
                    t1 = time.perf_counter()
                    c = (iname, pname, k)
                    values = None
                    if bool(mask.any()):
                        values = answers[iname] = intervener(batch, state, answered)
                        pred = _replay(model, state, answered, values, encoding, implications if propagate else None)
                    else:
                        pred = base_pred
                    if stats_ok:
                        counter.add(c, answered, values)
                    acc[c].update(pred, y)
                    _tally(edits[c], changed[c], answered, own, values, pred, base_pred)
                    seconds[c] += t_policy + time.perf_counter() - t1
                    if per_example:
                        out = keep[c]
                        for key, v in (("mask", answered), ("pred", pred), ("y", y), ("n_requested", n_req)):
                            out.setdefault(key, []).append(v.cpu())
                        if "idx" in batch:
                            out.setdefault("idx", []).append(batch["idx"].cpu())
                for name, (a, b, j) in swaps.items():  # one concept's answers exchanged between two interveners
                    pred, mixed = base_pred, None
                    if answers:
                        mixed = answers[a].clone()
                        mixed[:, j] = answers[b][:, j]
                        pred = _replay(model, state, answered, mixed, encoding, implications if propagate else None)
                    acc[(name, pname, k)].update(pred, y)
                    _tally(edits[(name, pname, k)], changed[(name, pname, k)], answered, own, mixed, pred, base_pred)
    if total == 0:
        raise ValueError("no examples to evaluate interventions on")
    rows = []
    for c in every:
        iname, pname, k = c
        seconds.setdefault(c, 0.0)
        a = float(acc[c].compute())
        rows.append(
            {
                "intervener": iname,
                "policy": pname,
                "k": k,
                "accuracy": a,
                "gain": None if blackbox_accuracy is None else a - blackbox_accuracy,
                "mean_requested": float(req[(pname, k)].compute()),
                "frac_requesting": float(frac[(pname, k)].compute()),
                "mean_cost": float(cost[(pname, k)].compute()),
                "mean_edits": float(edits[c].compute()),
                "frac_changed": float(changed[c].compute()),
                "n_examples": total,
                "seconds": seconds[c],
            }
        )
    examples = {c: {key: torch.cat(v) for key, v in d.items()} for c, d in keep.items()}
    meta = {"ks": ks, "interveners": list(interveners), "policies": list(policies)}
    if costs is not None:
        meta.update(costs=[float(v) for v in costs.tolist()], budget_unit="cost", per_cost=per_cost)
    if implications is not None:
        rows_broken, n_broken = broken.tolist()
        meta["hierarchy"] = {"implications": len(implications), "propagate": bool(propagate), "violating_rows": rows_broken,
                             "violations": n_broken, "violating_fraction": rows_broken / total}  # fmt: skip
    if swaps:
        meta["exchange"] = {name: {"answers": a, "with": b, "columns": j} for name, (a, b, j) in swaps.items()}
    stats = counter.to_dict(combos) if stats_ok and counter is not None else None
    return ResultsGrid(rows, blackbox_accuracy, meta, examples, stats)


def _tally(edits: MeanMetric, changed: MeanMetric, answered: Tensor, own: Tensor, values: Tensor | None, pred: Tensor, base: Tensor) -> None:
    """Per example: the answers unlike the model's own ``1[p > 0.5]`` (0.4.1's concept edits; every
    answer is a confirmation) and whether the prediction changed."""
    flips = (answered & ((values > THRESHOLD) != own)).sum(1) if values is not None else torch.zeros(len(pred), device=pred.device)
    edits.update(flips.float())
    changed.update((pred != base).float())


def _replay(model: Any, state: Any, answered: Tensor, values: Tensor, encoding: Any, implications: Implications | None) -> Tensor:
    """The label the model predicts with ``values`` set where ``answered`` (along ``implications``)."""
    set_mask, set_values = implications.propagate(answered, values) if implications is not None else (answered, values)
    return model.predict(model.intervene(state, set_mask, encode_values(set_values, encoding))).argmax(1)


def _exchanges(exchange: tuple[str, str, Sequence[int]] | None, interveners: Mapping[str, Any]) -> dict[str, tuple[str, str, list[int]]]:
    """``{row name: (answers of, exchanged with, concept)}`` of an answer exchange (``run_grid``)."""
    if exchange is None:
        return {}
    first, second, cols = exchange
    j = [int(v) for v in cols]
    if not j:
        raise ValueError("exchange: no concept columns to exchange")
    missing = [n for n in (first, second) if n not in interveners]
    if missing or first == second:
        raise ValueError(f"exchange: needs two different interveners of the grid ({list(interveners)}), got {first!r} and {second!r}")
    return {f"{first}+{second}": (first, second, j), f"{second}+{first}": (second, first, j)}


def read_blackbox_metrics(path: str | Path, split: str = "test", dataset: str | None = None) -> float:
    """Task accuracy from a ``metrics.json`` written by ``cbm-train`` (key ``<split>/task_acc``)."""
    path = Path(path)
    try:
        obj = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"blackbox: cannot read {path} ({type(err).__name__})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"blackbox: {path} is not a cbm-train metrics.json (a JSON {type(obj).__name__}, not an object)")
    if dataset is not None and obj.get("dataset") not in (None, dataset):
        raise ValueError(f"blackbox: {path} is a run on dataset {obj.get('dataset')!r}, not {dataset!r}")
    key = f"{split}/task_acc"
    if key not in obj:
        raise ValueError(f"blackbox: {path} has no '{key}' (the black box must be evaluated on the same split)")
    value = obj[key]
    if not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise ValueError(f"blackbox: {path}: '{key}' must be an accuracy in [0, 1], got {value!r}")
    return float(value)


def blackbox_accuracy(source: str | Path, model=None, batches: Iterable[Batch] | None = None, split: str = "test") -> float:
    """Accuracy of the black-box baseline ``f0`` for ``Gain(f, f0) = acc_after - acc_blackbox``.

    ``source``: a ``metrics.json`` (its ``<split>/task_acc``), a ``.ckpt``, or a run directory
    (its checkpoint when it has one, else its ``metrics.json``). A checkpoint is evaluated on
    ``batches`` after checking it was trained on the same dataset and concepts as ``model``.
    """
    from cbm.training.checkpoint import check_compatible, load_model, resolve_checkpoint

    p = Path(source)
    dataset = getattr(getattr(model, "info", None), "dataset", None)
    if p.suffix == ".json":
        return read_blackbox_metrics(p, split, dataset)
    if p.is_dir() and not (p / "checkpoints").is_dir() and (p / "metrics.json").exists():
        return read_blackbox_metrics(p / "metrics.json", split, dataset)
    ckpt = resolve_checkpoint(p)
    if batches is None:
        raise ValueError("blackbox: a checkpoint needs the evaluation batches")
    bb = load_model(ckpt, map_location=model_device(model) if model is not None else "cpu")
    if model is not None:
        check_compatible(bb, asdict(model.info))
    return model_accuracy(bb, batches)
