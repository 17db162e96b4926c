"""Does a model use its concepts? Diagnostics of one trained concept model on one split.

Every number is an accuracy (a fraction) over the split's rows, measured by setting concepts through
the model's own ``intervene`` and reading ``predict``: the same path the intervention engine takes.

- **leakage**: accuracy with every concept set to its training marginal ``P(c_j = 1)`` (the concepts
  then say nothing about the row) against the best constant guess (``majority``); what is above it
  comes through a side channel (CEM's embeddings, a hybrid's residual, a soft readout's confidence).
- **shuffled**: every concept set to the true concepts of another row (a fixed permutation): how
  often the prediction follows the donor row's label (``follows_concepts``) and, on the rows whose
  two labels differ, how often it keeps its own row's label (``follows_own``). A model that reads
  only its concepts predicts for such a row what it predicts for the donor with every concept
  revealed, so (two classes) keeps the own label exactly where it errs on the donor
  (``oracle_error``, over the same rows); more than that is read from the image past the concepts.
- **sensitivity** (per concept): accuracy with that one concept set to its true value vs its flipped
  value, the others as predicted, and the share of rows whose prediction the flip changes.
- **ceiling**: the best accuracy any rule reading the true concepts reaches: the majority training
  label of each true concept vector, scored on the split (a vector never seen in training: the
  training majority class). Concepts that leave the label undetermined keep it below 1.
- **unseen**: rows whose true concept vector, or whose value of a data attribute (a category of at
  most :data:`MAX_LEVELS` values: the robots' foot and hand sub-types), never occurs in training,
  against the rest, before and after revealing every concept.
- **hierarchy**: predicted concepts that break the implications between concepts
  (:mod:`cbm.interventions.hierarchy`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from cbm.interventions.hierarchy import Implications
from cbm.interventions.interveners.base import THRESHOLD, true_concepts
from cbm.models.devices import model_device, to_device
from cbm.models.state import ConceptState

#: Seed of the permutation that hands each row another row's concepts (fixed: a rerun reads the same).
SHUFFLE_SEED = 0
#: Rows per ``predict`` call when the split is re-read under a setting of its concepts.
CHUNK = 1024
#: A data attribute is a category (checked for values training never saw) when training holds at
#: most this many distinct values of it; ids and seeds are not.
MAX_LEVELS = 32


@dataclass
class Encoded:
    """A split encoded once: the model's concept state and each row's truth."""

    state: ConceptState
    truth: Tensor  # [N, m] true concepts (the oracle's answers)
    y: Tensor  # [N]
    meta: Tensor | None  # [N, a] data attributes (int), when the data has them

    @property
    def n(self) -> int:
        return len(self.y)


@torch.no_grad()
def encode(model: Any, batches: Iterable[Mapping[str, Tensor]]) -> Encoded:
    """Encode every batch once (the state of all rows stays in memory: ``[N, m]`` plus extras)."""
    device = model_device(model)
    states, truth, ys, metas = [], [], [], []
    for batch in batches:
        batch = to_device(dict(batch), device)
        states.append(model.encode(batch["x"]))
        truth.append(true_concepts(batch).float())
        ys.append(batch["y"])
        if "meta" in batch:
            metas.append(batch["meta"])
    if not states:
        raise ValueError("diagnose: the split has no rows")
    meta = torch.cat(metas) if len(metas) == len(states) else None
    return Encoded(ConceptState.cat(states), torch.cat(truth), torch.cat(ys), meta)


@torch.no_grad()
def predictions(model: Any, enc: Encoded, mask: Tensor | None = None, values: Tensor | None = None) -> Tensor:
    """``[N]`` predicted classes with the concepts ``mask`` set to ``values`` (none: as predicted)."""
    out = []
    for start in range(0, enc.n, CHUNK):
        part = slice(start, start + CHUNK)
        state = enc.state.index(part)
        if mask is not None and values is not None:
            state = model.intervene(state, mask[part], values[part].to(state.probs.dtype))
        out.append(model.predict(state).argmax(1))
    return torch.cat(out)


def _share(hit: Tensor) -> float:
    """The share of true entries, exact (a count over a count, not a float32 mean)."""
    return int(hit.sum()) / hit.numel()


def _acc(pred: Tensor, y: Tensor, rows: Tensor | None = None) -> float | None:
    if rows is not None:
        if not bool(rows.any()):
            return None
        pred, y = pred[rows], y[rows]
    return _share(pred == y)


def leakage(model: Any, enc: Encoded, marginals: Tensor, base: Tensor, oracle: Tensor) -> dict[str, Any]:
    """Accuracy with the concepts at their training marginals, against the best constant guess,
    and the shuffled-concepts test (module doc). ``base`` / ``oracle``: predictions at k = 0 / all
    concepts revealed."""
    everything = torch.ones_like(enc.truth, dtype=torch.bool)
    marginal_pred = predictions(model, enc, everything, marginals.to(enc.truth)[None].expand_as(enc.truth))
    counts = torch.bincount(enc.y, minlength=int(enc.y.max()) + 1)
    majority = float(counts.max()) / enc.n
    g = torch.Generator().manual_seed(SHUFFLE_SEED)
    perm = torch.randperm(enc.n, generator=g).to(enc.y.device)
    shuffled = predictions(model, enc, everything, enc.truth[perm])
    differ = enc.y[perm] != enc.y
    marginal = _acc(marginal_pred, enc.y)
    return {
        "accuracy": _acc(base, enc.y),
        "oracle": _acc(oracle, enc.y),
        "marginal": marginal,
        "majority": majority,
        "leakage": marginal - majority,  # type: ignore[operator]
        "follows_concepts": _acc(shuffled, enc.y[perm]),
        "follows_own": _acc(shuffled, enc.y, differ),
        # the donor rows' error with all their true concepts revealed: what a pure reader of its
        # concepts predicts for the shuffled row (so keeps the own label exactly that often, 2 classes)
        "oracle_error": None if not bool(differ.any()) else _share(oracle[perm][differ] != enc.y[perm][differ]),
        "shuffled_rows": int(differ.sum()),
    }


def sensitivity(model: Any, enc: Encoded, names: Sequence[str]) -> list[dict[str, Any]]:
    """Per concept: accuracy with it set to its true vs its flipped value (the others as predicted),
    the share of rows whose prediction the flip changes, and the detector's accuracy on it."""
    rows = []
    hard = enc.state.probs > THRESHOLD
    truth = enc.truth > THRESHOLD
    for j, name in enumerate(names):
        mask = torch.zeros_like(enc.truth, dtype=torch.bool)
        mask[:, j] = True
        right = predictions(model, enc, mask, enc.truth)
        wrong = predictions(model, enc, mask, 1.0 - enc.truth)
        rows.append({
            "concept": name,
            "detector": _share(hard[:, j] == truth[:, j]),
            "true": _acc(right, enc.y),
            "flipped": _acc(wrong, enc.y),
            "changed": _share(right != wrong),
        })  # fmt: skip
    return rows


