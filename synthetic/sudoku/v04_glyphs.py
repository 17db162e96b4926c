"""concept-benchmark 0.4's handwriting, drawn per glyph and vectorised over a batch of glyphs.

0.4.1 (``concept_benchmark/synthetic/sudoku/handwriting.py``) writes a digit with a handwriting
font on a canvas three glyph sizes wide, offsets it by up to a quarter of the glyph size, rotates
it, blurs it, crops two glyph sizes around the centre, LANCZOS-halves that, makes 30% of glyphs
1 px thicker or thinner, warps half of them elastically and LANCZOS-halves again. The same
chain runs here on a batch of glyphs at once (torch, CPU):

1. **Shapes.** One prototype per digit allograph, rendered once in *em* units around the canvas
   centre (:func:`atlas`): this project's stroke skeletons (:data:`synthetic.sudoku.glyphs.STROKES`,
   one allograph per digit by default, :data:`ONE_ALLOGRAPH`; ink 0.545 em tall and strokes ``stroke_em`` wide, as Pecita's) or a font file's digits, placed as
   Pillow places 0.4's text (box-centred, so the ink sits about 0.11 em below the centre).
2. **Affine.** Every glyph samples its prototype through its own rotation, font scale and offset
   (one ``grid_sample`` over an atlas of all prototypes), directly at the first halving's size
   ``S``: sampling a 4x-supersampled, area-filtered prototype at that scale stands in for drawing
   at ``2S`` and LANCZOS-halving.
3. **Blur, thickness, elastic warp, halving.** Gaussian blur (radius halved with the scale),
   a 2x2 maximum / minimum filter, a displacement field of smoothed uniform noise (``alpha``,
   ``sigma``) sampled bilinearly, and a LANCZOS (a = 3) halving to the glyph tile as Pillow computes it.

Every parameter comes from uniforms the caller draws per glyph from its board's seed, so a board
renders the same alone or in any batch. The result is a coverage map in [0, 1] (the glyph's alpha).
0.4 blends the ink colour into the anti-aliased edge too; here the ink is one grey level and
coverage its alpha (a difference of a fraction of a grey level after the resizes).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from synthetic.sudoku.glyphs import STROKES, _draw_strokes

#: Digit ink height in em (Pecita: 0.545) and the shift of its centre below the canvas centre
#: (Pillow centres 0.4's text by its box, whose top sits 0.11 em above the ink).
INK_EM, DROP_EM = 0.545, 0.11
#: Prototype resolution (px per em) and half-width of its frame (em): wide enough that no glyph's
#: sampling grid (rotated, offset, at the smallest scale) reaches a neighbour in the atlas.
PROTO_PX, PROTO_HALF = 96, 1.5
#: Uniforms a glyph reads (columns of ``u``): rotation, x / y offset, scale, blur, allograph,
#: thickness, thicker-or-thinner, elastic alpha, elastic sigma, displacement field.
N_UNIFORMS = 11
#: The one stroke allograph per digit of ``allographs=one`` (indices into ``STROKES[d]``), so a
#: board's handwriting is one shape per digit, as 0.4's font. Chosen by the OCR on whole boards
#: (seed 171, 600 training boards, 200 test): this set reads 99.15% of test cells (50.5% of boards
#: misread; the reference's font 99.17%); with the other 9: 98.46% (9 read as 4), and the other 3 too:
#: 98.18% (3 read as 5); every allograph 97.53%.
ONE_ALLOGRAPH: dict[int, int] = {1: 0, 2: 0, 3: 0, 4: 1, 5: 0, 6: 1, 7: 0, 8: 0, 9: 1}
#: Displacement fields per smoothness level, and the levels between the sigma range's ends.
N_FIELDS, N_SIGMAS = 48, 9


@dataclass(frozen=True)
class Atlas:
    """Every prototype side by side: ``image [1, 1, P, P*k]`` and each digit's prototype indices."""

    image: object  # torch.Tensor
    digit_protos: tuple[tuple[int, ...], ...]  # index 0 unused (blank)


def _stroke_proto(strokes: list[np.ndarray], stroke_em: float) -> np.ndarray:
    size = int(2 * PROTO_HALF * PROTO_PX)
    k = INK_EM / 0.9  # the skeletons' ink spans 0.9 of the unit square's height
    box = (size / 2 - 0.5 * k * PROTO_PX, size / 2 + DROP_EM * PROTO_PX - 0.5 * k * PROTO_PX, k * PROTO_PX, k * PROTO_PX)
    tile = _draw_strokes(strokes, size, box, stroke_em * PROTO_PX, 0)
    return (255.0 - tile.astype(np.float32)) / 255.0


