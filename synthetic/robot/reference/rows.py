"""The rows of a ``render=reference`` dataset: 0.4.1's catalogue, labels per row and row split,
laid out in the project's ``meta`` columns (:func:`~synthetic.robot.reference.catalog.meta_rows`);
:func:`images` renders such rows, :func:`check_config` says what such a config may ask.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from synthetic.robot.attributes import BODY_NAMES, META_INDEX
from synthetic.robot.reference.catalog import catalogue, meta_rows, row_split


def check_config(cfg: Any, fail: Callable[[str, str], None]) -> None:
    """What a ``RobotConfig`` with ``render=reference`` may ask (``fail(field, message)`` refuses)."""
    for name in ("occlude", "visibility"):
        if getattr(cfg, name):
            fail(f"RobotConfig.{name}", "hides parts of this project's renderer; render=reference draws 0.4.1's robots as they are")
    rows = cfg.catalogue_rows
    if cfg.n_test + cfg.n_train > rows:
        fail("RobotConfig.n_train", f"render=reference splits the {rows:,} catalogue rows (renders_per_robot={cfg.renders_per_robot}): "
             f"n_train + n_test = {cfg.n_train + cfg.n_test:,} do not fit")  # fmt: skip
    left = rows - cfg.n_test - cfg.n_train - cfg.split_sizes["val"]
    if cfg.n_calib > left:
        fail("RobotConfig.n_calib", f"render=reference leaves {left:,} catalogue rows for calibration, got n_calib={cfg.n_calib:,}")
    if cfg.source == "concept_benchmark":
        if cfg.modality != "image":
            fail("RobotConfig.source", f"source=concept_benchmark reads the reference's images: needs modality=image, got {cfg.modality!r}")
        if cfg.label_rule == "custom" or not cfg.label.stochastic:
            fail("RobotConfig.label_rule", "source=concept_benchmark labels with the reference's own rules: label_rule balanced or sparse, stochastic")
        from synthetic.robot.rules import RULE_TRAIN_CONSTRAINTS

        rule = [(c["expr"], float(c["min_fraction"])) for c in RULE_TRAIN_CONSTRAINTS[cfg.label_rule]]
        if [(c.expr, c.min_fraction) for c in cfg.train_constraints] != rule:
            fail("RobotConfig.train_constraints", "source=concept_benchmark shifts the training split as the reference does: set train_constraints=rule")
        from synthetic.robot.reference.oracle import missing_reference

        why = missing_reference()
        if why:
            fail("RobotConfig.source", why)


def labels(p: np.ndarray, seed: int, stochastic: bool) -> np.ndarray:
    """0.4.1's labels, one per row: ``default_rng(seed).random(rows) < Pr(Glorp)`` (or ``Pr > 0.5``)."""
    u = np.random.default_rng(seed).random(len(p))
    return (u < p if stochastic else p > 0.5).astype(np.int64)


def sample(cfg: Any, probability: Callable[[np.ndarray], np.ndarray],
           constraint_mask: Callable[[str, np.ndarray], np.ndarray]) -> dict[str, tuple[np.ndarray, np.ndarray]]:  # fmt: skip
    """``{split: (meta, y)}`` of ``cfg`` (a ``RobotConfig`` with ``render=reference``), rows in
    catalogue order. ``probability(meta)``: Pr(Glorp) per row; ``constraint_mask(expr, meta)``:
    the rows matching a training constraint."""
    body, scheme = catalogue(cfg.renders_per_robot)
    meta = meta_rows(body, scheme, np.arange(len(body)))
    y = labels(probability(meta), cfg.seed, cfg.label.stochastic)
    constraints = [(constraint_mask(c.expr, meta), c.min_fraction) for c in cfg.train_constraints]
    rows = row_split(len(meta), cfg.n_test, cfg.n_train, cfg.val_fraction, cfg.n_calib, constraints, cfg.seed)
    return {name: (meta[r], y[r]) for name, r in rows.items()}


def images(meta: np.ndarray, size: int, blur: float = 0.0) -> np.ndarray:
    """``uint8 [N, size, size, 3]``: reference rows drawn as 0.4.1 draws them (then blurred, if asked)."""
    from synthetic.robot.reference.draw import render

    x = render(meta[:, : len(BODY_NAMES)], meta[:, META_INDEX["palette"]], size)
    if blur > 0:
        from synthetic.robot.renderer import _gaussian_blur

        x = _gaussian_blur(x, blur)
    return x
