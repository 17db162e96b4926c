"""Anti-aliased coverage of fills and strokes, the way cairo's image backend computes it.

cairo rasterises a path on ``SUB_ROWS`` sub-scanlines per pixel row with exact horizontal
extents (its "tor" scan converter), so a pixel's coverage is the mean, over those sub-rows, of
the length of the covered spans inside it. Axis-aligned rectangles are filled with their exact
area. A stroke with round caps and joins is, per segment, a band of exactly half its width on
either side and cairo's pen (a regular polygon inscribed in the round end) at both ends; the
union over the segments is stroked. Coverage is quantised to 8 bits as cairo's is.

Everything is vectorised over sub-rows and spans; a mask is computed once per part, variant and
size (:mod:`synthetic.robot.reference.draw` caches them).
"""

from __future__ import annotations

import math

import numpy as np

from synthetic.robot.reference.geometry import TOLERANCE, Path

#: Sub-scanlines per pixel row (cairo's ``GRID_Y``).
SUB_ROWS = 15
_BIG = 1e9
_ROWS_PER_CHUNK = 32


def _sub_rows(y0: int, y1: int) -> np.ndarray:
    """Centres of the sub-rows of pixel rows ``y0 .. y1 - 1``."""
    return y0 + (np.arange((y1 - y0) * SUB_ROWS) + 0.5) / SUB_ROWS