def _font_proto(font_file: str, digit: int) -> np.ndarray:
    from PIL import Image, ImageDraw, ImageFont

    ss, size = 4, int(2 * PROTO_HALF * PROTO_PX)
    font = ImageFont.truetype(font_file, PROTO_PX * ss)
    big = size * ss
    im = Image.new("L", (big, big), 0)
    draw = ImageDraw.Draw(im)
    bb = draw.textbbox((0, 0), str(digit), font=font)
    draw.text(((big - (bb[2] - bb[0])) // 2, (big - (bb[3] - bb[1])) // 2), str(digit), font=font, fill=255)
    return np.asarray(im.resize((size, size), Image.Resampling.BOX), dtype=np.float32) / 255.0


@lru_cache(maxsize=8)
def atlas(handwriting: str, stroke_em: float, font_file: str | None, allographs: str = "one") -> Atlas:
    """The prototypes of one handwriting (cached per process; drawing them takes ~0.1 s)."""
    import torch

    protos: list[np.ndarray] = []
    digits: list[tuple[int, ...]] = [()]
    for d in range(1, 10):
        if handwriting == "font":
            shapes = [_font_proto(font_file, d)]
        else:
            allos = STROKES[d] if allographs == "all" else [STROKES[d][ONE_ALLOGRAPH[d]]]
            shapes = [_stroke_proto(a, stroke_em) for a in allos]
        digits.append(tuple(range(len(protos), len(protos) + len(shapes))))
        protos.extend(shapes)
    image = torch.from_numpy(np.concatenate(protos, axis=1)[None, None].copy())
    return Atlas(image, tuple(digits))


@lru_cache(maxsize=16)
def lanczos_matrix(n_in: int, n_out: int) -> np.ndarray:
    """Pillow's LANCZOS (a = 3) resampling of ``n_in`` samples to ``n_out`` as a matrix ``[n_out, n_in]``
    (its ``ImagingResample`` weights: support scaled by the reduction, window clipped and renormalised)."""
    scale = n_in / n_out
    fscale = max(scale, 1.0)
    support = 3.0 * fscale
    out = np.zeros((n_out, n_in))
    for i in range(n_out):
        center = (i + 0.5) * scale
        lo, hi = max(0, int(center - support + 0.5)), min(n_in, int(center + support + 0.5))
        x = (np.arange(lo, hi) - center + 0.5) / fscale
        w = np.sinc(x) * np.sinc(x / 3.0) * (np.abs(x) < 3.0)
        out[i, lo:hi] = w / w.sum()
    return out.astype(np.float32)


@lru_cache(maxsize=8)
def displacement_fields(side: int, lo: float, hi: float) -> object:
    """``[N_SIGMAS, N_FIELDS, 2, side, side]``: uniform noise in [-1, 1] Gaussian-filtered with
    ``sigma`` at ``N_SIGMAS`` levels from ``lo`` to ``hi`` (0.4: ``gaussian_filter(U(-1, 1), sigma)``,
    reflected edges), drawn once from a fixed stream; a glyph scales one of them by its alpha."""
    import torch
    from scipy.ndimage import gaussian_filter

    rng = np.random.default_rng([0x404, side])
    noise = rng.uniform(-1.0, 1.0, size=(N_FIELDS, 2, side, side))
    levels = np.linspace(lo, hi, N_SIGMAS)
    out = np.stack([gaussian_filter(noise, sigma=(0, 0, s, s), mode="reflect") for s in levels]).astype(np.float32)
    return torch.from_numpy(out)


@lru_cache(maxsize=32)
def blur_matrix(side: int, radius: float) -> np.ndarray:
    """Gaussian blur of ``side`` samples (sigma ``radius``, edges replicated) as a matrix ``[side, side]``."""
    r = max(1, int(np.ceil(3 * radius)))
    t = np.arange(-r, r + 1)
    k = np.exp(-0.5 * (t / radius) ** 2)
    k /= k.sum()
    out = np.zeros((side, side))
    for i in range(side):
        np.add.at(out[i], np.clip(i + t, 0, side - 1), k)
    return out.astype(np.float32)


def _elastic(x, u, cfg):
    """Warp ``x [n, 1, S, S]`` by its displacement field times its alpha (bilinear, reflecting edges)."""
    import torch
    import torch.nn.functional as F

    n, _, h, w = x.shape
    lo, hi = cfg.elastic_sigma
    fields = displacement_fields(h, lo, hi)
    level = (u[:, 9] * N_SIGMAS).long().clamp_max(N_SIGMAS - 1)
    idx = (u[:, 10] * N_FIELDS).long().clamp_max(N_FIELDS - 1)
    alpha = cfg.elastic_alpha[0] + u[:, 8] * (cfg.elastic_alpha[1] - cfg.elastic_alpha[0])
    disp = fields[level, idx] * alpha[:, None, None, None]  # [n, 2, h, w] (dy, dx) in px
    gy, gx = torch.meshgrid(torch.arange(h, dtype=x.dtype), torch.arange(w, dtype=x.dtype), indexing="ij")
    grid = torch.stack([(gx + disp[:, 1]) / (w - 1) * 2 - 1, (gy + disp[:, 0]) / (h - 1) * 2 - 1], dim=-1)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="reflection", align_corners=True)


def draw_glyphs(digits: np.ndarray, u: np.ndarray, tile: int, cfg, chunk: int = 512) -> np.ndarray:
    """Coverage maps ``float32 [n, tile, tile]`` of ``digits [n]`` (1..9), each drawn with its own
    uniforms ``u [n, N_UNIFORMS]`` the way 0.4 draws a handwritten digit of size ``tile``
    (``cfg``: :class:`~synthetic.sudoku.v04_config.V04Render`)."""
    import torch

    n = len(digits)
    out = np.zeros((n, tile, tile), dtype=np.float32)
    if n == 0:
        return out
    if u.shape != (n, N_UNIFORMS):
        raise ValueError(f"draw_glyphs: need uniforms [{n}, {N_UNIFORMS}], got {u.shape}")
    font = cfg.font() if cfg.handwriting == "font" else None
    at = atlas(cfg.handwriting, float(cfg.stroke_em), font, cfg.allographs)
    for a in range(0, n, chunk):
        b = min(n, a + chunk)
        out[a:b] = _draw_chunk(np.asarray(digits[a:b]), torch.from_numpy(np.asarray(u[a:b], dtype=np.float32)), tile, cfg, at)
    return out


def _draw_chunk(digits: np.ndarray, u, tile: int, cfg, at: Atlas) -> np.ndarray:
    import torch
    import torch.nn.functional as F

    n = len(digits)
    s = 2 * tile  # 0.4 draws at twice the tile, then halves
    n_protos = at.image.shape[-1] // at.image.shape[-2]
    choices = [at.digit_protos[int(d)] for d in digits]
    proto = torch.tensor([c[min(int(v * len(c)), len(c) - 1)] for c, v in zip(choices, u[:, 5].tolist())], dtype=torch.float32)
    # --- affine, output pixel (S scale, from the canvas centre) -> atlas: one affine_grid + grid_sample
    theta = torch.deg2rad((u[:, 0] * 2 - 1) * cfg.rotation_deg)
    reach = int(s * cfg.offset)  # 0.4: randint(-S // 4, S // 4) px on the canvas, which is halved to S
    off = (torch.floor(u[:, 1:3] * (2 * reach + 1)).clamp_max(2 * reach) - reach) / 2.0  # [n, 2] (x, y) at S scale
    scale = cfg.scale[0] + u[:, 3] * (cfg.scale[1] - cfg.scale[0])
    em = torch.floor(s * scale * 1.5) / 2.0  # 0.4: font size int(S * scale * 1.5) px on the canvas
    # normalised output coordinate a in [-1, 1] is q = a * s / 2 px; em coordinate e = (R^-1 q - off) / em;
    # atlas x = (proto + 0.5 + e_x / (2 * PROTO_HALF)) / n_protos * 2 - 1, atlas y = e_y / PROTO_HALF
    c, si = torch.cos(theta), torch.sin(theta)
    k = (s / 2.0) / em  # em per unit of the normalised output coordinate
    ax = torch.stack([c * k, si * k, -off[:, 0] / em], 1) / (PROTO_HALF * n_protos)
    ax[:, 2] += (proto + 0.5) / n_protos * 2 - 1
    ay = torch.stack([-si * k, c * k, -off[:, 1] / em], 1) / PROTO_HALF
    grid = F.affine_grid(torch.stack([ax, ay], 1), [n, 1, s, s], align_corners=False)
    x = F.grid_sample(at.image, grid.reshape(1, n * s, s, 2), mode="bilinear", padding_mode="zeros", align_corners=False)
    x = x.reshape(n, 1, s, s)
    # --- blur (0.4: GaussianBlur(radius) on the 2S canvas, so radius / 2 here), as matrices
    radius = torch.tensor(cfg.blur)[(u[:, 4] * len(cfg.blur)).long().clamp_max(len(cfg.blur) - 1)] / 2.0
    for r in torch.unique(radius).tolist():
        if r > 0:
            rows = torch.nonzero(radius == r).flatten()
            g = torch.from_numpy(blur_matrix(s, r))
            x[rows, 0] = g @ x[rows, 0] @ g.T
    # --- thicker / thinner: 2x2 maximum / minimum filter (scipy's footprint origin: rows i-1..i)
    thick = torch.nonzero(u[:, 6] < cfg.thickness_prob).flatten()
    if len(thick):
        padded = F.pad(x[thick], (1, 0, 1, 0), mode="replicate")
        up = (u[thick, 7] < 0.5)[:, None, None, None]
        x[thick] = torch.where(up, F.max_pool2d(padded, 2, stride=1), -F.max_pool2d(-padded, 2, stride=1))
    # --- elastic warp: 0.4 draws it when its first uniform (the rotation's) exceeds 1 - p
    warp = torch.nonzero(u[:, 0] > 1.0 - cfg.elastic_prob).flatten()
    if len(warp):
        x[warp] = _elastic(x[warp], u[warp], cfg)
    # --- LANCZOS halving to the tile
    m = torch.from_numpy(lanczos_matrix(s, tile))
    return (m @ x[:, 0] @ m.T).clamp_(0.0, 1.0).numpy()
