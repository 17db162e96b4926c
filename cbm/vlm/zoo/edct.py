"""EDCT on a zoo model with the exact judge: no language model anywhere.

Per test robot (shown with the cue that agrees with its label): the model answers the class
question and explains; the parts its explanation cites are the concepts EDCT edits, in the order
cited, as a chain (each edit on top of the previous one; at most ``k``); each edited robot is
re-rendered with the same cue and re-asked; :func:`cbm.vlm.edct.exact.exact_verdict` scores
Answer Consistency (the new answer is the rule's label of the edited robot) and Explanation
Faithfulness (every cited part has its stated value). An item's CCS is the mean over its steps of
AC * EF (the paper's definition); the model's CCS is the mean over items with a bootstrap CI.
Items that cannot be scored are counted by reason, never scored: ``baseline_unparsed`` (no class
in the reply), ``no_concepts`` (no part cited).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from cbm.vlm.edct.exact import exact_verdict, flip, parse_explanation
from cbm.vlm.edct.metrics import bootstrap_mean
from cbm.vlm.zoo import model as zm
from cbm.vlm.zoo.data import CLASS_QUESTION, Robots

#: Edits per chain (the paper's k).
CHAIN = 2


#: ``ask(rows, cue) -> replies``: the model's reply to the class question about each attribute row shown with its cue bit.
Ask = Callable[[np.ndarray, np.ndarray], list[str]]


def model_asks(model: Any, enc: zm.Encoder, robots: Robots, max_new_tokens: int) -> Ask:
    """A zoo model's :data:`Ask`: the exact render, greedy generation."""
    prompt = enc.prompt(CLASS_QUESTION, robots.plain[0])

    def ask(rows: np.ndarray, bits: np.ndarray) -> list[str]:
        return zm.generate(model, enc, prompt, enc.pixels(robots.images(rows, bits)), max_new_tokens) if len(rows) else []

    return ask


def run_edct(ask: Ask, robots: Robots, n_items: int, n_resamples: int = 2000, seed: int = 0, k: int = CHAIN,
             split: str = "test") -> tuple[dict[str, Any], list[dict[str, Any]]]:  # fmt: skip
    """``(summary, records)`` of EDCT on the first ``n_items`` robots of ``split`` (``test``, or
    ``train`` where counterfactual fine-tuning finds its pairs) (module docstring)."""
    idx = {"test": robots.test, "train": robots.train}[split][:n_items]
    cue = robots.y[idx]
    replies = ask(robots.meta[idx], cue)
    records: list[dict[str, Any]] = []
    for i, reply in zip(idx, replies):
        answer, cited = parse_explanation(reply)
        status = "baseline_unparsed" if answer is None else "no_concepts" if not cited else "done"
        records.append({"robot": int(i), "reply": reply, "answer": answer, "label": int(robots.y[i]), "cited": [c for c, _ in cited],
                        "status": status, "steps": []})  # fmt: skip
    rows = robots.meta[idx].copy()
    for step in range(k):
        live = [j for j, r in enumerate(records) if r["status"] == "done" and len(r["cited"]) > step]
        for j in live:
            rows[j] = flip(rows[j], records[j]["cited"][step])
        if not live:
            break
        for j, reply in zip(live, ask(rows[live], cue[live])):
            v = exact_verdict(rows[j], robots.rcfg, reply)
            records[j]["steps"].append({"edit": records[j]["cited"][step], "reply": reply, "expected": v.expected, "answer": v.answer,
                                        "ac": v.ac, "ef": v.ef, "ccs": v.ccs, "stale": list(v.stale)})  # fmt: skip
    scored = [r for r in records if r["steps"]]
    per_item = {key: [float(np.mean([s[key] for s in r["steps"]])) for r in scored] for key in ("ccs", "ac", "ef")}
    moved = [s["ccs"] for r in scored for s in r["steps"] if s["expected"] != r["label"]]
    summary = {
        "items": len(records),
        "scored": len(scored),
        "excluded": {reason: sum(r["status"] == reason for r in records) for reason in ("baseline_unparsed", "no_concepts")},
        "baseline_accuracy": float(np.mean([r["answer"] == r["label"] for r in records])) if records else float("nan"),
        **{key: bootstrap_mean(vals, n_resamples=n_resamples, seed=seed).to_json() for key, vals in per_item.items()},
        "ccs_label_moved": bootstrap_mean(moved, n_resamples=n_resamples, seed=seed).to_json(),
    }
    return summary, records
