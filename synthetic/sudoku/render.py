"""Vectorised board rendering: glyph-bank gather + grid lines + optional pencil marks, blur, noise.

Layout of a board image (square, side ``S = n * cell_size + T`` for an ``n x n`` board, ``n`` = 9
or 4): cell ``(r, c)``
is the ``cell_size``-px tile at ``(r*cs, c*cs)``; its top and left edges carry
the grid line before it (thick, ``T`` px, black around boxes; thin, 1 px, grey
between cells) and the last ``T`` rows / columns are the outer bottom / right
border. The lines are baked into four tile classes of the glyph bank, so a
board is one numpy gather of tile rows straight into its final layout.
:func:`cell_box` gives each cell's pixel box, e.g. for edit masks.

Every random choice of a board (glyph variant per cell, pencil marks, noise
offsets) is a hash of that board's render seed, so a board renders the same
alone or in any batch: ``(digits, render seed, split)`` plus the rendering config is
enough to re-render a sample (the split picks the glyph bank: ``glyph_part``).
"""

from __future__ import annotations

from functools import lru_cache
from math import isqrt

import numpy as np

from synthetic.sudoku.geometry import geometry, infer_box
from synthetic.sudoku.glyphs import PENCIL_SLOTS, glyph_bank, pencil_bank

_THIN_INK = 110
_THICK_INK = 0


def line_widths(cell_size: int) -> tuple[int, int]:
    """``(thick, thin)`` grid-line widths in px for a cell size."""
    return max(2, int(round(cell_size / 16))), 1


def image_size(cell_size: int, side: int = 9) -> int:
    """Side of the square image of a ``side x side`` board: ``side * cell_size + thick line width``."""
    return side * cell_size + line_widths(cell_size)[0]


def cell_box(r: int, c: int, cell_size: int) -> tuple[int, int, int, int]:
    """Pixel box ``(y0, y1, x0, x1)`` (half-open) of cell ``(r, c)``, its top/left line included."""
    return (r * cell_size, (r + 1) * cell_size, c * cell_size, (c + 1) * cell_size)


#: Tile class of each cell of a 9x9 board ``[81]``: ``2*[thick line on top] + [thick line on the
#: left]`` (:attr:`~synthetic.sudoku.geometry.Geometry.tile_class` for any board size).
TILE_CLASS = geometry(3).tile_class


@lru_cache(maxsize=32)
def lined_bank(style: str, cell_size: int, n_variants: int, seed: int, part: int | None = None) -> np.ndarray:
    """Glyph bank with grid lines baked in: ``uint8 [4, 10, V, cs, cs]`` (class, digit, variant)."""
    base = glyph_bank(style, cell_size, n_variants, seed, part)
    thick, thin = line_widths(cell_size)
    out = np.repeat(base[None], 4, axis=0)
    for k in range(4):
        top = (thick, _THICK_INK) if k >= 2 else (thin, _THIN_INK)
        left = (thick, _THICK_INK) if k % 2 else (thin, _THIN_INK)
        out[k, :, :, :, : left[0]] = np.minimum(out[k, :, :, :, : left[0]], left[1])
        out[k, :, :, : top[0], :] = np.minimum(out[k, :, :, : top[0], :], top[1])
    out.setflags(write=False)
    return out


# ------------------------------------------------------------ hashed randomness
_G = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _splitmix(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = x + _G
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def hashed_uniform(seeds: np.ndarray, stream: int, shape: tuple[int, ...]) -> np.ndarray:
    """Uniform [0,1) floats ``[n, *shape]``, a pure function of ``(seed, stream, position)``."""
    k = int(np.prod(shape))
    ctr = _splitmix((np.uint64(stream) << np.uint64(32)) + np.arange(k, dtype=np.uint64))
    h = _splitmix(_splitmix(np.asarray(seeds).astype(np.uint64))[:, None] ^ ctr[None, :])
    return ((h >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))).reshape(len(seeds), *shape)


@lru_cache(maxsize=8)
def _noise_bank(side: int, seed: int, part: int | None = None, pad: int = 32, k: int = 4) -> np.ndarray:
    rng = np.random.default_rng([seed, side, 13] if part is None else [seed, side, 13, 1 + int(part), 0x5EED])
    return rng.standard_normal((k, side + pad, side + pad), dtype=np.float32)


