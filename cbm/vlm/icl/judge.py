"""The LLM judge: nine 1-5 scores per explanation, parsed strictly.

The judge (a separate model) sees the query image, the candidate labels, the model's full output,
the condition's description and the rubric (all templated in ``conf/icl.yaml``), optionally the
support images too, and answers each metric in its own tag, ``<textual_groundedness>4</...>``.
A score counts only if its tag appears once and holds one integer 1..5; otherwise the metric is
recorded missing with the reason. Two options go beyond the seed study: Global Discriminativeness
(the judge sees every class of the dataset, not only the episode's) and Explanation
Reproducibility (feature overlap across repeated runs, :func:`reproducibility`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from cbm.core.tags import clean_reply, labelled_value, read_score, tag_blocks

#: The nine metrics, in table order.
METRICS: tuple[str, ...] = (
    "textual_groundedness",
    "hallucination_free",
    "concept_counting",
    "comprehensibility",
    "conciseness",
    "specificity",
    "local_discriminativeness",
    "instruction_following",
    "logical_coherence",
)
GLOBAL_METRIC = "global_discriminativeness"


@dataclass
class JudgeScores:
    scores: dict[str, int] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # metric -> why it has no score

    @property
    def complete(self) -> bool:
        return not self.errors

    def to_json(self) -> dict:
        return {"scores": self.scores, "errors": self.errors}


def parse_scores(reply: str | None, metrics: Sequence[str] = METRICS) -> JudgeScores:
    """Each metric's integer 1..5 from its own tag (or, without it, a ``Textual groundedness: 4``
    line), read as :func:`~cbm.vlm.tags.read_score` reads it (``4``, ``4.0``, ``4/5``, ``**4**``),
    reasoning blocks ignored; a missing, repeated with different values, unclosed, fractional or
    out-of-range value is an error for that metric (never a guess)."""
    out = JudgeScores()
    text = clean_reply(reply)
    for m in metrics:
        bodies, unclosed, orphans = tag_blocks(text, m)
        if not bodies and not unclosed and not orphans:
            line = labelled_value(text, m.replace("_", " "))
            bodies = [line] if line is not None else []
        values = list(dict.fromkeys(b.strip() for b in bodies))
        if unclosed or orphans:
            out.errors[m] = "unclosed" if unclosed else "orphan"
        elif not values:
            out.errors[m] = "missing"
        elif len(values) > 1:
            out.errors[m] = "repeated"
        else:
            score, why = read_score(values[0])
            if score is None:
                out.errors[m] = why
            else:
                out.scores[m] = score
    return out


def jaccard(a: set[str], b: set[str]) -> float:
    return 1.0 if not a and not b else len(a & b) / len(a | b)


def reproducibility(feature_sets: Sequence[set[str]]) -> float | None:
    """Explanation Reproducibility: mean pairwise Jaccard overlap of the features extracted from
    repeated runs of one trial (``None`` with fewer than two runs)."""
    sets = [set(s) for s in feature_sets]
    if len(sets) < 2:
        return None
    pairs = list(itertools.combinations(sets, 2))
    return sum(jaccard(a, b) for a, b in pairs) / len(pairs)
