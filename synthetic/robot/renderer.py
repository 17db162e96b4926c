"""Vectorised robot renderer.

Each drawable layer (legs, knees, feet, arms, ...) has a few variants indexed by
nuisance values (arm angles, leg spread) and an attribute value (foot sub-type,
mouth ...). Every variant is drawn once with PIL at ``f x`` the target size and
box-downsampled into an anti-aliased alpha mask (0..256), cropped to the rows
(and, for larger images, columns) the layer can touch; masks are cached per
image size. A batch is then rendered with exact integer numpy only, in chunks
that fit in cache: per layer, gather the ``[N,h,w]`` masks of the rows' variants
and alpha-blend each row's colour into a channel-planar ``uint16`` canvas; then
copy every row to its translated position (one slice per distinct offset, never a
loop per image) and optionally blur.

Geometry is written in canonical coordinates ``(x, y)`` in ``[0, 1]`` (y down)
of the untranslated image; :class:`Pen` scales them to pixels. The same draw
functions power :func:`render_reference`, a plain per-image PIL renderer used as
the benchmark baseline.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw

from synthetic.robot.attributes import (
    ARM_ANGLES,
    MAX_SHIFT,
    META_INDEX,
    N_FOOT,
    N_HAND,
    N_LEG_SPREADS,
    attribute_table,
    colours,
)

__all__ = ["PART_NAMES", "LAYERS", "render", "part_mask", "render_reference", "pixel_shift"]


# --------------------------------------------------------------------------- drawing
class Pen:
    """PIL drawing in canonical ``[0,1]`` coordinates on an ``H x H`` image."""

    def __init__(self, draw: ImageDraw.ImageDraw, size: int, fill):
        self.d = draw
        self.s = size
        self.fill = fill

    def _p(self, x: float, y: float) -> tuple[float, float]:
        return (x * self.s, y * self.s)

    def poly(self, pts: Sequence[tuple[float, float]]) -> None:
        self.d.polygon([self._p(x, y) for x, y in pts], fill=self.fill)

    def rect(self, x0: float, y0: float, x1: float, y1: float) -> None:
        self.d.rectangle([*self._p(x0, y0), *self._p(x1, y1)], fill=self.fill)

    def ellipse(self, x0: float, y0: float, x1: float, y1: float) -> None:
        self.d.ellipse([*self._p(x0, y0), *self._p(x1, y1)], fill=self.fill)

    def disc(self, cx: float, cy: float, r: float) -> None:
        self.ellipse(cx - r, cy - r, cx + r, cy + r)

    def ring(self, cx: float, cy: float, r: float, width: float) -> None:
        box = [*self._p(cx - r, cy - r), *self._p(cx + r, cy + r)]
        self.d.ellipse(box, outline=self.fill, width=max(1, round(width * self.s)))

    def line(self, x0: float, y0: float, x1: float, y1: float, width: float) -> None:
        """Thick segment with round caps."""
        self.d.line([*self._p(x0, y0), *self._p(x1, y1)], fill=self.fill, width=max(1, round(width * self.s)))
        self.disc(x0, y0, width / 2)
        self.disc(x1, y1, width / 2)


SIDES = (-1.0, 1.0)  # left, right (x sign relative to the centre line)


def leg_points(spread: int, side: float) -> tuple[tuple[float, float], tuple[float, float]]:
    """Hip and ankle of one leg."""
    ankle_dx = 0.10 + 0.09 * spread / max(1, N_LEG_SPREADS - 1)
    return (0.5 + side * 0.075, 0.62), (0.5 + side * ankle_dx, 0.82)


def arm_points(bin_: int, side: float) -> tuple[tuple[float, float], tuple[float, float]]:
    """Shoulder and hand centre of one arm."""
    theta = math.radians(ARM_ANGLES[bin_])
    sx, sy = 0.5 + side * 0.155, 0.47
    return (sx, sy), (sx + side * 0.2 * math.cos(theta), sy - 0.2 * math.sin(theta))


def draw_legs(pen: Pen, pose: tuple[int, ...], _attr: int) -> None:
    for side in SIDES:
        (hx, hy), (ax, ay) = leg_points(pose[0], side)
        pen.line(hx, hy, ax, ay, 0.05)


def draw_knees(pen: Pen, pose: tuple[int, ...], knees: int) -> None:
    if knees:
        for side in SIDES:
            (hx, hy), (ax, ay) = leg_points(pose[0], side)
            pen.disc((hx + ax) / 2, (hy + ay) / 2, 0.042)


# Foot silhouettes in local coordinates: u in [0,1] from the inner to the outer
# edge, v in [0,1] from the ankle down to the sole. Each is a list of polygons.
_DOME = [(0.5 + 0.5 * math.cos(t), 1.0 - 0.9 * math.sin(t)) for t in np.linspace(0.0, math.pi, 17)]
FOOT_SHAPES: list[list[list[tuple[float, float]]]] = [
    [[(0, 0.15), (1, 0.15), (1, 1), (0, 1)]],  # block: full box
    [[(0, 0.62), (1, 0.62), (1, 1), (0, 1)], [(0.33, 0.0), (0.67, 0.0), (0.67, 0.62), (0.33, 0.62)]],  # slab
    [_DOME],  # dome: rounded top, flat sole
    [[(0.32, 0.1), (0.68, 0.1), (1, 1), (0, 1)]],  # flare: trapezoid widening to the sole
    [[(0, 0.1), (1, 0.1), (1, 1), (0.66, 1), (0.66, 0.5), (0.34, 0.5), (0.34, 1), (0, 1)]],  # arch
    [[(0, 0.1), (1, 0.1), (0.5, 1)]],  # spike: one point down
    [[(0.5, 0.0), (1, 0.5), (0.5, 1), (0, 0.5)]],  # diamond
    [[(0, 0.1), (1, 0.1), (0.8, 1), (0.5, 0.4), (0.2, 1)]],  # fork: two points
    [[(0, 0.05), (0.5, 0.42), (1, 0.05), (0.5, 1)]],  # arrow: chevron pointing down
    [[(0, 0.1), (1, 0.1), (0.86, 1), (0.67, 0.45), (0.5, 1), (0.33, 0.45), (0.14, 1)]],  # saw: three points
]
FOOT_W, FOOT_H = 0.19, 0.13


def draw_feet(pen: Pen, pose: tuple[int, ...], subtype: int) -> None:
    for side in SIDES:
        _, (ax, ay) = leg_points(pose[0], side)
        y0 = ay - 0.015
        for poly in FOOT_SHAPES[subtype]:
            pen.poly([(ax + side * (u - 0.5) * FOOT_W, y0 + v * FOOT_H) for u, v in poly])


def draw_arms(pen: Pen, bins: tuple[int, ...], _attr: int) -> None:
    for side, bin_ in zip(SIDES, bins):
        (sx, sy), (hx, hy) = arm_points(bin_, side)
        pen.line(sx, sy, hx, hy, 0.045)


def draw_elbows(pen: Pen, bins: tuple[int, ...], elbows: int) -> None:
    if elbows:
        for side, bin_ in zip(SIDES, bins):
            (sx, sy), (hx, hy) = arm_points(bin_, side)
            pen.disc((sx + hx) / 2, (sy + hy) / 2, 0.036)


HAND_R = 0.055


def _hand(pen: Pen, cx: float, cy: float, subtype: int) -> None:
    r = HAND_R
    if subtype == 0:  # ball
        pen.disc(cx, cy, r)
    elif subtype == 1:  # ring
        pen.ring(cx, cy, r, 0.45 * r)
    elif subtype == 2:  # clover: three lobes
        for a in (90.0, 210.0, 330.0):
            t = math.radians(a)
            pen.disc(cx + 0.5 * r * math.cos(t), cy - 0.5 * r * math.sin(t), 0.55 * r)
    elif subtype == 3:  # block
        pen.rect(cx - 0.85 * r, cy - 0.85 * r, cx + 0.85 * r, cy + 0.85 * r)
    elif subtype == 4:  # wedge: triangle pointing up
        pen.poly([(cx - r, cy + 0.85 * r), (cx + r, cy + 0.85 * r), (cx, cy - r)])
    else:  # star: four sharp points
        pts = []
        for k in range(8):
            t = math.radians(45.0 * k)
            rr = 1.15 * r if k % 2 == 0 else 0.38 * r
            pts.append((cx + rr * math.cos(t), cy - rr * math.sin(t)))
        pen.poly(pts)


def draw_hands(pen: Pen, bins: tuple[int, ...], subtype: int) -> None:
    for side, bin_ in zip(SIDES, bins):
        _, (cx, cy) = arm_points(bin_, side)
        _hand(pen, cx, cy, subtype)


def draw_antennae(pen: Pen, _pose: tuple[int, ...], antennae: int) -> None:
    if antennae:
        for side in SIDES:
            x0, y0, x1, y1 = 0.5 + side * 0.08, 0.17, 0.5 + side * 0.135, 0.095
            pen.line(x0, y0, x1, y1, 0.028)
            pen.disc(x1, y1, 0.034)


def draw_neck(pen: Pen, _pose: tuple[int, ...], _a: int) -> None:
    pen.rect(0.455, 0.36, 0.545, 0.44)


def draw_body(pen: Pen, _pose: tuple[int, ...], round_: int) -> None:
    (pen.ellipse if round_ else pen.rect)(0.33, 0.42, 0.67, 0.645)


def draw_ears(pen: Pen, _pose: tuple[int, ...], triangle: int) -> None:
    for side in SIDES:
        if triangle:
            pen.poly([(0.5 + side * 0.155, 0.185), (0.5 + side * 0.155, 0.335), (0.5 + side * 0.275, 0.26)])
        else:
            x0, x1 = sorted((0.5 + side * 0.155, 0.5 + side * 0.235))
            pen.rect(x0, 0.215, x1, 0.305)


def draw_head(pen: Pen, _pose: tuple[int, ...], round_: int) -> None:
    (pen.ellipse if round_ else pen.rect)(0.34, 0.16, 0.66, 0.385)


def draw_eyes(pen: Pen, _pose: tuple[int, ...], _a: int) -> None:
    for side in SIDES:
        pen.disc(0.5 + side * 0.065, 0.225, 0.028)


def draw_mouth(pen: Pen, _pose: tuple[int, ...], closed: int) -> None:
    # rows aligned to the 32 px grid: a closed mouth is one pixel row, an open one three
    if closed:
        pen.rect(0.40, 0.3125, 0.60, 0.34)
    else:
        pen.rect(0.41, 0.28125, 0.59, 0.372)


@dataclass(frozen=True)
class Layer:
    """One drawable layer.

    Its variants are indexed by the nuisance values (``nuisance`` meta columns, with
    ``n_nuisance`` values each) and the attribute value (``attr``, ``n_attr`` values):
    ``variant = ravel(nuisance values) * n_attr + attr value``.
    """

    name: str
    part: str
    role: str
    nuisance: tuple[str, ...]
    n_nuisance: tuple[int, ...]
    attr: str | None
    n_attr: int
    draw: Callable[[Pen, tuple[int, ...], int], None]

    @property
    def n_poses(self) -> int:
        return math.prod(self.n_nuisance)

    @property
    def n_variants(self) -> int:
        return self.n_poses * self.n_attr

    def pose(self, meta: np.ndarray) -> np.ndarray:
        """Flat index of the nuisance values of each row."""
        idx = np.zeros(len(meta), dtype=np.int64)
        for name, n in zip(self.nuisance, self.n_nuisance):
            idx = idx * n + meta[:, META_INDEX[name]]
        return idx

    def variant(self, meta: np.ndarray) -> np.ndarray:
        at = meta[:, META_INDEX[self.attr]] if self.attr else 0
        return self.pose(meta) * self.n_attr + at

    def poses(self):
        """All nuisance-value tuples in flat-index order."""
        return np.ndindex(*self.n_nuisance) if self.nuisance else iter([()])


N_ARM = len(ARM_ANGLES)
_ARMS = ("arm_left", "arm_right")
_LEG = ("leg_spread",)
#: Layers in drawing order (later layers are drawn on top).
LAYERS: list[Layer] = [
    Layer("legs", "legs", "limb", _LEG, (N_LEG_SPREADS,), None, 1, draw_legs),
    Layer("knees", "knees", "joint", _LEG, (N_LEG_SPREADS,), "knees", 2, draw_knees),
    Layer("feet", "feet", "extremity", _LEG, (N_LEG_SPREADS,), "foot_subtype", N_FOOT, draw_feet),
    Layer("arms", "arms", "limb", _ARMS, (N_ARM, N_ARM), None, 1, draw_arms),
    Layer("elbows", "elbows", "joint", _ARMS, (N_ARM, N_ARM), "elbows", 2, draw_elbows),
    Layer("hands", "hands", "extremity", _ARMS, (N_ARM, N_ARM), "hand_subtype", N_HAND, draw_hands),
    Layer("antennae", "antennae", "joint", (), (), "antennae", 2, draw_antennae),
    Layer("neck", "neck", "limb", (), (), None, 1, draw_neck),
    Layer("body", "body", "body", (), (), "body_round", 2, draw_body),
    Layer("ears", "ears", "joint", (), (), "ears_triangle", 2, draw_ears),
    Layer("head", "head", "body", (), (), "head_round", 2, draw_head),
    Layer("eyes", "eyes", "face", (), (), None, 1, draw_eyes),
    Layer("mouth", "mouth", "face", (), (), "mouth_closed", 2, draw_mouth),
]
#: Part names accepted by ``occlude`` and :func:`part_mask`.
PART_NAMES: list[str] = list(dict.fromkeys(layer.part for layer in LAYERS))


# --------------------------------------------------------------------------- mask cache
@dataclass(frozen=True)
class LayerMasks:
    """Masks of all variants of a layer over its box ``[y0:y0+h, x0:x0+w]``.

    The box spans every row any variant touches; small images use full-width
    rows (one long contiguous run per row and channel is faster than a narrow
    box), larger ones crop columns too. Alpha is on a 0..256 scale so that
    blending divides by a shift.
    """

    alpha: np.ndarray  # uint16 [V, h, w]
    inv: np.ndarray  # uint16 [V, h, w], 256 - alpha
    occluder: np.ndarray  # uint16 [n_poses, h, w]: 256 inside a box over every attribute value, 1 px margin
    occluder_inv: np.ndarray
    y0: int
    x0: int

    @property
    def h(self) -> int:
        return self.alpha.shape[1]

    @property
    def ys(self) -> slice:
        return slice(self.y0, self.y0 + self.alpha.shape[1])

    @property
    def xs(self) -> slice:
        return slice(self.x0, self.x0 + self.alpha.shape[2])


#: Crop mask boxes to their columns from this image size on (if that saves >= 25%).
CROP_COLUMNS_FROM = 48


def supersample(size: int) -> int:
    """Supersampling factor used to draw masks for an image of ``size`` px."""
    return max(2, math.ceil(128 / size))


def _readonly(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    a.setflags(write=False)
    return a


@lru_cache(maxsize=16)
def layer_masks(size: int) -> tuple[LayerMasks, ...]:
    """Masks of every layer at ``size`` px (drawn once, cached; read-only arrays)."""
    if size < 4:
        raise ValueError(f"image size must be >= 4, got {size}")
    f = supersample(size)
    hi = size * f
    out = []
    for layer in LAYERS:
        cover = np.zeros((layer.n_variants, size, size), dtype=np.int64)
        for p, pose in enumerate(layer.poses()):
            for at in range(layer.n_attr):
                img = Image.new("L", (hi, hi), 0)
                layer.draw(Pen(ImageDraw.Draw(img), hi, 255), tuple(pose), at)
                hit = np.asarray(img) > 0
                cover[p * layer.n_attr + at] = hit.reshape(size, f, size, f).sum(axis=(1, 3))
        # alpha in 0..256: 0 and 256 exactly where a pixel is empty / fully covered
        alpha = (cover * 256 + (f * f) // 2) // (f * f)
        rows = np.flatnonzero(alpha.any(axis=(0, 2)))
        y0, y1 = (max(0, rows[0] - 1), min(size, rows[-1] + 2)) if len(rows) else (0, 0)
        cols = np.flatnonzero(alpha.any(axis=(0, 1)))
        x0, x1 = (max(0, cols[0] - 1), min(size, cols[-1] + 2)) if len(cols) else (0, 0)
        if size < CROP_COLUMNS_FROM or x1 - x0 > 0.75 * size:
            x0, x1 = 0, size
        alpha = alpha[:, y0:y1, x0:x1].astype(np.uint16)
        occ = np.zeros((layer.n_poses, y1 - y0, x1 - x0), dtype=np.uint16)
        for p in range(layer.n_poses):
            u = alpha[p * layer.n_attr:(p + 1) * layer.n_attr].any(axis=0)
            if u.any():
                ys, xs = np.flatnonzero(u.any(axis=1)), np.flatnonzero(u.any(axis=0))
                occ[p, max(0, ys[0] - 1):ys[-1] + 2, max(0, xs[0] - 1):xs[-1] + 2] = 256
        out.append(
            LayerMasks(_readonly(alpha), _readonly(256 - alpha), _readonly(occ), _readonly(256 - occ), int(y0), int(x0))
        )
    return tuple(out)


# --------------------------------------------------------------------------- batch render
def pixel_shift(shift: np.ndarray, size: int) -> np.ndarray:
    """Translation in pixels at ``size`` for ``shift`` in units of 1/32 of the side (rounded half up)."""
    return (2 * np.asarray(shift, dtype=np.int64) * size + 32) // 64


def _check_meta(meta: np.ndarray) -> np.ndarray:
    meta = np.asarray(meta)
    if meta.ndim == 1:
        meta = meta[None]
    t = attribute_table(meta)  # validates the shape
    for layer in LAYERS:
        for name, n in (*zip(layer.nuisance, layer.n_nuisance), (layer.attr, layer.n_attr)):
            if name and (t[name].min(initial=0) < 0 or t[name].max(initial=0) >= n):
                raise ValueError(f"meta column '{name}' must be in 0..{n - 1}")
    for name in ("shift_x", "shift_y"):
        if np.abs(t[name]).max(initial=0) > MAX_SHIFT:
            raise ValueError(f"meta column '{name}' must be in -{MAX_SHIFT}..{MAX_SHIFT}")
    return meta.astype(np.int64, copy=False)


def _blend(region: np.ndarray, alpha: np.ndarray, inv: np.ndarray, colour: np.ndarray) -> None:
    """In place ``region = (region * (256 - a) + colour * a) >> 8`` (exact integer arithmetic).

    ``region`` is ``uint16 [N,3,h,S]``, ``alpha``/``inv`` ``uint16 [N,h,S]`` (0..256),
    ``colour`` ``uint16 [N,3]``. Fully covered pixels get ``colour`` exactly, empty
    ones keep their value.
    """
    region *= inv[:, None]
    region += alpha[:, None] * colour[:, :, None, None]
    region >>= 8


def _shift_groups(meta: np.ndarray, size: int):
    """Rows grouped by translation: ``order`` (rows sorted by offset) and ``(start, stop, dy, dx)`` runs."""
    dx = pixel_shift(meta[:, META_INDEX["shift_x"]], size)
    dy = pixel_shift(meta[:, META_INDEX["shift_y"]], size)
    key = (dy + 64) * 256 + (dx + 64)
    order = np.argsort(key, kind="stable")
    keys = key[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    stops = np.r_[starts[1:], len(keys)]
    return order, [(int(a), int(b), int(dy[order[a]]), int(dx[order[a]])) for a, b in zip(starts, stops)]


def _ranges(d: int, size: int) -> tuple[slice, slice]:
    """Destination and source slices of a shift by ``d`` pixels."""
    return slice(max(d, 0), size + min(d, 0)), slice(max(-d, 0), size - max(d, 0))


def _parts_to_layers(parts: Sequence[str]) -> list[int]:
    unknown = sorted(set(parts) - set(PART_NAMES))
    if unknown:
        raise ValueError(f"unknown part(s) {unknown}; expected names from {PART_NAMES}")
    return [i for i, layer in enumerate(LAYERS) if layer.part in set(parts)]


def _opacity_levels(visibility: Mapping[str, float] | None) -> dict[int, int]:
    """Layer index -> opacity on the 0..256 alpha scale, for the parts ``visibility`` names."""
    vis = dict(visibility or {})
    bad = {k: v for k, v in vis.items() if not 0.0 <= float(v) <= 1.0}
    if bad:
        raise ValueError(f"visibility must be in [0, 1], got {bad}")
    return {i: int(round(256 * float(vis[LAYERS[i].part]))) for i in _parts_to_layers(list(vis))}


def render(
    meta: np.ndarray,
    size: int = 32,
    blur: float = 0.0,
    occlude: Sequence[str] = (),
    chunk: int | None = None,
    visibility: Mapping[str, float] | None = None,
) -> np.ndarray:
    """Render robots from ``meta`` rows (columns :data:`~synthetic.robot.attributes.META_NAMES`).

    Parameters
    ----------
    meta : int array ``[N, len(META_NAMES)]`` (a single row is accepted too).
    size : image side in pixels (>= 4; 8 is very coarse, 32 the default).
    blur : Gaussian sigma in pixels applied after rendering (0 = none).
    occlude : part names (:data:`PART_NAMES`) hidden under a grey box that covers every
        value the part could take at that pose, so the box itself leaks nothing.
    chunk : rows composited at a time (default: a ~3 MB canvas, which stays in cache).
    visibility : ``{part: v}`` with ``v`` in ``[0, 1]``: the part's coverage is scaled by ``v``
        (rounded to the 0..256 alpha scale), so it is blended faintly into what lies below;
        ``v = 1`` draws it exactly as usual, ``v = 0`` not at all. Other parts are unchanged.

    Returns
    -------
    ``uint8 [N, size, size, 3]``; a pure function of its arguments.

    Examples
    --------
    >>> import numpy as np
    >>> from synthetic.robot.attributes import META_NAMES
    >>> render(np.zeros((2, len(META_NAMES)), dtype=np.int64), size=32).shape
    (2, 32, 32, 3)
    """
    meta = _check_meta(meta)
    if blur < 0:
        raise ValueError(f"blur must be >= 0, got {blur}")
    occ_layers = _parts_to_layers(occlude)
    opacity = _opacity_levels(visibility)
    size = int(size)
    masks = layer_masks(size)
    n = len(meta)
    chunk = chunk or max(16, min(512, 3_000_000 // (size * size * 6)))
    out = np.empty((n, size, size, 3), dtype=np.uint8)
    for start in range(0, n, chunk):
        order, groups = _shift_groups(meta[start:start + chunk], size)
        m = meta[start:start + chunk][order]  # rows sorted by translation
        rows_out = out[start:start + chunk]
        cols = colours(m)
        # channel-planar canvas: a layer's box is a long contiguous run per (row, channel)
        canvas = np.empty((len(m), 3, size, size), dtype=np.uint16)
        canvas[:] = cols["bg"][:, :, None, None]
        for i, (layer, lm) in enumerate(zip(LAYERS, masks)):
            if lm.h:
                var = layer.variant(m)
                band = canvas[:, :, lm.ys, lm.xs]
                if i in opacity:  # a faint part: coverage scaled by opacity/256, rounded
                    alpha = ((lm.alpha[var].astype(np.uint32) * opacity[i] + 128) >> 8).astype(np.uint16)
                    _blend(band, alpha, 256 - alpha, cols[layer.role])
                else:
                    _blend(band, lm.alpha[var], lm.inv[var], cols[layer.role])
        for i in occ_layers:
            layer, lm = LAYERS[i], masks[i]
            if lm.h:
                pose = layer.pose(m)
                band = canvas[:, :, lm.ys, lm.xs]
                _blend(band, lm.occluder[pose], lm.occluder_inv[pose], cols["occluder"])
        # translate: one slice per distinct offset, written back in the original row order
        for a, b, dy, dx in groups:
            dst = order[a:b]
            (ydst, ysrc), (xdst, xsrc) = _ranges(dy, size), _ranges(dx, size)
            for c in range(3):  # per channel: long contiguous reads (an interleaving copy is ~3x slower)
                rows_out[dst, ydst, xdst, c] = canvas[a:b, c, ysrc, xsrc]
            bg = cols["bg"][a:b, None, None, :]
            if dy > 0:
                rows_out[dst, :dy] = bg
            elif dy < 0:
                rows_out[dst, size + dy:] = bg
            if dx > 0:
                rows_out[dst, :, :dx] = bg
            elif dx < 0:
                rows_out[dst, :, size + dx:] = bg
    if blur > 0:
        out = _gaussian_blur(out, blur)
    return out


def _gaussian_blur(images: np.ndarray, sigma: float) -> np.ndarray:
    from scipy.ndimage import gaussian_filter

    x = gaussian_filter(images.astype(np.float32), sigma=(0.0, sigma, sigma, 0.0), mode="nearest")
    return np.clip(np.rint(x), 0, 255).astype(np.uint8)


def part_mask(meta: np.ndarray, part: str, size: int = 32, region: bool = False) -> np.ndarray:
    """Pixels covered by ``part`` in the rendered image, ``bool [N, size, size]``.

    The mask is the part's own footprint (any anti-aliased coverage), translated like
    the image, before other layers are drawn over it. With ``region=True`` it is the
    union over every value of the part's attribute at the row's pose: the pixels a
    counterfactual edit of that attribute may change (e.g. where knees would be
    drawn on a robot without knees).
    """
    meta = _check_meta(meta)
    size = int(size)
    masks = layer_masks(size)
    canvas = np.zeros((len(meta), size, size), dtype=bool)
    for i in _parts_to_layers([part]):
        layer, lm = LAYERS[i], masks[i]
        if lm.h:
            if region:
                u = lm.alpha.reshape(layer.n_poses, layer.n_attr, *lm.alpha.shape[1:]).any(axis=1)
                canvas[:, lm.ys, lm.xs] |= u[layer.pose(meta)]
            else:
                canvas[:, lm.ys, lm.xs] |= lm.alpha[layer.variant(meta)] > 0
    order, groups = _shift_groups(meta, size)
    canvas = canvas[order]
    out = np.zeros((len(meta), size, size), dtype=bool)
    for a, b, dy, dx in groups:
        (ydst, ysrc), (xdst, xsrc) = _ranges(dy, size), _ranges(dx, size)
        out[order[a:b], ydst, xdst] = canvas[a:b, ysrc, xsrc]
    return out


# --------------------------------------------------------------------------- PIL baseline
def render_reference(meta: np.ndarray, size: int = 32, occlude: Sequence[str] = ()) -> np.ndarray:
    """Plain per-image PIL rendering of the same robots (benchmark baseline; close to, not
    byte-identical with, :func:`render`): draw each robot in colour at the supersampled
    size, box-downsample, translate."""
    meta = _check_meta(meta)
    occ = {LAYERS[i].name for i in _parts_to_layers(occlude)}
    masks = layer_masks(int(size)) if occ else None
    f = supersample(size)
    hi = size * f
    cols = colours(meta)
    dx = pixel_shift(meta[:, META_INDEX["shift_x"]], size)
    dy = pixel_shift(meta[:, META_INDEX["shift_y"]], size)
    out = np.empty((len(meta), size, size, 3), dtype=np.uint8)
    for i, row in enumerate(meta):
        bg = tuple(int(v) for v in cols["bg"][i])
        img = Image.new("RGB", (hi, hi), bg)
        draw = ImageDraw.Draw(img)
        for layer in LAYERS:
            pose = tuple(int(row[META_INDEX[name]]) for name in layer.nuisance)
            at = int(row[META_INDEX[layer.attr]]) if layer.attr else 0
            layer.draw(Pen(draw, hi, tuple(int(v) for v in cols[layer.role][i])), pose, at)
        small = img.reduce(f)
        if occ:
            arr = np.array(small)
            for j, layer in enumerate(LAYERS):
                if layer.name in occ:
                    lm = masks[j]
                    pose = int(layer.pose(row[None])[0])
                    band = arr[lm.ys, lm.xs]
                    band[lm.occluder[pose] > 0] = cols["occluder"][i]
            small = Image.fromarray(arr)
        shifted = Image.new("RGB", (size, size), bg)
        shifted.paste(small, (int(dx[i]), int(dy[i])))
        out[i] = np.asarray(shifted)
    return out
