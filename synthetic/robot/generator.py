"""Glorp/Drent robot generator: ``generate(cfg)`` (pure) and ``load(cfg, cache_dir)`` (cached).

Sampling, per split and with independent random streams (so changing the test
size leaves the training robots unchanged, and changing the modality or image
size leaves every attribute and label unchanged):

1. body attributes uniform (sub-types uniform), see :mod:`synthetic.robot.attributes`;
2. label ``y ~ Bernoulli(sigmoid(scale * (sum_k w_k attr_k + bias)))``
   (default ``4.2 * (5 [mouth closed] + 8 [foot pointy] - 5 [knees] + 2)``; 1 = Glorp);
3. every robot repeated ``renders_per_robot`` times with independent nuisance
   (translation, arm angles, leg spread, palette, colour jitter);
4. ``c_true`` = the ``true`` concept set, ``c`` = the chosen set with per-concept
   annotation flips (drawn per row);
5. ``x`` by modality: rendered image, tabular attribute vector or token ids.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from synthetic.base import SPLITS, SyntheticData, split_codes
from synthetic.cache import cached_arrays, cached_without_images, config_hash
from synthetic.chunked import render_to_npy
from synthetic.lazy import RenderedImages
from synthetic.robot import text as text_mod
from synthetic.robot.attributes import (
    ARM_ANGLES,
    BODY_CARDINALITY,
    BODY_NAMES,
    FOOT_SUBTYPES,
    HAND_SUBTYPES,
    META_NAMES,
    N_LEG_SPREADS,
    PALETTE_NAMES,
    PALETTES,
    TABULAR_NAMES,
    attribute_table,
    body_table,
    tabular_features,
)
from synthetic.robot.concept_source import apply_concept_source
from synthetic.robot.concepts import evaluate, load_concept_set
from synthetic.robot.config import RobotConfig, pattern_share
from synthetic.robot.cue import cue_bits, draw_cue
from synthetic.robot.renderer import render

#: Bump when the output for a given config changes (part of the cache key).
ROBOT_VERSION = 2  # 2: extra["c_clean"]
#: ``y = 1`` is Glorp, ``y = 0`` Drent.
CLASS_NAMES = ["Drent", "Glorp"]
_STREAMS = {"body": 1, "label": 2, "nuisance": 3, "noise": 4, "text": 5, "pixels": 6, "asym": 7, "missing": 8, "label_noise": 9, "cue": 10}
_DEFAULT_ARM = len(ARM_ANGLES) // 2  # horizontal
_DEFAULT_LEG = 1
_DEFAULT_PALETTE = PALETTE_NAMES.index("blue")


def _rng(cfg: RobotConfig, stream: str, split: int) -> np.random.Generator:
    return np.random.default_rng([cfg.seed, _STREAMS[stream], split])


def glorp_probability(table: dict[str, np.ndarray], cfg: RobotConfig) -> np.ndarray:
    """``Pr(y = Glorp | attributes)`` under the configured label rule."""
    n = len(next(iter(table.values())))
    z = np.full(n, cfg.label.bias, dtype=np.float64)
    for term, w in cfg.label.weights.items():
        z += w * (table[term] if term in table else evaluate(term, table).astype(np.float64))
    return 1.0 / (1.0 + np.exp(-cfg.label.scale * z))


def _draw_body(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.stack([rng.integers(0, BODY_CARDINALITY[name], n) for name in BODY_NAMES], axis=1)


def _constrained_body(cfg: RobotConfig, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` robots' body attributes under ``cfg.train_constraints`` (concept-benchmark 0.4's skewed
    training sample): in order, each constraint takes ``int(n * min_fraction)`` robots among those of
    a pool (drawn as usual) that match it and are not taken yet; the rest of the split is drawn as
    usual; the result is shuffled. The pool grows in rounds until every share is met."""
    needs = [int(n * c.min_fraction) for c in cfg.train_constraints]
    rest = _draw_body(rng, n - sum(needs))
    share = min((pattern_share(c.expr) for c, k in zip(cfg.train_constraints, needs) if k), default=1.0)
    size = int(max(needs, default=0) / share * 1.25) + 64
    pool = np.zeros((0, len(BODY_NAMES)), dtype=np.int64)
    while True:
        pool = np.concatenate([pool, _draw_body(rng, size)])
        table = body_table(pool)
        free = np.ones(len(pool), dtype=bool)
        taken = []
        for c, k in zip(cfg.train_constraints, needs):
            rows = np.flatnonzero(free & evaluate(c.expr, table).astype(bool))[:k]
            if len(rows) < k:
                break
            free[rows] = False
            taken.append(rows)
        else:
            body = np.concatenate([pool[np.concatenate(taken)], rest])
            return body[rng.permutation(n)]
        size = len(pool)  # not enough matches yet: double the pool (the same stream: deterministic)


