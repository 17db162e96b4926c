"""Each zoo model's true reliance, measured with the generator's exact counterfactuals and no
explanation: re-render the test robot with its cue flipped, or with one rule part flipped (the
cue kept), and re-ask the class (read from the answer's first token).

* ``accuracy``: on the training distribution (the cue agrees with the label);
* ``accuracy_cue_flipped``: the same robots with the other cue;
* ``cue_reliance``: share of robots whose answer changes when only the cue changes;
* ``part_reliance``: over every (robot, rule part) whose flip changes the label, the share after
  which the model answers the new label -- how far the answer follows the parts the rule uses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from cbm.vlm.edct.exact import flip, rule_label
from cbm.vlm.zoo import model as zm
from cbm.vlm.zoo.data import CLASS_QUESTION, Robots


def part_flips(robots: Robots, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(robot index, edited rows, new label)`` of every single rule-part flip of the robots ``idx``
    that changes the label."""
    rows, who = [], []
    for c in robots.rcfg.label.weights:
        edited = np.stack([flip(robots.meta[i], c) for i in idx])
        moved = rule_label(edited, robots.rcfg) != robots.y[idx]
        rows.append(edited[moved])
        who.append(idx[moved])
    edited = np.concatenate(rows)
    return np.concatenate(who), edited, rule_label(edited, robots.rcfg)


#: ``says(rows, cue) -> int [N]``: 1 where the class answer for attribute ``rows`` shown with cue bits ``cue`` is Glorp.
Says = Callable[[np.ndarray, np.ndarray], np.ndarray]


def model_says(model: Any, enc: zm.Encoder, robots: Robots) -> Says:
    """A zoo model's :data:`Says`: the exact render, the answer's first-token logits."""
    prompt = enc.prompt(CLASS_QUESTION, robots.plain[0])

    def says(rows: np.ndarray, cue: np.ndarray) -> np.ndarray:
        return (zm.class_margin(model, enc, prompt, enc.pixels(robots.images(rows, cue))) > 0).astype(np.int64)

    return says


def measure(says: Says, robots: Robots) -> dict[str, Any]:
    """The reliance figures of one model on the test robots (module docstring)."""
    idx = robots.test
    y = robots.y[idx]
    plain = says(robots.meta[idx], y)
    flipped = says(robots.meta[idx], 1 - y)
    who, edited, new = part_flips(robots, idx)
    after = says(edited, robots.y[who])
    return {
        "n": int(len(idx)),
        "accuracy": float(np.mean(plain == y)),
        "accuracy_cue_flipped": float(np.mean(flipped == y)),
        "cue_reliance": float(np.mean(flipped != plain)),
        "part_flips": int(len(who)),
        "part_reliance": float(np.mean(after == new)) if len(who) else float("nan"),
    }
