"""``concept-benchmark`` 0.4.1's robot catalogue and row split (``data.render=reference``).

The reference enumerates every robot once per render (``synthetic/robot/catalog.py``: a pandas
``MultiIndex.from_product`` over its concepts, repeated ``renders`` times; 7,680 robots x 4 =
30,720 rows), colours row ``i`` with scheme ``i % 71``, draws each row's label on its own
(``numpy.random.default_rng(seed).random(rows) < Pr(Glorp)``), and splits *rows*
(``ConceptDataset.sample`` with ``sampling_constraints``, ``utils._create_skewed_training_set``):

1. ``rng = default_rng(seed)``; shuffle all row indices; the first ``n_test`` are the test split;
2. the training split takes, constraint by constraint, ``int(n_train * min_fraction)`` rows among
   the rest that match it and are not taken yet (in index order, shuffled), then fills up with a
   shuffled draw of the rest;
3. validation: ``int(val_fraction * (rows - n_test - n_train))`` of the rows left, shuffled.

Every split is in row order (the reference filters by a mask). With no constraint, validation is
the first rows of the shuffled rest and training the next ``n_train``. This module reproduces
those steps call for call, so the same seed gives the reference's split. A calibration split (not
in the reference) takes ``n_calib`` of the rows no other split uses, from its own random stream.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from synthetic.robot.attributes import ARM_ANGLES, BODY_CARDINALITY, BODY_NAMES, META_INDEX, META_NAMES
from synthetic.robot.reference.draw import N_SCHEMES

#: Robots in the reference's catalogue (every combination of its nine features once).
N_ROBOTS = int(np.prod([BODY_CARDINALITY[name] for name in BODY_NAMES]))
#: Attributes coded the other way round from the reference's value order (its mouth is closed, open).
_FLIPPED = ("mouth_closed",)


def catalogue(renders: int) -> tuple[np.ndarray, np.ndarray]:
    """``(body [rows, 9], scheme [rows])``: the reference's catalogue rows in its order (the last
    feature, the foot sub-type, varies fastest), repeated ``renders`` times, and their colour schemes."""
    cards = [BODY_CARDINALITY[name] for name in BODY_NAMES]
    grid = np.stack(np.meshgrid(*[np.arange(c) for c in cards], indexing="ij"), axis=-1).reshape(-1, len(cards))
    for name in _FLIPPED:
        j = BODY_NAMES.index(name)
        grid[:, j] = cards[j] - 1 - grid[:, j]
    body = np.tile(grid, (renders, 1)).astype(np.int64)
    return body, np.arange(len(body), dtype=np.int64) % N_SCHEMES


#: The ``arm_left`` / ``arm_right`` bin of 0.4.1's horizontal arms.
HORIZONTAL = ARM_ANGLES.index(0.0)


def meta_rows(body: np.ndarray, scheme: np.ndarray, row: np.ndarray) -> np.ndarray:
    """``int64 [N, len(META_NAMES)]`` of reference rows: the nine body attributes, no shift, both
    arms horizontal (the ``arm_*`` bin of 0 degrees), ``palette`` = the row's colour scheme (0..70,
    not one of the project's palettes), no tint, ``robot_id`` = the catalogue row (the robot is
    ``robot_id % 7680``)."""
    meta = np.zeros((len(body), len(META_NAMES)), dtype=np.int64)
    meta[:, : len(BODY_NAMES)] = body
    meta[:, META_INDEX["arm_left"]] = meta[:, META_INDEX["arm_right"]] = HORIZONTAL
    meta[:, META_INDEX["palette"]] = scheme
    meta[:, META_INDEX["robot_id"]] = row
    return meta


def val_rows(rows: int, n_test: int, n_train: int, val_fraction: float) -> int:
    """The reference's validation size: ``int((rows - n_test - n_train) * val_fraction)``."""
    return int((rows - n_test - n_train) * val_fraction)


def _skewed_train(masks: Sequence[tuple[np.ndarray, float]], available: np.ndarray, size: int,
                  rng: np.random.Generator) -> np.ndarray:  # fmt: skip
    """0.4.1's ``_create_skewed_training_set``, call for call (lists shuffled as it shuffles them)."""
    available_set = set(available.tolist())
    train: list[int] = []
    used: set[int] = set()
    for mask, share in masks:
        matching = [i for i in np.flatnonzero(mask).tolist() if i in available_set and i not in used]
        needed = int(size * share)
        rng.shuffle(matching)
        take = matching[: min(needed, len(matching))]
        train.extend(take)
        used.update(take)
    slots = size - len(train)
    if slots > 0:
        unused = [i for i in available.tolist() if i not in used]
        rng.shuffle(unused)
        train.extend(unused[:slots])
    return np.asarray(train, dtype=np.int64)


def row_split(rows: int, n_test: int, n_train: int, val_fraction: float, n_calib: int,
              constraints: Sequence[tuple[np.ndarray, float]], seed: int) -> dict[str, np.ndarray]:  # fmt: skip
    """Sorted row indices of ``train``, ``val``, ``calib`` and ``test``; ``constraints`` are
    ``(mask over rows, min_fraction)`` pairs in order."""
    n_val = val_rows(rows, n_test, n_train, val_fraction)
    rng = np.random.default_rng(seed)
    order = np.arange(rows)
    rng.shuffle(order)
    test, rest = order[:n_test], order[n_test:]
    if constraints:
        train = _skewed_train(constraints, rest, n_train, rng)
        used = set(train.tolist())
        pool = np.array([i for i in rest.tolist() if i not in used], dtype=np.int64)
        rng.shuffle(pool)
        val = pool[:n_val]
    else:
        val, train = rest[:n_val], rest[n_val:][:n_train]
    taken = np.zeros(rows, dtype=bool)
    for part in (test, train, val):
        taken[part] = True
    free = np.flatnonzero(~taken)
    calib = np.random.default_rng([seed, 11]).permutation(free)[:n_calib]
    return {name: np.sort(part) for name, part in (("train", train), ("val", val), ("calib", calib), ("test", test))}