def _observed(cfg: RobotConfig, c: np.ndarray, split: int) -> np.ndarray:
    """``uint8`` mask of the annotated concepts: 0 where the training split's annotation is missing."""
    miss = cfg.concept_missing
    if split != SPLITS["train"]:
        return np.ones(c.shape, dtype=np.uint8)
    prob = np.full(c.shape, miss.p) if miss.mechanism == "mcar" else np.where(c > 0.5, miss.present_prob, miss.absent_prob)
    return (_rng(cfg, "missing", split).random(c.shape) >= prob).astype(np.uint8)


def _label_noise(cfg: RobotConfig, y: np.ndarray, split: int) -> np.ndarray:
    """``y`` with each label flipped with probability ``label_noise.p`` in the named splits."""
    noise = cfg.label_noise
    if noise.p > 0 and split in {SPLITS[name] for name in noise.splits}:
        y = y ^ (_rng(cfg, "label_noise", split).random(len(y)) < noise.p).astype(np.int64)
    return y


def _reference_rows(cfg: RobotConfig) -> dict[str, tuple[np.ndarray, ...]]:
    """``render=reference``: ``{split: (meta, y)}`` from 0.4.1's catalogue, labels and row split
    (``source=concept_benchmark``: ``(meta, y, x)`` made by the reference package itself)."""
    if cfg.source == "concept_benchmark":
        from synthetic.robot.reference.oracle import reference_dataset

        return reference_dataset(cfg)
    from synthetic.robot.reference.rows import sample

    return sample(cfg, lambda meta: glorp_probability(attribute_table(meta), cfg),
                  lambda expr, meta: evaluate(expr, attribute_table(meta)).astype(bool))  # fmt: skip


def _sample_split(cfg: RobotConfig, n_robots: int, split: int) -> tuple[np.ndarray, np.ndarray]:
    """``meta [n*R, k]`` and ``y [n*R]`` of one split."""
    reps = cfg.renders_per_robot
    rng = _rng(cfg, "body", split)
    shifted = split == SPLITS["train"] and cfg.train_constraints
    body = _constrained_body(cfg, rng, n_robots) if shifted else _draw_body(rng, n_robots)
    meta_robot = np.zeros((n_robots, len(META_NAMES)), dtype=np.int64)
    meta_robot[:, : len(BODY_NAMES)] = body
    p = glorp_probability(attribute_table(meta_robot), cfg)
    u = _rng(cfg, "label", split).random(n_robots)
    y = _label_noise(cfg, (u < p if cfg.label.stochastic else p > 0.5).astype(np.int64), split)

    n = n_robots * reps
    meta = np.repeat(meta_robot, reps, axis=0)
    y = np.repeat(y, reps)
    nz = cfg.nuisance
    rng = _rng(cfg, "nuisance", split)
    cols = {
        "shift_x": rng.integers(-nz.max_shift, nz.max_shift + 1, n),
        "shift_y": rng.integers(-nz.max_shift, nz.max_shift + 1, n),
        "arm_left": rng.integers(0, len(ARM_ANGLES), n),
        "arm_right": rng.integers(0, len(ARM_ANGLES), n),
        "leg_spread": rng.integers(0, N_LEG_SPREADS, n),
        "palette": rng.integers(0, len(PALETTES), n),
    }
    tint = rng.integers(-nz.jitter, nz.jitter + 1, (n, 3))
    # every stream is drawn in full before a knob overrides it, so toggling one
    # nuisance knob leaves the others unchanged
    if not nz.arm_angle:
        cols["arm_left"][:] = _DEFAULT_ARM
        cols["arm_right"][:] = _DEFAULT_ARM
    if not nz.leg_spread:
        cols["leg_spread"][:] = _DEFAULT_LEG
    if not nz.palette:
        cols["palette"][:] = _DEFAULT_PALETTE
    cols["tint_r"], cols["tint_g"], cols["tint_b"] = tint.T
    cols["robot_id"] = np.repeat(np.arange(n_robots), reps)
    for name, col in cols.items():
        meta[:, META_NAMES.index(name)] = col
    return meta, y


