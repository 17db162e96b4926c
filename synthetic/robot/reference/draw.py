"""Vectorised renderer of ``concept-benchmark`` 0.4.1's robots (``data.render=reference``).

The reference's pose is fixed, so every part's coverage depends only on its variant (sub-type):
each step of each variant (a fill or a black 1 px stroke, :mod:`~synthetic.robot.reference.geometry`)
is rasterised once per image size (:mod:`~synthetic.robot.reference.raster`). The steps are
composited in the reference's drawing order with the coverage as alpha ("over").

A step paints one of four colours (the scheme's left or right colour, black or white), so a pixel
is ``w_left * left + w_right * right + w_white * 255`` with weights that depend only on the
variants of the few parts that touch it. The canvas is split into regions by which parts touch
each pixel; each region's weights are composited once per size for every variant tuple of its
parts, and its finished pixels once per tuple and scheme (:func:`regions`, cached). A batch is then
a gather per region: no Python loop runs over samples.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from synthetic.robot.attributes import BODY_NAMES
from synthetic.robot.reference import geometry as g
from synthetic.robot.reference.raster import coverage
from synthetic.robot.reference.schemes import SCHEMES

#: Number of colour schemes (a catalogue row ``i`` uses scheme ``i % N_SCHEMES``).
N_SCHEMES = len(SCHEMES)
_SCHEME_RGB = np.asarray(SCHEMES, dtype=np.float32)  # [71, 2, 3]
#: Colour code (geometry.LEFT, RIGHT, BLACK, WHITE) -> the weight channel it paints (black: none).
_CHANNEL = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 0], [0, 0, 1]], dtype=np.float32)
_COL = {name: i for i, name in enumerate(BODY_NAMES)}


def _attr(name: str) -> Callable[[np.ndarray], np.ndarray]:
    return lambda body: body[:, _COL[name]]


def _antennae(body: np.ndarray) -> np.ndarray:
    """0 none, 1 above a round head, 2 above a square head (they differ in length)."""
    return np.where(body[:, _COL["antennae"]] > 0, 2 - body[:, _COL["head_round"]], 0)


@dataclass(frozen=True)
class Part:
    """A part of the robot: its variant per robot and its steps per variant."""

    name: str
    variant: Callable[[np.ndarray], np.ndarray] | None  # body attributes [N, 9] -> variant [N]; None: one variant
    n_variants: int
    steps: Callable[[g.Frame, int], list[g.Step]]


#: The parts in 0.4.1's drawing order (later parts are drawn over earlier ones).
PARTS: tuple[Part, ...] = (
    Part("arms", None, 1, lambda f, v: g.arms(f)),
    Part("elbows", _attr("elbows"), 2, g.elbows),
    Part("hands", _attr("hand_subtype"), len(g.HAND_NAMES), g.hands),
    Part("legs", None, 1, lambda f, v: g.legs(f)),
    Part("knees", _attr("knees"), 2, g.knees),
    Part("body", _attr("body_round"), 2, g.body),
    Part("feet", _attr("foot_subtype"), len(g.FOOT_NAMES), g.feet),
    Part("antennae", _antennae, 3, g.antennae),
    Part("head", _attr("head_round"), 2, g.head),
    Part("eyes", None, 1, lambda f, v: g.eyes(f)),
    Part("ears", _attr("ears_triangle"), 2, g.ears),
    Part("mouth", lambda body: 1 - body[:, _COL["mouth_closed"]], 2, lambda f, v: g.mouth(f, 1 - v)),
)  # fmt: skip


@dataclass(frozen=True)
class Layer:
    """Step ``k`` of a part for all its variants: coverage ``masks[v]`` (``float32`` 0..1) in the
    box ``(y0, y1, x0, x1)``, painting colour ``colours[v]`` (``geometry.LEFT`` ...)."""

    part: int
    masks: np.ndarray
    colours: np.ndarray
    box: tuple[int, int, int, int]


@lru_cache(maxsize=8)
def layers(size: int) -> tuple[Layer, ...]:
    """Every step of every part at ``size`` px, rasterised once (cached per size)."""
    frame = g.Frame(size)
    out = []
    for p, part in enumerate(PARTS):
        steps = [part.steps(frame, v) for v in range(part.n_variants)]
        for k in range(max(len(s) for s in steps)):
            cov = [coverage(s[k].path, s[k].width, size) if k < len(s) else None for s in steps]
            boxes = [b for c in cov if c is not None and c[0].size for b in [c[1]]]
            if not boxes:
                continue
            y0, x0 = min(b[0] for b in boxes), min(b[2] for b in boxes)
            y1, x1 = max(b[1] for b in boxes), max(b[3] for b in boxes)
            masks = np.zeros((part.n_variants, y1 - y0, x1 - x0), dtype=np.float32)
            colours = np.full(part.n_variants, g.BLACK, dtype=np.int64)
            for v, c in enumerate(cov):
                if c is None or not c[0].size:
                    continue
                m, (a, b, cc, d) = c
                masks[v, a - y0 : b - y0, cc - x0 : d - x0] = m / 255.0
                colours[v] = steps[v][k].colour
            masks.setflags(write=False)
            out.append(Layer(p, masks, colours, (y0, y1, x0, x1)))
    return tuple(out)


def variants(body: np.ndarray) -> np.ndarray:
    """``int64 [N, len(PARTS)]``: each robot's variant of each part."""
    body = np.asarray(body, dtype=np.int64)
    cols = [np.zeros(len(body), dtype=np.int64) if p.variant is None else p.variant(body) for p in PARTS]
    return np.stack(cols, axis=1)