def _codes(rows: Tensor, *more: Tensor) -> list[Tensor]:
    """An integer code per distinct binary concept vector, shared across ``rows`` and ``more``."""
    parts = [rows, *more]
    _, inverse = torch.unique(torch.cat([p > THRESHOLD for p in parts]).to(torch.uint8), dim=0, return_inverse=True)
    return list(inverse.split([len(p) for p in parts]))


def ceiling(train_truth: Tensor, train_y: Tensor, truth: Tensor, y: Tensor) -> dict[str, Any]:
    """The concept-lookup ceiling (module doc) and the share of rows whose vector training never saw."""
    train_truth, train_y = train_truth.to(truth.device), train_y.to(y.device)
    k_train, k = _codes(train_truth, truth)
    n_codes = int(max(k_train.max(), k.max())) + 1
    n_classes = int(max(train_y.max(), y.max())) + 1
    table = torch.bincount(k_train * n_classes + train_y, minlength=n_codes * n_classes).view(n_codes, n_classes)
    fallback = int(torch.bincount(train_y, minlength=n_classes).argmax())
    seen = table.sum(1) > 0
    rule = torch.where(seen, table.argmax(1), torch.full_like(seen, fallback, dtype=torch.long))
    return {"concepts": _acc(rule[k], y), "unseen_vectors": _share(~seen[k])}


def unseen(enc: Encoded, base: Tensor, oracle: Tensor, train_truth: Tensor, train_meta: Tensor | None,
           meta_names: Sequence[str]) -> list[dict[str, Any]]:  # fmt: skip
    """Rows whose concept vector, or whose value of a data attribute, training never saw (module doc)."""
    k_train, k = _codes(train_truth.to(enc.truth.device), enc.truth)
    groups = [("concept vector", ~torch.isin(k, k_train), None)]
    if enc.meta is not None and train_meta is not None:
        train_meta = train_meta.to(enc.meta.device)
        for a, name in enumerate(meta_names):
            if len(torch.unique(train_meta[:, a])) > MAX_LEVELS:
                continue
            new = ~torch.isin(enc.meta[:, a], train_meta[:, a])
            if bool(new.any()):
                groups.append((name, new, sorted({int(v) for v in enc.meta[new, a].tolist()})))
    out = []
    for name, rows, values in groups:
        entry = {"kind": name, "rows": int(rows.sum()), "accuracy": _acc(base, enc.y, rows), "oracle": _acc(oracle, enc.y, rows),
                 "seen_accuracy": _acc(base, enc.y, ~rows), "seen_oracle": _acc(oracle, enc.y, ~rows)}  # fmt: skip
        if values is not None:
            entry["values"] = values
        out.append(entry)
    return out


def diagnose(model: Any, batches: Iterable[Mapping[str, Tensor]], train: Mapping[str, Tensor], names: Sequence[str],
             implications: Implications | None = None, meta_names: Sequence[str] = ()) -> dict[str, Any]:  # fmt: skip
    """Every diagnostic of the module doc for ``model`` on ``batches``; ``train``: the training
    split's tensors (``c`` or ``c_clean``, ``y``, optionally ``meta``) for the marginals, the
    ceiling and what training saw."""
    if not getattr(model, "has_concepts", True):
        raise ValueError("diagnose: a black-box model has no concepts to diagnose")
    enc = encode(model, batches)
    if enc.truth.shape[1] != len(names):
        raise ValueError(f"diagnose: the data has {enc.truth.shape[1]} concepts but the model names {len(names)}")
    train_truth = true_concepts(dict(train)).float()
    everything = torch.ones_like(enc.truth, dtype=torch.bool)
    base = predictions(model, enc)
    oracle = predictions(model, enc, everything, enc.truth)
    out: dict[str, Any] = {"rows": enc.n, "concepts": len(names)}
    out["leakage"] = leakage(model, enc, train_truth.mean(0), base, oracle)
    out["ceiling"] = ceiling(train_truth, train["y"], enc.truth, enc.y)
    out["unseen"] = unseen(enc, base, oracle, train_truth, train.get("meta"), meta_names)
    if implications is not None and len(implications):
        v = implications.violations(enc.state.probs)
        out["hierarchy"] = {"implications": len(implications), "violating_rows": int((v > 0).sum()),
                            "violating_fraction": _share(v > 0), "violations": int(v.sum())}  # fmt: skip
    out["sensitivity"] = sensitivity(model, enc, names)
    return out
