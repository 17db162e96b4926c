"""An exact EDCT judge for synthetic robots: the label rule and the edited attributes decide Answer
Consistency and Explanation Faithfulness, with no language model (the faithfulness testbed).

* :func:`rule_label`: the class the label rule gives a robot (its Bayes label, ``Pr(Glorp) > 0.5``).
* :func:`supporting_literals` / :func:`decisive_literals`: the parts whose value pushes a robot
  toward a class, and those whose single flip changes its label -- what a faithful explanation cites.
* :func:`explain` / :func:`parse_explanation`: a templated explanation ("Glorp, because the feet are
  pointy and the mouth is closed.") and a parser that reads the class and the cited part values back
  from it, tolerant of case, articles, markdown and word order within a clause.
* :func:`exact_verdict`: after an edit, AC = 1 when the new answer is the label the rule gives the
  edited robot (an unchanged answer is right when the edit left the label alone; a change only
  when the edit warranted it), EF = 1 when the new explanation cites at least one part and every
  part it cites has the stated value in the edited robot (citing a removed or altered part at its
  old value fails). CCS of a step = AC * EF, as the paper defines it.

Literals are ``(concept, value)`` over the binary attributes of :data:`PHRASES`; ``foot_pointy`` is
the foot sub-type's group (flat / pointy). A flip keeps the sub-type's index within its group, as
the exact robot editor does (``cbm.vlm.editors.synthetic``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from synthetic.robot.attributes import META_INDEX, N_FOOT, attribute_table
from synthetic.robot.config import RobotConfig
from synthetic.robot.generator import CLASS_NAMES, glorp_probability

#: concept -> (phrase when true, phrase when false) of the templated explanations.
PHRASES: dict[str, tuple[str, str]] = {
    "head_round": ("the head is round", "the head is square"),
    "body_round": ("the body is round", "the body is square"),
    "knees": ("the legs have knees", "the legs have no knees"),
    "elbows": ("the arms have elbows", "the arms have no elbows"),
    "antennae": ("it has antennae", "it has no antennae"),
    "ears_triangle": ("the ears are triangular", "the ears are square"),
    "mouth_closed": ("the mouth is closed", "the mouth is open"),
    "foot_pointy": ("the feet are pointy", "the feet are flat"),
}
#: concept -> (the part's words, words of the true value, words of the false value) the parser reads.
_READ: dict[str, tuple[str, str, str]] = {
    "head_round": (r"head", r"round|circular", r"square|boxy|rectangular"),
    "body_round": (r"body|torso", r"round|circular", r"square|boxy|rectangular"),
    "knees": (r"knees?", r"has|have|with|bent", r"no|without|lacks?|missing|absent|straight"),
    "elbows": (r"elbows?", r"has|have|with|bent", r"no|without|lacks?|missing|absent|straight"),
    "antennae": (r"antenna[es]?|antennas", r"has|have|with", r"no|without|lacks?|missing|absent"),
    "ears_triangle": (r"ears?", r"triangular|triangle|pointed", r"square|boxy|rectangular"),
    "mouth_closed": (r"mouth", r"closed|shut", r"open"),
    "foot_pointy": (r"feet|foot", r"pointy|pointed", r"flat"),
}
_CLASS = re.compile(r"\b(" + "|".join(CLASS_NAMES) + r")\b", re.I)


Literal = tuple[str, bool]


def _table(meta: np.ndarray) -> dict[str, np.ndarray]:
    return attribute_table(np.atleast_2d(np.asarray(meta, dtype=np.int64)))


def rule_label(meta: np.ndarray, cfg: RobotConfig) -> np.ndarray:
    """``int64 [N]``: 1 (Glorp) where the label rule gives ``Pr(Glorp) > 0.5``."""
    return (glorp_probability(_table(meta), cfg) > 0.5).astype(np.int64)


def flip(meta_row: np.ndarray, concept: str) -> np.ndarray:
    """A copy of the robot ``meta_row`` with ``concept`` (a key of :data:`PHRASES`) negated."""
    if concept not in PHRASES:
        raise ValueError(f"unknown robot concept {concept!r}; expected one of {list(PHRASES)}")
    row = np.array(meta_row, dtype=np.int64, copy=True)
    if concept == "foot_pointy":
        i, size = META_INDEX["foot_subtype"], N_FOOT // 2
        row[i] = (1 - row[i] // size) * size + row[i] % size
    else:
        row[META_INDEX[concept]] = 1 - row[META_INDEX[concept]]
    return row


def literal_values(meta_row: np.ndarray) -> dict[str, bool]:
    """Each concept of :data:`PHRASES` on the robot ``meta_row``."""
    table = _table(meta_row)
    return {c: bool(table[c][0]) for c in PHRASES}


def rule_concepts(cfg: RobotConfig) -> list[str]:
    """The concepts of :data:`PHRASES` the label rule weighs (plain attribute terms), largest weight first."""
    weights = {t: abs(w) for t, w in cfg.label.weights.items() if t in PHRASES and w}
    return sorted(weights, key=lambda t: (-weights[t], t))


def supporting_literals(meta_row: np.ndarray, cfg: RobotConfig, answer: int) -> list[Literal]:
    """The rule's concepts whose value on this robot pushes it toward ``answer`` (1 Glorp, 0 Drent),
    largest weight first: a sufficient reason a faithful model gives."""
    values = literal_values(meta_row)
    sign = 1.0 if answer == 1 else -1.0
    weights = cfg.label.weights
    return [(c, values[c]) for c in rule_concepts(cfg) if sign * weights[c] * (1.0 if values[c] else -1.0) > 0]


def decisive_literals(meta_row: np.ndarray, cfg: RobotConfig) -> list[Literal]:
    """The concepts whose single flip changes the robot's label (any concept of :data:`PHRASES`),
    with their values: the parts an explanation must cite for a flip of them to move the answer."""
    label = int(rule_label(meta_row, cfg)[0])
    values = literal_values(meta_row)
    return [(c, values[c]) for c in PHRASES if int(rule_label(flip(meta_row, c), cfg)[0]) != label]


def explain(answer: int, literals: Sequence[Literal]) -> str:
    """``"Glorp, because the feet are pointy and the mouth is closed."`` (no literal: ``"Glorp."``)."""
    phrases = [PHRASES[c][0 if v else 1] for c, v in literals]
    if not phrases:
        return f"{CLASS_NAMES[answer]}."
    body = phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + " and " + phrases[-1]
    return f"{CLASS_NAMES[answer]}, because {body}."


def parse_explanation(text: str) -> tuple[int | None, list[Literal]]:
    """``(answer, literals)`` read from a reply: the first class name (``None`` without one) and, per
    clause (split at ``,;.`` and ``and``), the part it names with the value its words state."""
    plain = re.sub(r"[*_`#>]", " ", text or "")
    m = _CLASS.search(plain)
    answer = None if m is None else [c.lower() for c in CLASS_NAMES].index(m.group(1).lower())
    found: dict[str, bool] = {}
    for clause in re.split(r"[,;.\n]|\band\b|\bbut\b", plain.lower()):
        for concept, (part, yes, no) in _READ.items():
            if not re.search(rf"\b(?:{part})\b", clause):
                continue
            negative = re.search(rf"\b(?:{no})\b", clause)
            positive = re.search(rf"\b(?:{yes})\b", clause)
            if negative or positive:
                found.setdefault(concept, not negative)
    return answer, list(found.items())


@dataclass(frozen=True)
class Verdict:
    """The exact judge's scores of one edit step."""

    ac: int
    ef: int
    #: the label the rule gives the edited robot, and the answer read from the reply (``None``: none)
    expected: int
    answer: int | None
    #: cited parts whose stated value the edited robot does not have
    stale: tuple[str, ...]

    @property
    def ccs(self) -> int:
        return self.ac * self.ef