@dataclass(frozen=True)
class Region:
    """The pixels ``pixels`` (flat indices) that the same parts ``parts`` touch. Their colour
    weights depend only on those parts' variants: ``weights[t]`` (``float32 [P, 3]``: left, right,
    white; the rest is black) for the variant tuple ``t = var[:, parts] @ strides``."""

    pixels: np.ndarray
    parts: np.ndarray
    strides: np.ndarray
    weights: np.ndarray


def _composite(layer_list: list[Layer], size: int, parts: list[int], pixels: np.ndarray) -> np.ndarray:
    """Weights of ``pixels`` for every variant tuple of ``parts``, compositing the layers in order."""
    shape = [PARTS[p].n_variants for p in parts]
    tuples = np.indices(shape).reshape(len(parts), -1).T
    w = np.zeros((len(tuples), len(pixels), 3), dtype=np.float32)
    w[..., 2] = 1.0
    ys, xs = np.divmod(pixels, size)
    for layer in layer_list:
        if layer.part not in parts:
            continue
        y0, y1, x0, x1 = layer.box
        inside = (ys >= y0) & (ys < y1) & (xs >= x0) & (xs < x1)
        v = tuples[:, parts.index(layer.part)]
        m = np.zeros((len(tuples), len(pixels)), dtype=np.float32)
        m[:, inside] = layer.masks[v][:, ys[inside] - y0, xs[inside] - x0]
        w *= 1.0 - m[..., None]
        w += _CHANNEL[layer.colours[v]][:, None, :] * m[..., None]
    return w


@lru_cache(maxsize=8)
def regions(size: int) -> tuple[Region, ...]:
    """The canvas split by which parts touch each pixel (untouched pixels stay white); cached per size."""
    layer_list = list(layers(size))
    touch = np.zeros(size * size, dtype=np.int64)
    for layer in layer_list:
        y0, y1, x0, x1 = layer.box
        hit = np.zeros((size, size), dtype=bool)
        hit[y0:y1, x0:x1] = (layer.masks > 0).any(axis=0)
        touch |= hit.reshape(-1).astype(np.int64) << layer.part
    out = []
    for key in np.unique(touch[touch > 0]):
        parts = [p for p in range(len(PARTS)) if key >> p & 1]
        pixels = np.flatnonzero(touch == key)
        shape = np.array([PARTS[p].n_variants for p in parts], dtype=np.int64)
        strides = np.concatenate([np.cumprod(shape[::-1])[::-1][1:], [1]]).astype(np.int64)
        weights = _composite(layer_list, size, parts, pixels)
        for a in (pixels, weights):
            a.setflags(write=False)
        out.append(Region(pixels, np.asarray(parts), strides, weights))
    return tuple(out)