def _polygon_spans(pts: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Even-odd spans ``[lo, hi)`` of the closed polygon ``pts`` on each sub-row ``ys``."""
    p, q = pts, np.roll(pts, -1, axis=0)
    ya, yb = np.minimum(p[:, 1], q[:, 1]), np.maximum(p[:, 1], q[:, 1])
    y = ys[:, None]
    hit = (y > ya) & (y <= yb)  # cairo rounds edge ends to the sub-row grid, ties upwards
    dy = q[:, 1] - p[:, 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        x = p[:, 0] + (y - p[:, 1]) * (q[:, 0] - p[:, 0]) / np.where(dy == 0, 1.0, dy)
    xs = np.sort(np.where(hit, x, _BIG), axis=1)
    if xs.shape[1] % 2:
        xs = np.concatenate([xs, np.full((len(ys), 1), _BIG)], axis=1)
    return xs[:, 0::2], xs[:, 1::2]


def _pen(h: float) -> np.ndarray:
    """cairo's pen for a stroke ``2 h`` wide: a regular polygon inscribed in the circle of radius
    ``h``, as many vertices as its tolerance needs (``_cairo_pen_vertices_needed``), in fixed point."""
    if TOLERANCE >= 4 * h:
        n = 1
    elif TOLERANCE >= h:
        n = 4
    else:
        n = max(4, math.ceil(2 * math.pi / math.acos(1 - TOLERANCE / h)))
        n += n % 2
    t = 2 * math.pi * np.arange(n) / n
    return np.round(np.stack([h * np.cos(t), h * np.sin(t)], axis=1) * 256.0) / 256.0


def _convex_spans(poly: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``[lo, hi]`` of convex polygons ``poly [K, V, 2]`` on each sub-row (empty: ``lo > hi``)."""
    a, b = poly, np.roll(poly, -1, axis=1)
    ya, yb = np.minimum(a[..., 1], b[..., 1]), np.maximum(a[..., 1], b[..., 1])
    yy = ys[:, None, None]
    hit = (yy > ya) & (yy <= yb)  # cairo rounds edge ends to the sub-row grid, ties upwards
    dy = b[..., 1] - a[..., 1]
    x = a[..., 0] + (yy - a[..., 1]) * (b[..., 0] - a[..., 0]) / np.where(dy == 0, 1.0, dy)
    return np.where(hit, x, _BIG).min(axis=2), np.where(hit, x, -_BIG).max(axis=2)


def _capsule_spans(p: np.ndarray, q: np.ndarray, h: float, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Spans of each segment ``p[k]-q[k]`` stroked ``2 h`` wide with round caps and joins, as
    cairo strokes it: a band of exact half-width ``h`` and its pen polygon at both ends."""
    pen = _pen(h)
    lo = np.full((len(ys), len(p)), _BIG)
    hi = np.full((len(ys), len(p)), -_BIG)
    if len(pen) > 2:
        for c in (p, q):  # the round ends
            clo, chi = _convex_spans(c[:, None, :] + pen[None], ys)
            lo, hi = np.minimum(lo, clo), np.maximum(hi, chi)
    d = q - p
    length = np.hypot(d[:, 0], d[:, 1])
    keep = length > 0
    if keep.any():  # the band: a rectangle around each segment
        pk, dk, lk = p[keep], d[keep], length[keep]
        n = np.stack([-dk[:, 1], dk[:, 0]], axis=1) / lk[:, None] * h
        blo, bhi = _convex_spans(np.stack([pk + n, pk + dk + n, pk + dk - n, pk - n], axis=1), ys)
        lo[:, keep] = np.minimum(lo[:, keep], blo)
        hi[:, keep] = np.maximum(hi[:, keep], bhi)
    return lo, hi


def _span_coverage(lo: np.ndarray, hi: np.ndarray, x0: int, x1: int) -> np.ndarray:
    """Per sub-row, the covered length of pixel columns ``x0 .. x1 - 1`` by the union of the spans."""
    order = np.argsort(lo, axis=1)
    lo, hi = np.take_along_axis(lo, order, 1), np.take_along_axis(hi, order, 1)
    reach = np.maximum.accumulate(hi, axis=1)
    prev = np.concatenate([np.full((len(lo), 1), -_BIG), reach[:, :-1]], axis=1)
    start = np.clip(np.maximum(lo, prev), x0, x1) - x0
    end = np.clip(np.maximum(hi, np.maximum(lo, prev)), x0, x1) - x0  # disjoint pieces, same union
    width = x1 - x0
    diff = np.zeros((len(lo), width + 2))
    rows = np.broadcast_to(np.arange(len(lo))[:, None], start.shape)
    for edge, sign in ((start, 1.0), (end, -1.0)):  # each piece: +1 from start, -1 from end, split per column
        cell = np.floor(edge).astype(np.int64)
        frac = edge - cell
        np.add.at(diff, (rows, cell), sign * (1.0 - frac))
        np.add.at(diff, (rows, cell + 1), sign * frac)
    return np.cumsum(diff, axis=1)[:, :width]


def _quantise(cov: np.ndarray) -> np.ndarray:
    return np.rint(np.clip(cov, 0.0, 1.0) * 255.0).astype(np.uint8)


def _bounds(path: Path, pad: float, size: int) -> tuple[int, int, int, int]:
    lo = np.floor(path.points.min(axis=0) - pad).astype(int)
    hi = np.ceil(path.points.max(axis=0) + pad).astype(int) + 1
    return max(lo[1], 0), min(hi[1], size), max(lo[0], 0), min(hi[0], size)


def coverage(path: Path, width: float, size: int) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """``uint8`` coverage (0..255) of filling (``width`` 0) or stroking ``path`` on a
    ``size x size`` canvas, cropped to its box ``(y0, y1, x0, x1)``."""
    y0, y1, x0, x1 = _bounds(path, width / 2 + 1, size)
    if y1 <= y0 or x1 <= x0:
        return np.zeros((0, 0), dtype=np.uint8), (0, 0, 0, 0)
    if width == 0 and path.rect:
        (ax, ay), (bx, by) = path.points
        cols = np.clip(np.minimum(np.arange(x0, x1) + 1, bx) - np.maximum(np.arange(x0, x1), ax), 0, None)
        rows = np.clip(np.minimum(np.arange(y0, y1) + 1, by) - np.maximum(np.arange(y0, y1), ay), 0, None)
        return _quantise(rows[:, None] * cols[None, :]), (y0, y1, x0, x1)
    pts = np.round(path.points * 256.0) / 256.0  # cairo's 24.8 fixed-point device coordinates
    p, q = (pts, np.roll(pts, -1, axis=0)) if path.closed else (pts[:-1], pts[1:])
    rows = []
    for a in range(y0, y1, _ROWS_PER_CHUNK):
        ys = _sub_rows(a, min(a + _ROWS_PER_CHUNK, y1))
        lo, hi = _polygon_spans(pts, ys) if width == 0 else _capsule_spans(p, q, width / 2, ys)
        rows.append(_span_coverage(lo, hi, x0, x1).reshape(-1, SUB_ROWS, x1 - x0).mean(axis=1))
    return _quantise(np.concatenate(rows)), (y0, y1, x0, x1)