class ImageRows:
    """``rows(a, b)``: the images of rows ``a:b`` exactly as :func:`generate` makes them, chunk by
    chunk in order (each split's pixel-noise stream advances as the rows go by; ``skip(a, b)``
    advances it without rendering, for a resumed run)."""

    def __init__(self, cfg: RobotConfig, meta: np.ndarray, split: np.ndarray, cue: np.ndarray | None = None):
        """``cue``: each row's cue bit (``RobotConfig.cue``; drawn after rendering, before the pixel noise)."""
        self.cfg, self.meta, self.split, self.cue = cfg, meta, split, cue
        self._rngs: dict[int, np.random.Generator] = {}

    def _noise(self, a: int, b: int, x: np.ndarray | None) -> None:
        """Add Gaussian noise of sigma ``pixel_noise`` levels to ``x`` (rows ``a:b``), rounded and
        clipped to 0..255, from one stream per split; ``x=None`` only advances the streams."""
        size = self.cfg.image_size
        for code in SPLITS.values():
            seg = np.flatnonzero(self.split[a:b] == code)  # a split's rows are contiguous
            if not len(seg):
                continue
            rng = self._rngs.setdefault(code, _rng(self.cfg, "pixels", code))
            noise = rng.normal(0.0, self.cfg.pixel_noise, (len(seg), size, size, 3))
            if x is not None:
                lo, hi = seg[0], seg[-1] + 1
                x[lo:hi] = np.clip(np.rint(x[lo:hi] + noise), 0, 255).astype(np.uint8)

    def _render(self, meta: np.ndarray) -> np.ndarray:
        c = self.cfg
        if c.render == "reference":
            from synthetic.robot.reference.rows import images

            return images(meta, c.image_size, blur=c.blur)
        return render(meta, c.image_size, blur=c.blur, occlude=c.occlude, visibility=c.visibility)

    def rows(self, a: int, b: int) -> np.ndarray:
        c = self.cfg
        x = self._render(self.meta[a:b])
        if self.cue is not None and c.cue.kind != "none":
            x = draw_cue(x, self.cue[a:b], c.cue)
        if c.pixel_noise > 0:
            self._noise(a, b, x)
        return x

    def skip(self, a: int, b: int) -> None:
        if self.cfg.pixel_noise > 0:
            self._noise(a, b, None)

    def take(self, rows: np.ndarray) -> np.ndarray:
        """Any rows, in any order (noise-free configs: each image is a function of its row alone)."""
        if self.cfg.pixel_noise > 0:
            raise ValueError("storage='render' cannot draw robots with pixel_noise > 0 row by row (the noise is a per-split stream): use 'disk'")
        c = self.cfg
        rows = np.asarray(rows, dtype=np.int64)
        x = self._render(self.meta[rows])
        return draw_cue(x, self.cue[rows], c.cue) if self.cue is not None and c.cue.kind != "none" else x


