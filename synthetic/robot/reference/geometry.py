"""The robot of ``concept-benchmark`` 0.4.1 as paths: a port of its ``synthetic/robot/draw.py``.

0.4.1 (MIT licence, Copyright (c) its authors) draws every robot with pero on a cairo canvas:
fixed pose and position, ``r = size / 12``, each part filled in the left or right colour of a
two-colour scheme and outlined in black, 1 px wide with round caps and joins, on white. This
module writes the same geometry as plain paths in pixel coordinates (y down), part by part and in
its drawing order; :mod:`synthetic.robot.reference.raster` turns them into coverage masks.

Below 120 px the reference draws the knee and elbow dots (0.1 r wide) on *every* robot, "so the
small images stay ambiguous": there the ``knees`` / ``elbows`` attributes change no pixel.

Every part is a list of :class:`Step` per variant; a step is one fill or one stroke, in the
reference's order (a glyph is filled, then stroked). Variants are indexed by the project's
attribute values (``synthetic.robot.attributes``): hand and foot sub-types in 0.4's order
(``HAND_NAMES``, ``FOOT_NAMES``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: 0.4.1's hand sub-types, in its order (= the project's ``hand_subtype`` index).
HAND_NAMES = ("round_circle", "round_oval", "round_oval2", "edgy_triangle", "edgy_square", "edgy_trapezoid")
#: 0.4.1's foot sub-types, in its order (= the project's ``foot_subtype`` index); 0-4 flat, 5-9 pointy.
FOOT_NAMES = ("flat_trapezoid", "flat_rounded", "flat_square", "flat_5sided", "flat_lshaped",
              "pointy_trapezoid", "pointy_rounded", "pointy_square", "pointy_3sided", "pointy_4sided")  # fmt: skip
#: Sizes from which the knee and elbow dots are drawn only on robots that have them.
JOINTS_SHOWN_FROM = 120

#: Fill colours: the scheme's left / right colour, black, white.
LEFT, RIGHT, BLACK, WHITE = 0, 1, 2, 3


@dataclass(frozen=True)
class Path:
    """A path in pixels. ``closed``: the stroke returns to the start (a fill always closes).
    ``rect``: an axis-aligned rectangle ``points = [[x, y], [x + w, y + h]]`` (filled exactly)."""

    points: np.ndarray
    closed: bool = True
    rect: bool = False


@dataclass(frozen=True)
class Step:
    """One fill (``colour`` LEFT/RIGHT/BLACK/WHITE) or one black stroke ``width`` px wide."""

    path: Path
    colour: int = BLACK
    width: float = 0.0  # 0: a fill

    @property
    def is_stroke(self) -> bool:
        return self.width > 0


def _poly(pts) -> Path:
    return Path(np.asarray(pts, dtype=np.float64), closed=True)


def _line(x1: float, y1: float, x2: float, y2: float) -> Path:
    return Path(np.array([[x1, y1], [x2, y2]], dtype=np.float64), closed=False)


def _rect(x: float, y: float, w: float, h: float) -> Path:
    return Path(np.array([[x, y], [x + w, y + h]], dtype=np.float64), closed=True, rect=True)


def _rect_outline(x: float, y: float, w: float, h: float) -> Path:
    return _poly([(x, y), (x + w, y), (x + w, y + h), (x, y + h)])


#: cairo's default tolerance (px): how far its polygon for a curve may stray from the curve.
TOLERANCE = 0.1
#: cairo's table (``_arc_max_angle_for_tolerance_normalized``): arc angle -> error of one Bezier
#: segment, relative to the radius.
_ARC_ERRORS = ((math.pi / 1, 0.0185185185185185036127), (math.pi / 2, 0.000272567143730179811158),
               (math.pi / 3, 2.38647043651461047433e-05), (math.pi / 4, 4.2455377443222443279e-06),
               (math.pi / 5, 1.11281001494389081528e-06), (math.pi / 6, 3.72662000942734705475e-07),
               (math.pi / 7, 1.47783685574284411325e-07), (math.pi / 8, 6.63240432022601149057e-08),
               (math.pi / 9, 3.2715520137536980553e-08), (math.pi / 10, 1.73863223499021216974e-08),
               (math.pi / 11, 9.81410988043554039085e-09))  # fmt: skip


def _fixed(x: float, y: float) -> tuple[int, int]:
    """A point in cairo's 24.8 fixed-point device coordinates."""
    return round(x * 256), round(y * 256)