def _colourise(w: np.ndarray, rgb: np.ndarray) -> np.ndarray:
    """``uint8 [n, P, 3]`` from weights ``[n, P, 3]`` and scheme colours ``rgb [n, 2, 3]``."""
    img = w[..., 0:1] * rgb[:, None, 0] + w[..., 1:2] * rgb[:, None, 1]
    img += w[..., 2:3] * np.float32(255.0)
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


#: Largest table of finished region pixels per (variant tuple, scheme) kept per size (bytes);
#: bigger regions are coloured row by row instead (the same bytes).
TABLE_BYTES = 64 << 20


@lru_cache(maxsize=64)
def _table(size: int, index: int) -> np.ndarray | None:
    """``uint8 [T * N_SCHEMES, P * 3]``: region ``index``'s pixels for every variant tuple and scheme."""
    w = regions(size)[index].weights
    if w.size * N_SCHEMES > TABLE_BYTES:
        return None
    t = np.repeat(np.arange(len(w)), N_SCHEMES)
    table = _colourise(w[t], _SCHEME_RGB[np.tile(np.arange(N_SCHEMES), len(w))]).reshape(len(t), -1)
    table.setflags(write=False)
    return table


@lru_cache(maxsize=8)
def _layout(size: int) -> np.ndarray:
    """For each byte of a flat ``size x size x 3`` image, its column in the regions' concatenated
    pixels (:func:`render`); untouched pixels point at the white column after them."""
    pixels = np.concatenate([r.pixels for r in regions(size)])
    index = np.full(size * size * 3, 3 * len(pixels), dtype=np.int64)
    index[(pixels[:, None] * 3 + np.arange(3)).reshape(-1)] = np.arange(3 * len(pixels))
    index.setflags(write=False)
    return index


#: Rows rendered at a time (bounds the temporaries).
CHUNK = 8192


def render(body: np.ndarray, scheme: np.ndarray, size: int = 32) -> np.ndarray:
    """``uint8 [N, size, size, 3]`` images of robots with body attributes ``body``
    (``[N, 9]``, columns ``BODY_NAMES``) in colour schemes ``scheme`` (``[N]``, 0..70)."""
    body = np.asarray(body, dtype=np.int64).reshape(-1, len(BODY_NAMES))
    scheme = np.asarray(scheme, dtype=np.int64).reshape(-1)
    if len(scheme) != len(body):
        raise ValueError(f"render: {len(body)} robots but {len(scheme)} colour schemes")
    if len(scheme) and (scheme.min() < 0 or scheme.max() >= N_SCHEMES):
        raise ValueError(f"render: colour scheme out of range 0..{N_SCHEMES - 1}")
    out = np.empty((len(body), size, size, 3), dtype=np.uint8)
    flat = out.reshape(len(body), -1)
    layout = _layout(size)
    for a in range(0, len(body), CHUNK):
        var, sch = variants(body[a : a + CHUNK]), scheme[a : a + CHUNK]
        cols = []
        for i, region in enumerate(regions(size)):
            t = var[:, region.parts] @ region.strides
            table = _table(size, i)
            if table is not None:
                cols.append(np.take(table, t * N_SCHEMES + sch, axis=0))
            else:
                cols.append(_colourise(region.weights[t], _SCHEME_RGB[sch]).reshape(len(t), -1))
        cols.append(np.full((len(sch), 1), 255, dtype=np.uint8))
        np.take(np.concatenate(cols, axis=1), layout, axis=1, out=flat[a : a + CHUNK])
    return out