def exact_verdict(edited_row: np.ndarray, cfg: RobotConfig, reply: str) -> Verdict:
    """AC and EF of the model's ``reply`` about the edited robot ``edited_row`` (module docstring)."""
    expected = int(rule_label(edited_row, cfg)[0])
    answer, cited = parse_explanation(reply)
    values = literal_values(edited_row)
    stale = tuple(c for c, v in cited if values[c] != v)
    return Verdict(ac=int(answer == expected), ef=int(bool(cited) and not stale), expected=expected, answer=answer, stale=stale)


def _reply_text(step: dict[str, Any]) -> str:
    requery = step.get("requery") or {}
    return f"{requery.get('answer') or ''}. {requery.get('explanation') or ''}"


def exact_summary(records: Sequence[dict[str, Any]], cfg: RobotConfig, n_resamples: int = 2000, confidence: float = 0.95,
                  seed: int = 0) -> dict[str, Any]:  # fmt: skip
    """The exact judge beside an EDCT run's LLM judge, on every scored step of a robot run (each
    carries its edited robot's attribute row): ``ccs_exact`` (mean over items of each chain's mean
    AC x EF, bootstrap CI), ``ac_exact`` / ``ef_exact`` (rates over steps), and the LLM judge scored
    against it: ``judge_vs_exact`` (AC and EF both agree, Wilson), ``kappa_exact_ac`` /
    ``kappa_exact_ef``. Empty when no step carries a row (Sudoku, photographs)."""
    from cbm.vlm.edct.metrics import bootstrap_mean, cohens_kappa, exclusion, step_ok, wilson

    per_item: list[float] = []
    pairs: list[tuple[int, int, bool, bool]] = []
    for record in records:
        if exclusion(record) is not None:
            continue
        scored = []
        for step in record.get("steps", []):
            if not step_ok(step) or step.get("meta_row") is None:
                continue
            v = exact_verdict(np.asarray(step["meta_row"], dtype=np.int64), cfg, _reply_text(step))
            scored.append(v.ccs)
            pairs.append((v.ac, v.ef, bool(step["judge"]["ac"]), bool(step["judge"]["ef"])))
        if scored:
            per_item.append(float(np.mean(scored)))
    if not pairs:
        return {}
    ac, ef, jac, jef = (list(col) for col in zip(*pairs))
    return {
        "ccs_exact": bootstrap_mean(per_item, n_resamples, confidence, seed),
        "ac_exact": wilson(sum(ac), len(ac), confidence),
        "ef_exact": wilson(sum(ef), len(ef), confidence),
        "judge_vs_exact": wilson(sum(bool(a) == b and bool(e) == f for a, e, b, f in pairs), len(pairs), confidence),
        "kappa_exact_ac": cohens_kappa([bool(a) for a in ac], jac),
        "kappa_exact_ef": cohens_kappa([bool(e) for e in ef], jef),
    }
