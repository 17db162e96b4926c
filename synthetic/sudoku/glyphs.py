"""Banks of pre-rendered digit tiles: printed (Pillow's bundled font) and synthetic handwriting.

Boards are assembled from these banks by a numpy gather (:mod:`synthetic.sudoku.render`),
so all per-glyph drawing happens once per ``(style, cell size, variants, seed, part)``. A dataset
draws one bank per split (``part`` = the split's code, :data:`synthetic.base.SPLITS`), so no
validation, calibration or test glyph is a training glyph; ``part=None`` is the one bank a
``glyph_bank: shared`` dataset (a speed knob) gives every split.

Handwritten digits are stroke skeletons (several allographs per digit: a 1 with
or without a base, open or closed 4, 7 with or without a bar...) pushed
through a random affine map (rotation, slant, anisotropic scale, shift), a
smooth random "elastic" displacement field and per-stroke offsets, then drawn
with a random pen width and ink at 4x resolution and box-downsampled. No fonts
or datasets are downloaded.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import PIL
from PIL import Image, ImageDraw, ImageFont

from synthetic.cache import cached_block

#: Bump when the drawing of a glyph changes (the banks cached on disk then stop matching).
GLYPH_VERSION = 1

SUPERSAMPLE = 4
#: Pencil-mark slots: the 3x3 sub-cells of a cell except the centre (main digit).
PENCIL_SLOTS: tuple[tuple[int, int], ...] = ((0, 0), (0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1), (2, 2))


# ----------------------------------------------------------------- strokes
def _arc(cx, cy, rx, ry, a0, a1, n=28):
    """Ellipse arc from angle ``a0`` to ``a1`` (degrees, counter-clockwise positive, y down)."""
    t = np.radians(np.linspace(a0, a1, n))
    return np.stack([cx + rx * np.cos(t), cy - ry * np.sin(t)], axis=1)


def _seg(p0, p1, n=10):
    t = np.linspace(0.0, 1.0, n)[:, None]
    return (1 - t) * np.asarray(p0, float) + t * np.asarray(p1, float)


def _bez(p0, p1, p2, n=18):
    t = np.linspace(0.0, 1.0, n)[:, None]
    p0, p1, p2 = (np.asarray(p, float) for p in (p0, p1, p2))
    return (1 - t) ** 2 * p0 + 2 * (1 - t) * t * p1 + t**2 * p2


def _join(*parts):
    return np.concatenate(parts, axis=0)


def _eight_single():
    t = np.linspace(0, 2 * np.pi, 64)
    return np.stack([0.5 + 0.23 * np.sin(2 * t) * np.where(np.cos(t) > 0, 0.85, 1.0), 0.5 - 0.45 * np.cos(t)], 1)


# Each digit: list of allographs; an allograph is a list of strokes (polylines in the
# unit square, x right, y down; the glyph spans roughly x 0.2-0.8, y 0.05-0.95).
STROKES: dict[int, list[list[np.ndarray]]] = {
    1: [
        [_join(_seg((0.32, 0.24), (0.55, 0.05)), _seg((0.55, 0.05), (0.55, 0.95)))],
        [_join(_seg((0.32, 0.22), (0.54, 0.05)), _seg((0.54, 0.05), (0.54, 0.95))), _seg((0.34, 0.95), (0.74, 0.95))],
        [_seg((0.52, 0.05), (0.5, 0.95))],
    ],
    2: [
        [_join(_arc(0.5, 0.3, 0.26, 0.24, 160, -30), _bez((0.72, 0.42), (0.45, 0.68), (0.2, 0.95)),
               _seg((0.2, 0.95), (0.82, 0.95)))],
        [_join(_arc(0.5, 0.28, 0.25, 0.22, 150, -10), _seg((0.75, 0.32), (0.2, 0.94)),
               _seg((0.2, 0.94), (0.8, 0.92)))],
    ],
    3: [
        [_join(_arc(0.5, 0.28, 0.25, 0.21, 150, -95)), _arc(0.48, 0.7, 0.28, 0.25, 95, -150)],
        [_join(_seg((0.25, 0.06), (0.75, 0.06)), _seg((0.75, 0.06), (0.45, 0.42)),
               _arc(0.5, 0.68, 0.28, 0.26, 110, -150))],
    ],
    4: [
        [_join(_seg((0.62, 0.05), (0.17, 0.66)), _seg((0.17, 0.66), (0.85, 0.66))), _seg((0.62, 0.05), (0.62, 0.95))],
        [_join(_seg((0.28, 0.05), (0.22, 0.6)), _seg((0.22, 0.6), (0.82, 0.6))), _seg((0.66, 0.22), (0.66, 0.95))],
    ],
    5: [
        [_join(_seg((0.76, 0.06), (0.34, 0.06)), _seg((0.34, 0.06), (0.29, 0.46)),
               _arc(0.5, 0.68, 0.27, 0.26, 140, -145))],
        [_join(_seg((0.34, 0.07), (0.29, 0.46)), _arc(0.5, 0.68, 0.27, 0.26, 140, -145)),
         _seg((0.34, 0.06), (0.78, 0.05))],
    ],
    6: [
        [_join(_bez((0.7, 0.06), (0.24, 0.2), (0.24, 0.68)), _arc(0.5, 0.7, 0.26, 0.24, 180, -175))],
        [_join(_seg((0.66, 0.05), (0.27, 0.62)), _arc(0.5, 0.71, 0.25, 0.23, 200, -160))],
    ],
    7: [
        [_join(_seg((0.2, 0.07), (0.8, 0.07)), _seg((0.8, 0.07), (0.42, 0.95)))],
        [_join(_seg((0.2, 0.07), (0.8, 0.07)), _seg((0.8, 0.07), (0.42, 0.95))), _seg((0.38, 0.5), (0.76, 0.5))],
        [_join(_seg((0.2, 0.18), (0.2, 0.07)), _seg((0.2, 0.07), (0.8, 0.07)), _bez((0.8, 0.07), (0.5, 0.4), (0.46, 0.95)))],
    ],
    8: [
        [_arc(0.5, 0.28, 0.21, 0.2, 90, 450), _arc(0.5, 0.7, 0.27, 0.25, 90, 450)],
        [_eight_single()],
    ],
    9: [
        [_join(_arc(0.5, 0.3, 0.24, 0.22, 10, 370), _seg((0.74, 0.26), (0.7, 0.95)))],
        [_join(_arc(0.5, 0.3, 0.24, 0.22, 10, 370), _bez((0.74, 0.26), (0.76, 0.85), (0.4, 0.95)))],
    ],
}


# ----------------------------------------------------------------- drawing
def _jitter_strokes(strokes, rng: np.random.Generator, amount: float = 1.0):
    """Random affine + smooth elastic displacement + per-stroke offset (unit-square coords)."""
    rot = np.radians(rng.uniform(-12, 12) * amount)
    shear = rng.uniform(-0.3, 0.15) * amount  # mostly forward slant
    sx, sy = rng.uniform(0.8, 1.15), rng.uniform(0.85, 1.08)
    a = np.array([[np.cos(rot), -np.sin(rot)], [np.sin(rot), np.cos(rot)]]) @ np.array([[sx, shear], [0, sy]])
    shift = rng.uniform(-0.05, 0.05, size=2) * amount
    waves = [(rng.normal(size=2) * 4.0, rng.uniform(0, 2 * np.pi, size=2), rng.uniform(0.01, 0.035, size=2))
             for _ in range(3)]
    out = []
    for s in strokes:
        p = s - 0.5
        p = p @ a.T
        for w, ph, amp in waves:  # elastic: a few random low-frequency sinusoids
            arg = p @ w
            p = p + amount * amp * np.sin(arg[:, None] + ph)
        out.append(p + 0.5 + shift + rng.uniform(-0.02, 0.02, size=2) * amount)
    return out


def _draw_strokes(strokes, size: int, box: tuple[float, float, float, float], width: float, ink: int):
    """Draw unit-square strokes into ``box=(x0, y0, w, h)`` of a ``size``-px tile -> coverage-blended L tile."""
    s = SUPERSAMPLE
    im = Image.new("L", (size * s, size * s), 0)
    d = ImageDraw.Draw(im)
    x0, y0, bw, bh = box
    wpx = max(1.0, width * s)
    r = wpx / 2
    for st in strokes:
        pts = np.stack([(x0 + st[:, 0] * bw) * s, (y0 + st[:, 1] * bh) * s], 1)
        flat = [tuple(map(float, q)) for q in pts]
        d.line(flat, fill=255, width=int(round(wpx)), joint="curve")
        for q in (flat[0], flat[-1]):  # round caps
            d.ellipse([q[0] - r, q[1] - r, q[0] + r, q[1] + r], fill=255)
    cov = np.asarray(im.resize((size, size), Image.Resampling.BOX), dtype=np.float32) / 255.0
    return _blend(cov, ink)


def _blend(cov: np.ndarray, ink: int) -> np.ndarray:
    return np.round(255.0 - cov * (255.0 - ink)).astype(np.uint8)


def _draw_text(digit: int, size: int, center: tuple[float, float], font_px: float, ink: int, bold: bool):
    s = SUPERSAMPLE
    font = ImageFont.load_default(size=max(1, int(round(font_px * s))))
    im = Image.new("L", (size * s, size * s), 0)
    d = ImageDraw.Draw(im)
    d.text((center[0] * s, center[1] * s), str(digit), font=font, fill=255, anchor="mm",
           stroke_width=int(bold) * max(1, s // 2), stroke_fill=255)
    cov = np.asarray(im.resize((size, size), Image.Resampling.BOX), dtype=np.float32) / 255.0
    return _blend(cov, ink)


def _main_box(cs: int) -> tuple[float, float, float, float]:
    h = 0.62 * cs
    return ((cs - h) / 2, (cs - h) / 2, h, h)


def _slot_box(cs: int, slot: int) -> tuple[float, float, float, float]:
    i, j = PENCIL_SLOTS[slot]
    m = max(1.0, 0.06 * cs)  # keep clear of the grid lines
    sub = (cs - 2 * m) / 3.0
    h = 0.8 * sub
    return (m + j * sub + (sub - h) / 2, m + i * sub + (sub - h) / 2, h, h)


def handwritten_tile(digit: int, cs: int, rng: np.random.Generator, slot: int | None = None) -> np.ndarray:
    """One random handwritten tile ``uint8 [cs,cs]`` (``slot`` set: a small pencil mark there)."""
    allos = STROKES[digit]
    strokes = _jitter_strokes(allos[rng.integers(len(allos))], rng, amount=1.0 if slot is None else 0.7)
    if slot is None:
        box, width, ink = _main_box(cs), cs * rng.uniform(0.06, 0.1), int(rng.integers(0, 60))
    else:
        box, width, ink = _slot_box(cs, slot), max(0.8, cs * rng.uniform(0.03, 0.045)), int(rng.integers(80, 150))
    return _draw_strokes(strokes, cs, box, width, ink)


def printed_tile(digit: int, cs: int, rng: np.random.Generator, slot: int | None = None) -> np.ndarray:
    """One printed tile ``uint8 [cs,cs]`` with small random size / position / weight changes."""
    if slot is None:
        x0, y0, bw, bh = _main_box(cs)
        ink, bold = int(rng.integers(0, 40)), bool(rng.random() < 0.3)
        jit = 0.03 * cs
        size = bh * 1.3 * rng.uniform(0.93, 1.07)
    else:
        x0, y0, bw, bh = _slot_box(cs, slot)
        ink, bold = int(rng.integers(80, 150)), False
        jit = 0.01 * cs
        size = bh * 1.2 * rng.uniform(0.95, 1.05)
    cx = x0 + bw / 2 + rng.uniform(-jit, jit)
    cy = y0 + bh / 2 + rng.uniform(-jit, jit)
    return _draw_text(digit, cs, (cx, cy), size, ink, bold)


def _bank_key(kind: str, style: str, cell_size: int, n_variants: int, seed: int, part: int | None) -> dict:
    # Pillow rasterises the strokes and the font: another version may draw other bytes
    key = {"kind": kind, "style": style, "cell_size": cell_size, "n_variants": n_variants, "seed": seed,
           "version": GLYPH_VERSION, "pillow": PIL.__version__}  # fmt: skip
    if part is not None:  # the shared bank keeps the key it always had
        key["part"] = int(part)
    return key


def _bank_rng(seed: int, cell_size: int, stream: int, part: int | None) -> np.random.Generator:
    """The drawing stream of one bank: ``part`` (a split's code) gives a stream of its own, never
    the shared bank's (a longer entropy list is another seed sequence)."""
    entropy = [seed, cell_size, stream] if part is None else [seed, cell_size, stream, 1 + int(part), 0x5EED]
    return np.random.default_rng(entropy)


def _check_part(part: int | None) -> None:
    if part is not None and (isinstance(part, bool) or not isinstance(part, (int, np.integer)) or part < 0):
        raise ValueError(f"glyph bank part must be None or a non-negative integer (a split code), got {part!r}")


@lru_cache(maxsize=32)
def glyph_bank(style: str, cell_size: int, n_variants: int, seed: int, part: int | None = None) -> np.ndarray:
    """Main-digit tiles ``uint8 [10, n_variants, cs, cs]``; index 0 is the blank cell.

    ``part``: which bank of the seed (a split's code: each split's glyphs are drawn apart, so
    no two splits share a glyph); ``None``: the one shared bank.
    Read-only; cached per argument tuple in memory and, while a dataset is generated with a cache
    directory (:func:`synthetic.cache.aux_cache`), on disk: drawing 1,024 handwritten variants
    costs seconds, reading them back milliseconds.
    """
    _tile_fn(style)  # an unknown style fails before any cache access
    _check_part(part)
    key = _bank_key("glyphs", style, cell_size, n_variants, seed, part)
    bank = cached_block(key, lambda: _draw_glyph_bank(style, cell_size, n_variants, seed, part), "glyphs")
    bank.setflags(write=False)
    return bank


#: Split code of the training bank, the one every other split's glyphs must differ from.
TRAIN_PART = 0
#: Most redraws of one held-out variant whose core is a training glyph's.
MAX_REDRAWS = 200


def glyph_core(tiles: np.ndarray) -> np.ndarray:
    """What identifies a glyph: the centre of its tiles (``[..., cs, cs]`` -> ``[..., k]``), without
    the border a grid line or a pencil mark may touch (``max(2, cs // 4)`` px each side)."""
    cs = tiles.shape[-1]
    m = max(2, cs // 4)
    core = tiles[..., m : cs - m, m : cs - m]
    return np.ascontiguousarray(core).reshape(*tiles.shape[:-2], -1)


def _held_out_tile(draw, digit: int, cs: int, rng: np.random.Generator, seen: set[bytes], **kw) -> np.ndarray:
    """A tile whose core is no training tile's (``seen``): drawn again (same stream) until it is.
    Continuous jitter makes a repeat rare; quantised parameters (printed font sizes, integer ink)
    make it possible, and a held-out split must never show a training glyph."""
    for _ in range(MAX_REDRAWS):
        tile = draw(digit, cs, rng, **kw)
        if glyph_core(tile).tobytes() not in seen:
            return tile
    raise ValueError(f"cannot draw a held-out glyph of digit {digit} at {cs} px that differs from every training glyph "
                     f"(this style has too few distinct glyphs at this size: lower glyph_variants or raise cell_size)")  # fmt: skip


def _training_cores(bank: np.ndarray) -> list[set[bytes]]:
    """Per leading index (digit), the cores of the training bank's tiles."""
    cores = glyph_core(bank)
    return [{row.tobytes() for row in cores[d].reshape(-1, cores.shape[-1])} for d in range(len(bank))]


def _draw_glyph_bank(style: str, cell_size: int, n_variants: int, seed: int, part: int | None = None) -> np.ndarray:
    """One bank; a held-out split's (``part`` not the training split, not shared) differs from the
    training bank of the same seed in every glyph's core (:func:`glyph_core`)."""
    draw = _tile_fn(style)
    rng = _bank_rng(seed, cell_size, 7, part)
    held_out = part is not None and part != TRAIN_PART
    seen = _training_cores(glyph_bank(style, cell_size, n_variants, seed, TRAIN_PART)) if held_out else None
    bank = np.full((10, n_variants, cell_size, cell_size), 255, dtype=np.uint8)
    for d in range(1, 10):
        for v in range(n_variants):
            bank[d, v] = _held_out_tile(draw, d, cell_size, rng, seen[d]) if seen else draw(d, cell_size, rng)
    return bank


@lru_cache(maxsize=32)
def pencil_bank(style: str, cell_size: int, n_variants: int, seed: int, part: int | None = None) -> np.ndarray:
    """Pencil-mark tiles ``uint8 [10, 8, n_variants, cs, cs]`` (digit, slot, variant); digit 0 = none.
    Per ``part`` and cached like :func:`glyph_bank`."""
    _tile_fn(style)
    _check_part(part)
    key = _bank_key("pencil", style, cell_size, n_variants, seed, part)
    bank = cached_block(key, lambda: _draw_pencil_bank(style, cell_size, n_variants, seed, part), "glyphs")
    bank.setflags(write=False)
    return bank


def _draw_pencil_bank(style: str, cell_size: int, n_variants: int, seed: int, part: int | None = None) -> np.ndarray:
    """One bank of pencil marks; a held-out split's differs from the training bank's marks (whole tiles)."""
    draw = _tile_fn(style)
    rng = _bank_rng(seed, cell_size, 11, part)
    held_out = part is not None and part != TRAIN_PART
    train = pencil_bank(style, cell_size, n_variants, seed, TRAIN_PART) if held_out else None
    bank = np.full((10, len(PENCIL_SLOTS), n_variants, cell_size, cell_size), 255, dtype=np.uint8)
    for d in range(1, 10):
        for s in range(len(PENCIL_SLOTS)):
            seen = {t.tobytes() for t in train[d, s]} if train is not None else None
            for v in range(n_variants):
                for _ in range(MAX_REDRAWS):
                    tile = draw(d, cell_size, rng, slot=s)
                    if seen is None or tile.tobytes() not in seen:
                        break
                else:
                    raise ValueError(f"cannot draw a held-out pencil mark of digit {d} at {cell_size} px that differs from every "
                                     "training mark: lower glyph_variants or raise cell_size")  # fmt: skip
                bank[d, s, v] = tile
    return bank


def _tile_fn(style: str):
    if style == "printed":
        return printed_tile
    if style == "handwritten":
        return handwritten_tile
    raise ValueError(f"unknown glyph style '{style}', expected 'printed' or 'handwritten'")