def generate(cfg: RobotConfig, images: Callable[[ImageRows, int], np.ndarray] | None = None) -> SyntheticData:
    """Generate all splits for ``cfg`` (pure: same config -> byte-identical arrays).

    ``images(rows, n)`` (optional) makes the image array from an :class:`ImageRows` (e.g. chunk by
    chunk into a memory-mapped file, :func:`load` with ``storage="disk"``); by default all at once."""
    if not isinstance(cfg, RobotConfig):
        cfg = RobotConfig.from_dict(cfg)
    chosen = load_concept_set(cfg.concept_set)
    true_set = load_concept_set("true")
    rates = np.asarray(cfg.noise_rates(chosen.names), dtype=np.float64)
    sizes = cfg.split_sizes

    metas, ys, cs, cleans, c_trues, texts, observed, cues = [], [], [], [], [], [], [], []
    missing_on = cfg.concept_missing.mechanism != "none"
    reference = _reference_rows(cfg) if cfg.render == "reference" else None
    for name, code in SPLITS.items():
        if reference is None:
            meta, y = _sample_split(cfg, sizes[name], code)
        else:
            meta, y = reference[name][0], _label_noise(cfg, reference[name][1], code)
        table = attribute_table(meta)
        c = chosen.evaluate(table)
        cleans.append(c.copy())
        flips = _rng(cfg, "noise", code).random(c.shape) < rates[None, :]
        c[flips] = 1.0 - c[flips]
        asym = cfg.concept_noise_asym
        if asym.p01 > 0 or asym.p10 > 0:
            flips = _rng(cfg, "asym", code).random(c.shape) < np.where(c > 0.5, asym.p10, asym.p01)
            c[flips] = 1.0 - c[flips]
        if missing_on:
            observed.append(_observed(cfg, c, code))
        if cfg.cue.kind != "none":
            cues.append(cue_bits(cfg.cue, y, _rng(cfg, "cue", code)))
        metas.append(meta)
        ys.append(y)
        cs.append(c)
        c_trues.append(true_set.evaluate(table))
        if cfg.modality == "text":
            texts.append(text_mod.tokenize(meta, _rng(cfg, "text", code), shuffle=cfg.text_shuffle))
    meta = np.concatenate(metas)
    split = split_codes(cfg.split_rows)

    info: dict[str, Any] = {
        "generator": "robot",
        "version": ROBOT_VERSION,
        "config": cfg.record(),
        "concept_set": chosen.to_dict(),
        "true_concept_set": true_set.to_dict(),
        "label_rule": "Pr(Glorp) = sigmoid(scale * (sum_k weights[k] * attr_k + bias))"
        + ("" if cfg.label.stochastic else ", y = 1[Pr(Glorp) > 0.5]"),
        "robots_per_split": sizes,
        "hand_subtypes": HAND_SUBTYPES,
        "foot_subtypes": FOOT_SUBTYPES,
        "palettes": PALETTE_NAMES,
        "arm_angles_deg": list(ARM_ANGLES),
    }
    cue = np.concatenate(cues) if cues else None
    if chosen.groups or chosen.continuous:  # typed concepts: what a model reads as one group or a number
        info["concept_types"] = {"groups": chosen.groups, "continuous": chosen.continuous}
    if cue is not None:
        info["cue"] = {"kind": cfg.cue.kind, "correlation": cfg.cue.correlation, "says": "extra['cue']: 1 = Glorp"}
    if cfg.render == "reference":
        info["render"] = {"kind": "reference", "source": cfg.source, "rows_per_split": cfg.split_rows,
                          "meta": "palette = 0.4.1 colour scheme (0..70), robot_id = catalogue row"}  # fmt: skip
    if reference is not None and cfg.source == "concept_benchmark":
        x = np.concatenate([reference[name][2] for name in SPLITS])
    elif cfg.modality == "image" and images is not None:
        x = images(ImageRows(cfg, meta, split, cue), len(meta))
    elif cfg.modality == "image":
        x = ImageRows(cfg, meta, split, cue).rows(0, len(meta))
    elif cfg.modality == "tabular":
        x = tabular_features(meta)
        info["x_names"] = TABULAR_NAMES
    else:
        x = np.concatenate(texts) if texts else np.zeros((0, text_mod.MAX_LEN), dtype=np.int64)
        info["vocab"] = text_mod.VOCAB
    return SyntheticData(
        x=x,
        c=np.concatenate(cs).astype(np.float32),
        c_true=np.concatenate(c_trues).astype(np.float32),
        y=np.concatenate(ys).astype(np.int64),
        split=split,
        meta=meta,
        concept_names=chosen.names,
        true_concept_names=true_set.names,
        class_names=list(CLASS_NAMES),
        meta_names=list(META_NAMES),
        modality=cfg.modality,
        # Noise-free values of the chosen concept set: what an oracle intervener supplies.
        extra={"c_clean": np.concatenate(cleans).astype(np.float32)}
        | ({"c_observed": np.concatenate(observed)} if missing_on else {})
        | ({"cue": cue} if cue is not None else {}),
        info=info,
    )