def _half_step(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    return a[0] + ((b[0] - a[0]) >> 1), a[1] + ((b[1] - a[1]) >> 1)


def _spline_error2(a, b, c, d) -> float:
    """cairo's ``_cairo_spline_error_squared``: how far the control points stray from chord ``a-d``."""
    out = []
    dx, dy = (d[0] - a[0]) / 256, (d[1] - a[1]) / 256
    for p in (b, c):
        px, py = (p[0] - a[0]) / 256, (p[1] - a[1]) / 256
        if a != d:
            v = dx * dx + dy * dy
            u = px * dx + py * dy
            if u >= v:
                px, py = px - dx, py - dy
            elif u > 0:
                px, py = px - u / v * dx, py - u / v * dy
        out.append(px * px + py * py)
    return max(out)


def _flatten(a, b, c, d, tol2: float, out: list) -> None:
    """cairo's ``_cairo_spline_decompose_into``: halve the Bezier until flat, keep each piece's start."""
    if _spline_error2(a, b, c, d) < tol2:
        if out[-1] != a:
            out.append(a)
        return
    ab, bc, cd = _half_step(a, b), _half_step(b, c), _half_step(c, d)
    abbc, bccd = _half_step(ab, bc), _half_step(bc, cd)
    mid = _half_step(abbc, bccd)
    _flatten(a, ab, abbc, mid, tol2, out)
    _flatten(mid, bccd, cd, d, tol2, out)


def _arc_points(cx: float, cy: float, radius: float, a0: float, a1: float, sx: float = 1.0) -> np.ndarray:
    """The polygon cairo fills and strokes for ``arc(cx / sx, cy, radius, a0, a1)`` under the
    transformation ``scale(sx, 1)`` (angles in radians, y down): ``a1`` is raised by whole turns
    until >= ``a0``; arcs over pi are halved; each piece becomes Bezier segments (as many as the
    tolerance needs), flattened in fixed point exactly as cairo does."""
    if a1 < a0:
        a1 = math.fmod(a1 - a0, 2 * math.pi)
        a1 = a1 + 2 * math.pi if a1 < 0 else a1
        a1 += a0
    ux = cx / sx
    dev = lambda x, y: _fixed(sx * x, y)  # noqa: E731
    pts = [dev(ux + radius * math.cos(a0), cy + radius * math.sin(a0))]
    tol = TOLERANCE / (radius * max(abs(sx), 1.0))
    max_angle = next((angle for angle, err in _ARC_ERRORS if err < tol), math.pi / 11)

    def piece(lo: float, hi: float) -> None:
        if hi - lo > math.pi:
            mid = lo + (hi - lo) / 2.0
            piece(lo, mid)
            piece(mid, hi)
            return
        n = math.ceil(abs(hi - lo) / max_angle)
        step = (hi - lo) / n
        for i in range(n):
            s, e = lo + i * step, (lo + (i + 1) * step if i < n - 1 else hi)
            h = 4.0 / 3.0 * math.tan((e - s) / 4.0)
            rs, rc, es, ec = radius * math.sin(s), radius * math.cos(s), radius * math.sin(e), radius * math.cos(e)
            knots = (pts[-1], dev(ux + rc - h * rs, cy + rs + h * rc), dev(ux + ec + h * es, cy + es - h * ec), dev(ux + ec, cy + es))
            _flatten(*knots, TOLERANCE**2, pts)
            if pts[-1] != knots[3]:
                pts.append(knots[3])

    if a1 > a0:
        piece(a0, a1)
    return np.asarray(pts, dtype=np.float64) / 256.0


def _ellipse(cx: float, cy: float, w: float, h: float) -> Path | None:
    """pero's ``Ellipse`` (centre, full width and height): cairo's circle of radius ``h / 2``
    scaled by ``w / h`` in x; nothing for a zero size."""
    if not w or not h:
        return None
    return Path(_arc_points(cx, cy, 0.5 * h, 0.0, 2 * math.pi, sx=w / h), closed=False)


def _glyph(path: Path | None, colour: int | None) -> list[Step]:
    """A filled and outlined glyph (pero: fill, then a 1 px black stroke)."""
    if path is None:
        return []
    return ([] if colour is None else [Step(path, colour)]) + [Step(path, BLACK, 1.0)]


def _half(cx: float, cy: float, radius: float, a0: float, a1: float, colour: int) -> list[Step]:
    """A ``pero.Arc`` half disc: filled with the chord closing it, only the arc stroked."""
    path = Path(_arc_points(cx, cy, radius, math.radians(a0), math.radians(a1)), closed=False)
    return [Step(path, colour), Step(path, BLACK, 1.0)]


class Frame:
    """Anchors and lengths of a robot ``size`` px wide (0.4.1's ``draw_robot``)."""

    def __init__(self, size: int):
        self.size = size
        r = self.r = size / 12.0
        self.x_mid = 0.5 * size
        self.y_face = 2 * r
        self.head = 1.75 * r  # head width = height
        self.y_body = self.y_face + self.head
        self.body_w, self.body_h = 3.5 * r, 4.0 * r
        self.x_left, self.x_right = self.x_mid - 0.5 * self.body_w, self.x_mid + 0.5 * self.body_w
        self.y_arm = self.y_body + 0.33 * self.body_h
        self.arm = 0.75 * self.body_w
        self.hand = 0.6 * r
        self.y_hip = self.y_body + self.body_h
        gap = 1.0 * r
        self.foot_w = self.foot_h = (self.body_w - 2.0 * gap) / 2.0
        self.leg_left = self.x_mid - 0.5 * gap - 0.5 * self.foot_w
        self.leg_right = self.x_mid + 0.5 * gap + 0.5 * self.foot_w
        self.leg_h = 0.75 * (self.body_h - self.foot_h)
        self.y_feet = self.y_hip + self.leg_h
        self.joint = 0.1 * r


def arms(f: Frame) -> list[Step]:
    return [Step(_line(f.x_left, f.y_arm, f.x_left - f.arm, f.y_arm), BLACK, 1.0),
            Step(_line(f.x_right, f.y_arm, f.x_right + f.arm, f.y_arm), BLACK, 1.0)]  # fmt: skip


def elbows(f: Frame, present: int) -> list[Step]:
    size = f.joint if f.size < JOINTS_SHOWN_FROM or present else 0.0
    return (_glyph(_ellipse(f.x_left - 0.5 * f.arm, f.y_arm, size, size), LEFT)
            + _glyph(_ellipse(f.x_right + 0.5 * f.arm, f.y_arm, size, size), RIGHT))  # fmt: skip


def _hand_path(f: Frame, x: float, side: int, subtype: int) -> Path:
    s, y = f.hand, f.y_arm
    name = HAND_NAMES[subtype]
    if name == "round_circle":
        return _ellipse(x, y, s, s)
    if name == "round_oval":
        return _ellipse(x, y, 1.5 * s, s)
    if name == "round_oval2":
        return _ellipse(x, y, s, 1.5 * s)
    if name == "edgy_triangle":
        return _poly([(x, y - s / 2), (x, y + s / 2), (x + side * s, y)])
    if name == "edgy_square":
        return _rect(x - s / 2, y - s / 2, s, s)
    return _poly([(x, y - s / 4), (x, y + s / 4), (x + side * s, y + s / 2), (x + side * s, y - s / 2)])


def hands(f: Frame, subtype: int) -> list[Step]:
    left, right = _hand_path(f, f.x_left - f.arm, -1, subtype), _hand_path(f, f.x_right + f.arm, 1, subtype)
    out = []
    for path, colour in ((left, LEFT), (right, RIGHT)):
        out.append(Step(path, colour))
        out.append(Step(_rect_outline(*path.points[0], *(path.points[1] - path.points[0])) if path.rect else path, BLACK, 1.0))
    return out


def legs(f: Frame) -> list[Step]:
    y1, y2 = 0.9 * f.y_hip, f.y_hip + f.leg_h
    return [Step(_line(f.leg_left, y1, f.leg_left, y2), BLACK, 1.0), Step(_line(f.leg_right, y1, f.leg_right, y2), BLACK, 1.0)]


def knees(f: Frame, present: int) -> list[Step]:
    size = f.joint if f.size < JOINTS_SHOWN_FROM or present else 0.0
    y = f.y_hip + 0.5 * f.leg_h
    return _glyph(_ellipse(f.leg_left, y, size, size), LEFT) + _glyph(_ellipse(f.leg_right, y, size, size), RIGHT)


def body(f: Frame, round_: int) -> list[Step]:
    if round_:
        cx, cy, radius = f.x_mid, f.y_body + 0.5 * f.body_h, 0.57 * f.body_w
        return _half(cx, cy, radius, 90, -90, LEFT) + _half(cx, cy, radius, -90, 90, RIGHT)
    half = 0.5 * f.body_w
    return [Step(_rect(f.x_mid - half, f.y_body, half, f.body_h), LEFT), Step(_rect(f.x_mid, f.y_body, half, f.body_h), RIGHT),
            Step(_rect_outline(f.x_mid - half, f.y_body, f.body_w, f.body_h), BLACK, 1.0)]  # fmt: skip


def foot_polygons(name: str, xl: float, xr: float, y: float, w: float, h: float) -> tuple[np.ndarray, np.ndarray]:
    """0.4.1's ``foot_polygons``: the left and right foot of one sub-type, from its table of
    ``(u, v)`` offsets (``x = centre + u * w``, ``y = top + v * h``; L-shaped feet are mirrored)."""
    uv = np.asarray(FOOT_UV[name], dtype=np.float64)
    left = np.stack([xl + uv[:, 0] * w, y + uv[:, 1] * h], axis=1)
    mirror = -1.0 if name == "flat_lshaped" else 1.0
    right = np.stack([xr + mirror * uv[:, 0] * w, y + uv[:, 1] * h], axis=1)
    return left, right


#: Foot outlines as ``(u, v)``: 0.4.1's ``foot_polygons`` coefficients, vertex for vertex.
FOOT_UV: dict[str, list[tuple[float, float]]] = {
    "flat_trapezoid": [(-0.45, 0.1), (-0.3, 0), (0, 0), (0.3, 0), (0.45, 0.1), (0.15, 1), (0.03, 1), (-0.03, 1), (-0.15, 1)],
    "pointy_trapezoid": [(-0.45, 0.1), (-0.3, 0), (0, 0), (0.3, 0), (0.45, 0.1), (0.18, 0.88), (0, 1), (-0.18, 0.88)],
    "flat_square": [(-0.5, 0.15), (-0.4, 0.05), (-0.2, 0), (0.2, 0), (0.4, 0.05), (0.5, 0.15), (0.5, 0.75), (0.2, 0.92),
                    (0.15, 1), (0.03, 1), (-0.03, 1), (-0.15, 1), (-0.2, 0.92), (-0.5, 0.75)],
    "pointy_square": [(-0.5, 0.15), (-0.4, 0.05), (-0.2, 0), (0.2, 0), (0.4, 0.05), (0.5, 0.15), (0.5, 0.75), (0.2, 0.92),
                      (0, 1), (-0.2, 0.92), (-0.5, 0.75)],
    "flat_rounded": [(-0.5, 0.5), (-0.35, 0.15), (0, 0), (0.35, 0.15), (0.5, 0.5), (0.18, 0.92), (0.15, 1), (0.03, 1),
                     (-0.03, 1), (-0.15, 1), (-0.18, 0.92)],
    "pointy_rounded": [(-0.5, 0.3), (-0.4, 0.1), (-0.2, 0), (0, 0), (0.2, 0), (0.4, 0.1), (0.5, 0.3), (0.18, 0.88), (0, 1),
                       (-0.18, 0.88)],
    "flat_5sided": [(0, 0), (-0.5, 0.3), (-0.5, 1), (0.5, 1), (0.5, 0.3)],
    "flat_lshaped": [(-0.35, 0), (-0.35, 0.35), (-1.0, 0.35), (-1.0, 1.0), (0.35, 1.0), (0.35, 0)],
    "pointy_3sided": [(-0.5, 0), (0.5, 0), (0, 1)],
    "pointy_4sided": [(0, 0), (-0.5, 0.5), (0, 1), (0.5, 0.5)],
}  # fmt: skip


def feet(f: Frame, subtype: int) -> list[Step]:
    left, right = foot_polygons(FOOT_NAMES[subtype], f.leg_left, f.leg_right, f.y_feet, f.foot_w, f.foot_h)
    return _glyph(_poly(left), LEFT) + _glyph(_poly(right), RIGHT)


def antennae(f: Frame, variant: int) -> list[Step]:
    """Variant 0: none; 1: with a round head (1.5 r long); 2: with a square head (1.75 r)."""
    if not variant:
        return []
    length = 1.5 * f.r if variant == 1 else 1.75 * f.r
    width = float(max(1, int(f.r * 0.08)))
    x, y = f.x_mid, f.y_face + f.head / 2
    out = []
    for angle in (240.0, -60.0):
        t = math.radians(angle)
        out.append(Step(_line(x, y, x + length * math.cos(t), y + length * math.sin(t)), BLACK, width))
    return out


def head(f: Frame, round_: int) -> list[Step]:
    if round_:
        cx, cy, radius = f.x_mid, f.y_face + 0.9 * f.r, 0.5 * f.head
        return _half(cx, cy, radius, 90, 270, LEFT) + _half(cx, cy, radius, -90, 90, RIGHT)
    half = 0.5 * f.head
    return [Step(_rect(f.x_mid - half, f.y_face, half, f.head), LEFT), Step(_rect(f.x_mid, f.y_face, half, f.head), RIGHT),
            Step(_rect_outline(f.x_mid - half, f.y_face, f.head, f.head), BLACK, 1.0)]  # fmt: skip


def eyes(f: Frame) -> list[Step]:
    y, s = f.y_face + 3.0 / 8.0 * f.head, 0.2 * f.r
    return _glyph(_ellipse(f.x_mid - 0.3 * f.r, y, s, s), BLACK) + _glyph(_ellipse(f.x_mid + 0.3 * f.r, y, s, s), BLACK)


def ears(f: Frame, triangle: int) -> list[Step]:
    s, y = 0.4 * f.r, f.y_face + f.head / 2
    xl, xr = f.x_mid - 0.5 * f.head, f.x_mid + 0.5 * f.head
    if triangle:
        left = _poly([(xl, y - s / 2), (xl, y + s / 2), (xl - s, y)])
        right = _poly([(xr, y - s / 2), (xr, y + s / 2), (xr + s, y)])
        return _glyph(left, LEFT) + _glyph(right, RIGHT)
    return [Step(_rect(xl - s, y - s / 2, s, s), LEFT), Step(_rect_outline(xl - s, y - s / 2, s, s), BLACK, 1.0),
            Step(_rect(xr, y - s / 2, s, s), RIGHT), Step(_rect_outline(xr, y - s / 2, s, s), BLACK, 1.0)]  # fmt: skip


def mouth(f: Frame, closed: int) -> list[Step]:
    w = 0.4 * f.head
    x, y = f.x_mid - w / 2, f.y_face + 5.0 / 8.0 * f.head
    h = 0.05 * f.r if closed else 0.2 * f.r
    out = [Step(_rect(x, y, w, h), BLACK if closed else WHITE), Step(_rect_outline(x, y, w, h), BLACK, 1.0)]
    if not closed:
        out += [Step(_line(x + i * w / 5, y, x + i * w / 5, y + h), BLACK, 1.0) for i in range(1, 5)]
    return out