# ----------------------------------------------------------------- rendering
def render_boards(
    boards: np.ndarray,
    *,
    cell_size: int = 50,
    style: str = "printed",
    seeds: np.ndarray | None = None,
    pencil_prob: float = 0.0,
    pencil_max: int = 3,
    blur: float = 0.0,
    noise: float = 0.0,
    glyph_seed: int = 0,
    glyph_part: int | None = None,
    glyph_variants: int = 48,
    pencil_variants: int = 8,
    gray: bool = False,
    chunk: int | None = None,
) -> np.ndarray:
    """Render boards ``[N,9,9]`` (digits 1..9, 0 = empty cell; or 4x4 boards ``[N,4,4]``) to images.

    Parameters
    ----------
    cell_size : cell pitch in px (the 50 px and 18 px presets).
    style : ``"printed"`` (Pillow's bundled font) or ``"handwritten"`` (synthetic strokes).
    seeds : per-board render seeds ``[N]`` (default ``arange(N)``).
    pencil_prob : probability that a cell carries pencil-mark candidates (distractors).
    pencil_max : each marked cell gets 1..pencil_max distinct small candidate digits.
    blur : Gaussian blur sigma in px (0 = off).
    noise : std of additive Gaussian pixel noise, in grey levels (0 = off).
    glyph_seed : seed of the glyph banks (which pre-jittered variants exist).
    glyph_part : which of the seed's banks (a dataset passes each split's code, so no split shares a
        glyph, a pencil mark or a noise field with another); ``None``: the shared bank.
    gray : return ``[N,S,S]`` instead of RGB ``[N,S,S,3]``.

    Returns
    -------
    ``uint8 [N,S,S,3]`` with ``S = image_size(cell_size)``.
    """
    b = np.asarray(boards)
    n = len(b)
    geo = geometry(infer_box(b))
    ns = geo.n  # cells per side
    flat = b.reshape(n, geo.cells).astype(np.intp)
    if flat.size and (flat.min() < 0 or flat.max() > 9):
        raise ValueError("render_boards: cells must hold digits 0..9")
    if not 0.0 <= pencil_prob <= 1.0:
        raise ValueError(f"render_boards: pencil_prob={pencil_prob} must lie in [0, 1]")
    if not 1 <= pencil_max <= len(PENCIL_SLOTS):
        raise ValueError(f"render_boards: pencil_max={pencil_max} must lie in 1..{len(PENCIL_SLOTS)}")
    seeds = np.arange(n, dtype=np.int64) if seeds is None else np.asarray(seeds, dtype=np.int64)
    if len(seeds) != n:
        raise ValueError("render_boards: need one seed per board")
    cs = int(cell_size)
    side = image_size(cs, ns)
    bank = lined_bank(style, cs, glyph_variants, glyph_seed, glyph_part)
    pbank = pencil_bank(style, cs, pencil_variants, glyph_seed, glyph_part) if pencil_prob > 0 else None
    # fast path: gather RGB tile rows straight into place; otherwise compose in grey, then expand
    direct_rgb = not gray and pbank is None and blur <= 0 and noise <= 0
    rows = (_rgb_rows if direct_rgb else _gray_rows)(style, cs, glyph_variants, glyph_seed, glyph_part)
    out = np.empty((n, side, side) if gray else (n, side, side, 3), dtype=np.uint8)
    if chunk is None:  # small chunks keep the temporaries in cache
        chunk = max(4, int(2e6 // (side * side)))
    cls = geo.tile_class
    ar = np.arange(cs).reshape(1, 1, cs, 1)
    inner = slice(0, ns * cs)
    for a in range(0, n, chunk):
        z = slice(a, min(n, a + chunk))
        m = z.stop - a
        var = (hashed_uniform(seeds[z], 1, (geo.cells,)) * glyph_variants).astype(np.intp)
        key = (cls[None, :] * 10 + flat[z]) * glyph_variants + var  # [m,cells] tile index into the bank
        if direct_rgb:
            ridx = key.reshape(m, ns, 1, ns) * cs + ar  # [m, r, i, c] -> row i of tile (r, c)
            out[z, inner, inner] = rows[ridx].reshape(m, ns * cs, ns * cs, 3)
            out[z, ns * cs :] = _THICK_INK  # outer bottom / right border
            out[z, :, ns * cs :] = _THICK_INK
            continue
        img = np.full((m, side, side), _THICK_INK, dtype=np.uint8)
        if pbank is None:
            ridx = key.reshape(m, ns, 1, ns) * cs + ar
            img[:, inner, inner] = rows[ridx].reshape(m, ns * cs, ns * cs)
        else:
            tiles = bank.reshape(-1, cs, cs)[key]  # [m,cells,cs,cs]
            _add_pencil(tiles, flat[z], seeds[z], pbank, pencil_prob, pencil_max, pencil_variants)
            img[:, inner, inner] = tiles.reshape(m, ns, ns, cs, cs).transpose(0, 1, 3, 2, 4).reshape(m, ns * cs, ns * cs)
        if blur > 0 or noise > 0:
            img = _degrade(img, seeds[z], blur, noise, glyph_seed, glyph_part)
        if gray:
            out[z] = img
        else:
            o = out[z]
            o[..., 0] = img
            o[..., 1] = img
            o[..., 2] = img
    return out


@lru_cache(maxsize=16)
def _gray_rows(style: str, cs: int, nv: int, seed: int, part: int | None = None) -> np.ndarray:
    return lined_bank(style, cs, nv, seed, part).reshape(-1, cs)


@lru_cache(maxsize=16)
def _rgb_rows(style: str, cs: int, nv: int, seed: int, part: int | None = None) -> np.ndarray:
    rows = np.repeat(lined_bank(style, cs, nv, seed, part).reshape(-1, cs)[..., None], 3, axis=-1)
    rows.setflags(write=False)
    return rows


def _add_pencil(tiles, flat, seeds, pbank, prob, kmax, npv) -> None:
    """Overlay 1..kmax distinct candidate digits in distinct corner/edge slots (darker pixel wins)."""
    n, cells = flat.shape
    n_digits = isqrt(cells)
    has = hashed_uniform(seeds, 2, (cells,)) < prob
    count = np.where(has, 1 + (hashed_uniform(seeds, 3, (cells,)) * kmax).astype(np.intp), 0)
    slots = np.argsort(hashed_uniform(seeds, 4, (cells, len(PENCIL_SLOTS))), axis=2)[:, :, :kmax]
    digits = np.argsort(hashed_uniform(seeds, 5, (cells, n_digits)), axis=2)[:, :, :kmax] + 1
    pvar = (hashed_uniform(seeds, 6, (cells, kmax)) * npv).astype(np.intp)
    t = tiles.reshape(n * cells, *tiles.shape[2:])
    count = count.reshape(-1)
    slots, digits, pvar = (x.reshape(n * cells, kmax) for x in (slots, digits, pvar))
    for k in range(kmax):
        sel = np.flatnonzero(count > k)
        if len(sel):
            t[sel] = np.minimum(t[sel], pbank[digits[sel, k], slots[sel, k], pvar[sel, k]])


def _degrade(img: np.ndarray, seeds: np.ndarray, blur: float, noise: float, glyph_seed: int, part: int | None = None) -> np.ndarray:
    x = img.astype(np.float32)
    if blur > 0:
        from scipy.ndimage import gaussian_filter

        x = gaussian_filter(x, sigma=(0, blur, blur), mode="nearest", truncate=3.0)
    if noise > 0:
        side = img.shape[1]
        bank = _noise_bank(side, glyph_seed, part)
        pad = bank.shape[1] - side
        u = hashed_uniform(seeds, 7, (3,))
        f = (u[:, 0] * len(bank)).astype(np.intp)
        dy = (u[:, 1] * pad).astype(np.intp)
        dx = (u[:, 2] * pad).astype(np.intp)
        for i in range(len(x)):
            x[i] += noise * bank[f[i], dy[i] : dy[i] + side, dx[i] : dx[i] + side]
    return np.clip(np.rint(x), 0, 255).astype(np.uint8)
