"""Boards drawn the way concept-benchmark 0.4.1 draws them (``data.renderer=v04``), board by board.

0.4.1's ``image_transform`` (``concept_benchmark/synthetic/sudoku/__init__.py``) draws a board at
50 px per cell (white, black grid lines 2 px / 5 px around boxes, a 10 px margin), writes 35% of
the cells as printed starters (Pillow's font, size 25, grey), and the rest by hand in blue ink.
Before the digits it draws candidate bubbles: 22% of the handwritten cells each seed a pair with a
handwritten rook neighbour, and both cells get a thin wobbly circle in their top-left corner with
the pair's digits written small inside. Then the whole board is LANCZOS-resized to the target
cell size (94 px at 10 px per cell: 2 px margins).

Here the same board is made with every random choice a hash of the board's render seed (a board
renders the same alone or in any batch; no glyph bank, so no split can share a glyph with another):
the handwritten digits come from :func:`synthetic.sudoku.v04_glyphs.draw_glyphs` for all cells of a
chunk of boards at once, the grid and the printed starters are drawn once, the composition is
numpy on ``[boards, 9, 9, cell, cell]`` views, the bubbles' outlines are Pillow lines (as 0.4 draws
them), and the resize is Pillow's LANCZOS. Images are grey (0.4's RGB under ITU-R 601 luma, as the
OCR reads it): ink ``v04.ink`` (70, its blue), starters ``v04.starter_ink`` (30), lines 0.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from synthetic.sudoku.render import hashed_uniform
from synthetic.sudoku.v04_config import V04Render
from synthetic.sudoku.v04_glyphs import N_UNIFORMS, draw_glyphs

#: 0.4's drawing sizes at its 50 px reference cell: thin and bold lines, starter font size.
REF_CELL, THIN, BOLD, FONT = 50, 2, 5, 25
#: Most digits a bubble holds (its own and up to four neighbours').
MAX_OPTIONS = 5
#: Points of one pass of a bubble's outline (0.4: 56 segments, two passes).
CIRCLE_POINTS, CIRCLE_PASSES = 57, 2
_S_STARTER, _S_SEEDS, _S_PARTNER, _S_MAIN, _S_BUBBLE, _S_CIRCLE = 30, 31, 32, 33, 34, 35


def drawing_sizes(cfg: V04Render, cell_size: int) -> dict[str, int]:
    """Pixel sizes of the drawing canvas (0.4 scales only its margin to the drawing cell)."""
    d = cfg.draw_cell_px
    margin = cfg.margin_px if cell_size == d else int(round(cfg.margin_px * d / cell_size))
    k = d / REF_CELL
    return {"cell": d, "margin": margin, "side": 2 * margin + 9 * d, "thin": max(1, round(THIN * k)), "bold": max(1, round(BOLD * k)),
            "font": max(1, round(FONT * k)), "hand": max(8, int(d * 0.82)), "mini": max(4, int(d * 0.30)),
            "inset": max(2, int(d * 0.06)), "pad": max(2, int(d * 0.05))}  # fmt: skip


def template(cfg: V04Render, cell_size: int) -> tuple[np.ndarray, np.ndarray]:
    """The empty board at the drawing size (``float32 [side, side]``) and where its outer border is."""
    z = drawing_sizes(cfg, cell_size)
    return _template(z["side"], z["margin"], z["cell"], z["thin"], z["bold"])


@lru_cache(maxsize=8)
def _template(side: int, m: int, d: int, thin: int, bold: int) -> tuple[np.ndarray, np.ndarray]:
    from PIL import Image, ImageDraw

    img = Image.new("L", (side, side), 255)
    draw = ImageDraw.Draw(img)
    for i in range(10):
        p = m + i * d
        w = bold if i % 3 == 0 else thin
        draw.line([(p, m), (p, side - m)], fill=0, width=w)
        draw.line([(m, p), (side - m, p)], fill=0, width=w)
    border = Image.new("L", (side, side), 0)
    ImageDraw.Draw(border).rectangle([m, m, side - m, side - m], outline=255, width=bold)
    draw.rectangle([m, m, side - m, side - m], outline=0, width=bold)
    return np.asarray(img, dtype=np.float32), np.asarray(border) > 0


def starter_tiles(cfg: V04Render, cell_size: int) -> np.ndarray:
    """Printed starters' coverage ``float32 [10, cell, cell]`` (0.4: Pillow's font centred by its box)."""
    z = drawing_sizes(cfg, cell_size)
    return _starter_tiles(z["cell"], z["font"], cfg.starter_ink)


@lru_cache(maxsize=8)
def _starter_tiles(d: int, size: int, ink: int) -> np.ndarray:
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=size)
    out = np.zeros((10, d, d), dtype=np.float32)
    for v in range(1, 10):
        tile = Image.new("L", (d, d), 255)
        draw = ImageDraw.Draw(tile)
        tb = draw.textbbox((0, 0), str(v), font=font)
        draw.text(((d - (tb[2] - tb[0])) / 2, (d - (tb[3] - tb[1])) / 2), str(v), fill=ink, font=font)
        out[v] = (255.0 - np.asarray(tile, dtype=np.float32)) / (255.0 - ink)
    return out


def starters(seeds: np.ndarray, share: float) -> np.ndarray:
    """``bool [N, 81]``: the ``round(share * 81)`` printed cells of each board."""
    k = int(round(share * 81))
    keys = hashed_uniform(seeds, _S_STARTER, (81,))
    out = np.zeros((len(seeds), 81), dtype=bool)
    np.put_along_axis(out, np.argsort(keys, axis=1)[:, :k], True, axis=1)
    return out


def bubble_options(boards: np.ndarray, starter: np.ndarray, seeds: np.ndarray, share: float) -> list[dict[int, list[int]]]:
    """Per board, cell -> the digits its bubble shows (0.4's ``_synthesize_prior_from_neighbors``:
    ``round(share * handwritten cells)`` seeds, each paired with a random handwritten rook
    neighbour; a cell shows every digit of every pair it is in, its own included)."""
    flat = boards.reshape(len(boards), 81)
    keys = hashed_uniform(seeds, _S_SEEDS, (81,))
    pick = hashed_uniform(seeds, _S_PARTNER, (81,))
    out = []
    for b in range(len(boards)):
        hand = ~starter[b]
        elig = np.flatnonzero(hand)
        count = int(round(len(elig) * share))
        prior: dict[int, set[int]] = {}
        for cell in elig[np.argsort(keys[b, elig], kind="stable")][:count]:
            r, c = divmod(int(cell), 9)
            neigh = [rr * 9 + cc for rr, cc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)) if 0 <= rr < 9 and 0 <= cc < 9 and hand[rr * 9 + cc]]
            if not neigh:
                continue
            partner = neigh[min(int(pick[b, cell] * len(neigh)), len(neigh) - 1)]
            digits = {int(flat[b, cell]), int(flat[b, partner])}
            for pos in (int(cell), partner):
                prior.setdefault(pos, set()).update(digits)
        out.append({pos: sorted(ds)[:MAX_OPTIONS] for pos, ds in prior.items()})
    return out


def render_v04(boards: np.ndarray, seeds: np.ndarray, cell_size: int, cfg: V04Render, chunk: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """Grey boards ``uint8 [N, S, S]`` (``S = 9 * cell_size + 2 * margin_px``) and their printed
    starters ``bool [N, 81]``."""
    b = np.asarray(boards)
    if b.ndim != 3 or b.shape[1:] != (9, 9):
        raise ValueError(f"render_v04: boards must be [N, 9, 9], got {b.shape}")
    if b.size and (b.min() < 1 or b.max() > 9):
        raise ValueError("render_v04: boards must be complete (digits 1..9)")
    seeds = np.asarray(seeds, dtype=np.int64)
    side = 9 * cell_size + 2 * cfg.margin_px
    out = np.empty((len(b), side, side), dtype=np.uint8)
    starter = starters(seeds, cfg.starter_share)
    for a in range(0, len(b), chunk):
        z = slice(a, min(len(b), a + chunk))
        out[z] = _render_chunk(b[z], seeds[z], starter[z], cell_size, cfg)
    return out, starter


def _render_chunk(boards: np.ndarray, seeds: np.ndarray, starter: np.ndarray, cell_size: int, cfg: V04Render) -> np.ndarray:
    from PIL import Image

    z = drawing_sizes(cfg, cell_size)
    d, m, side = z["cell"], z["margin"], z["side"]
    n = len(boards)
    base, border = template(cfg, cell_size)
    canvas = np.repeat(base[None], n, axis=0)
    cells = canvas[:, m : m + 9 * d, m : m + 9 * d].reshape(n, 9, d, 9, d).transpose(0, 1, 3, 2, 4)  # a view [n, 9, 9, d, d]
    assert np.shares_memory(cells, canvas)
    flat = boards.reshape(n, 81)
    ink = float(cfg.ink)
    # pass 1: candidate bubbles (outline, then the small digits), as 0.4 draws them before the digits
    options = bubble_options(boards, starter, seeds, cfg.bubble_share)
    _draw_bubbles(canvas, cells, options, seeds, cfg, z, ink)
    # pass 2: the digits (handwritten coverage x 1.25, printed starters)
    hand = np.argwhere(~starter)  # [k, 2] (board, cell)
    u = hashed_uniform(seeds, _S_MAIN, (81, N_UNIFORMS))[hand[:, 0], hand[:, 1]]
    cov = np.minimum(1.0, 1.25 * draw_glyphs(flat[hand[:, 0], hand[:, 1]], u, z["hand"], cfg))
    o = (d - z["hand"]) // 2
    tiles = np.zeros((n, 81, d, d), dtype=np.float32)
    tiles[hand[:, 0], hand[:, 1], o : o + z["hand"], o : o + z["hand"]] = cov
    alpha = tiles.reshape(n, 9, 9, d, d)
    cells *= 1.0 - alpha
    cells += ink * alpha
    printed = np.where(starter, flat, 0)
    alpha = starter_tiles(cfg, cell_size)[printed].reshape(n, 9, 9, d, d)
    cells *= 1.0 - alpha
    cells += cfg.starter_ink * alpha
    canvas[:, border] = 0.0  # the outer border is drawn last
    img = np.clip(np.rint(canvas), 0, 255).astype(np.uint8)
    out_side = 9 * cell_size + 2 * cfg.margin_px
    if side == out_side:
        return img
    return np.stack([np.asarray(Image.fromarray(im).resize((out_side, out_side), Image.Resampling.LANCZOS)) for im in img])


def _draw_bubbles(canvas, cells, options, seeds, cfg, z, ink) -> None:
    """Outlines (Pillow lines, aliased, one px) and small handwritten digits of every bubble."""
    from PIL import Image, ImageDraw

    d, mini, inset, pad = z["cell"], z["mini"], z["inset"], z["pad"]
    jobs = [(b, cell, j, v) for b, opts in enumerate(options) for cell, digits in sorted(opts.items()) for j, v in enumerate(digits)]
    if not jobs:
        return
    job = np.array(jobs, dtype=np.int64)
    u = hashed_uniform(seeds, _S_BUBBLE, (81, MAX_OPTIONS, N_UNIFORMS))[job[:, 0], job[:, 1], job[:, 2]]
    small = np.minimum(1.0, 1.8 * draw_glyphs(job[:, 3], u, mini, cfg))
    wobble = hashed_uniform(seeds, _S_CIRCLE, (81, CIRCLE_PASSES, CIRCLE_POINTS, 3))
    at = 0
    for b, opts in enumerate(options):
        if not opts:
            continue
        mask = Image.new("L", canvas.shape[1:][::-1], 0)
        pen = ImageDraw.Draw(mask)
        strips = []
        for cell, digits in sorted(opts.items()):
            strip = _strip(small[at : at + len(digits)])
            at += len(digits)
            bw, bh = strip.shape[1] + 2 * pad, strip.shape[0] + 2 * pad
            if strip.size == 0 or bw > d - 2 * inset or bh > d - 2 * inset:
                continue  # 0.4 shrinks the digits until the bubble fits; a bubble this wide never occurs at its sizes
            r, c = divmod(cell, 9)
            left, top = z["margin"] + c * d + inset, z["margin"] + r * d + inset
            _outline(pen, (left, top, left + bw, top + bh), wobble[b, cell])
            strips.append((r, c, strip))
        canvas[b][np.asarray(mask) > 0] = ink
        for r, c, strip in strips:
            y, x = inset + pad, inset + pad
            tile = cells[b, r, c, y : y + strip.shape[0], x : x + strip.shape[1]]
            tile *= 1.0 - strip
            tile += ink * strip


def _strip(glyphs: np.ndarray) -> np.ndarray:
    """0.4's ``_render_inline_candidates``: each digit cropped to its ink (alpha > 8/255), side by
    side with no gap, vertically centred."""
    parts = []
    for g in glyphs:
        ys, xs = np.nonzero(g * 255.0 > 8.0)
        if len(ys):
            parts.append(g[ys.min() : ys.max() + 1, xs.min() : xs.max() + 1])
    if not parts:
        return np.zeros((0, 0), dtype=np.float32)
    h = max(p.shape[0] for p in parts)
    out = np.zeros((h, sum(p.shape[1] for p in parts)), dtype=np.float32)
    x = 0
    for p in parts:
        y = (h - p.shape[0]) // 2
        out[y : y + p.shape[0], x : x + p.shape[1]] = p
        x += p.shape[1]
    return out


def _outline(pen, bbox, u: np.ndarray) -> None:
    """0.4's ``_draw_wobbly_circle``: two passes of 56 segments, radius wobble 3.5%, vertex jitter
    N(0, 0.35) px (normals by Box-Muller from the cell's uniforms)."""
    x0, y0, x1, y1 = bbox
    r, cx, cy = (x1 - x0) / 2.0, (x0 + x1) / 2.0, (y0 + y1) / 2.0
    t = 2 * np.pi * np.arange(CIRCLE_POINTS) / (CIRCLE_POINTS - 1)
    for p in range(CIRCLE_PASSES):
        rr = r * (1 + (u[p, :, 0] * 2 - 1) * 0.035)
        rad = np.sqrt(-2.0 * np.log(np.maximum(u[p, :, 1], 1e-12)))
        jx, jy = 0.35 * rad * np.cos(2 * np.pi * u[p, :, 2]), 0.35 * rad * np.sin(2 * np.pi * u[p, :, 2])
        pts = np.stack([cx + rr * np.cos(t) + jx, cy + rr * np.sin(t) + jy], 1)
        pen.line([tuple(q) for q in pts.tolist()], fill=255, width=1)