def cache_key(cfg: RobotConfig) -> dict[str, Any]:
    """What the cache entry of ``cfg`` is keyed on: config, concept definitions, generator version."""
    return {
        "generator": "robot",
        "version": ROBOT_VERSION,
        "config": {k: v for k, v in cfg.record().items() if k != "concept_source"},  # annotation runs after generation
        "concepts": load_concept_set(cfg.concept_set).to_dict(),
        "true_concepts": load_concept_set("true").to_dict(),
    }


#: Rows rendered per chunk by ``storage="disk"`` (32 px: 3 KB a robot, 12 MB a chunk).
CHUNK_ROWS = 4096


def load(cfg: RobotConfig | Mapping[str, Any], cache_dir: str | None = None, storage: str = "memory", chunk_rows: int = CHUNK_ROWS) -> SyntheticData:
    """``generate(cfg)`` through the on-disk cache in ``cache_dir`` (``None``: no cache).

    ``cfg`` may also be a dict or Hydra ``DictConfig`` with the fields of :class:`RobotConfig`.
    ``storage="disk"``: the images are rendered ``chunk_rows`` at a time into a memory-mapped
    ``robot-<key>-x.npy`` in ``cache_dir`` (resumable, byte-identical to the in-memory arrays) and
    come back memory-mapped, so a dataset larger than memory costs one chunk of RAM to make.
    ``storage="render"``: no images are stored, each batch's images are rendered when read
    (noise-free configs; the same bytes). With both, the labels, concepts and attributes are cached
    beside (``robot-labels-<key>.npz``): a later load reads them instead of sampling again.
    """
    if not isinstance(cfg, RobotConfig):
        cfg = RobotConfig.from_dict(cfg)
    if cfg.source == "concept_benchmark" and storage != "memory":
        raise ValueError(f"data.source=concept_benchmark keeps the reference's own images in memory: storage='{storage}' is not supported (use memory)")
    data = _load_generated(cfg, cache_dir, storage, chunk_rows)
    return apply_concept_source(data, cfg, cache_dir, cache_key(cfg))


def _load_generated(cfg: RobotConfig, cache_dir: str | None, storage: str, chunk_rows: int) -> SyntheticData:
    """The generator's dataset (concepts as the concept set defines them) through the cache."""
    if storage == "render" and cfg.modality == "image":
        if cfg.pixel_noise > 0:
            raise ValueError("storage='render' cannot draw robots with pixel_noise > 0 row by row (the noise is a per-split stream): use 'disk'")
        shape = (cfg.image_size, cfg.image_size, 3)
        return cached_without_images(
            cache_key(cfg),
            lambda: generate(cfg, images=lambda rows, n: RenderedImages(rows.take, (n, *shape))),
            lambda a: RenderedImages(ImageRows(cfg, a["meta"], a["split"], a.get("extra__cue")).take, (len(a["meta"]), *shape)),
            cache_dir,
            "robot-labels",
        )
    if storage == "disk" and cfg.modality == "image":
        if cache_dir is None:
            raise ValueError("storage='disk' needs a cache directory")
        key = config_hash(cache_key(cfg))
        path = Path(cache_dir) / f"robot-{key}-x.npy"

        def to_disk(rows: ImageRows, n: int) -> np.ndarray:
            shape = (n, cfg.image_size, cfg.image_size, 3)
            return render_to_npy(path, shape, rows.rows, chunk_rows, key, skip=rows.skip)

        return cached_without_images(
            cache_key(cfg),
            lambda: generate(cfg, images=to_disk),
            lambda a: to_disk(ImageRows(cfg, a["meta"], a["split"], a.get("extra__cue")), len(a["meta"])),
            cache_dir,
            "robot-labels",
        )
    if storage not in ("memory", "disk", "render"):
        raise ValueError(f"storage must be 'memory', 'disk' or 'render', got '{storage}'")
    arrays = cached_arrays(
        cache_key(cfg), lambda: generate(cfg).to_arrays(), cache_dir, prefix="robot", required=SyntheticData.ARRAY_KEYS
    )
    return SyntheticData.from_arrays(arrays)
