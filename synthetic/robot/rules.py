"""Named label rules of the robot benchmark and the training-split shift that goes with each.

``sparse`` is the rule of the benchmark's first paper (three concepts decide; 87.5% Glorps);
``balanced`` is the default of ``concept-benchmark`` 0.4 (eight attributes, no single one decides,
the intercept makes both classes equally likely; ``elbows`` drives the label but is no concept of
any built-in set). Both are ``Pr(Glorp) = sigmoid(4.2 * score)`` with ``score = sum w_k attr_k + b``.

The 0.4 training split shows only six of the ten foot sub-types, with minimum shares per rule
(:data:`RULE_TRAIN_CONSTRAINTS`, selected by ``train_constraints: rule``); validation, calibration
and test robots show all ten. Foot sub-type indices (``synthetic.robot.attributes.FOOT_SUBTYPES``)
stand for 0.4's names in its order: 0 flat_trapezoid, 2 flat_square, 3 flat_5sided,
6 pointy_rounded, 7 pointy_square, 9 pointy_4sided.
"""

from __future__ import annotations

from typing import Any

#: rule name -> ``LabelConfig`` fields.
LABEL_RULES: dict[str, dict[str, Any]] = {
    "sparse": {"weights": {"mouth_closed": 5.0, "foot_pointy": 8.0, "knees": -5.0}, "bias": 2.0, "scale": 4.2},
    "balanced": {
        "weights": {"mouth_closed": 6.0, "body_round": 6.0, "head_round": 6.0, "antennae": 6.0,
                    "ears_triangle": 6.0, "foot_pointy": 8.0, "knees": -3.0, "elbows": -2.0},
        "bias": -16.5,
        "scale": 4.2,
    },  # fmt: skip
}
#: ``label_rule`` values: a named rule, or ``custom`` (the ``label`` block as written).
LABEL_RULE_NAMES = (*LABEL_RULES, "custom")

_BALANCED_MAJOR, _SPARSE_MAJOR = 0.30, 0.49
#: rule name -> training-split constraints ``[{expr, min_fraction}]`` (0.4's ``sampling_constraints``).
RULE_TRAIN_CONSTRAINTS: dict[str, list[dict[str, Any]]] = {
    "balanced": [
        {"expr": "foot_subtype == 9", "min_fraction": _BALANCED_MAJOR},
        {"expr": "foot_subtype == 3", "min_fraction": _BALANCED_MAJOR},
        *({"expr": f"foot_subtype == {k}", "min_fraction": (1.0 - 2 * _BALANCED_MAJOR) / 4} for k in (7, 6, 2, 0)),
    ],
    "sparse": [
        {"expr": "foot_subtype == 7", "min_fraction": (1.0 - 2 * _SPARSE_MAJOR) / 4},
        {"expr": "foot_subtype == 6", "min_fraction": (1.0 - 2 * _SPARSE_MAJOR) / 4},
        {"expr": "foot_subtype == 9", "min_fraction": _SPARSE_MAJOR},
        {"expr": "foot_subtype == 2", "min_fraction": (1.0 - 2 * _SPARSE_MAJOR) / 4},
        {"expr": "foot_subtype == 0", "min_fraction": (1.0 - 2 * _SPARSE_MAJOR) / 4},
        {"expr": "foot_subtype == 3", "min_fraction": _SPARSE_MAJOR},
    ],
}
