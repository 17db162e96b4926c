"""The spurious cue of the faithfulness testbed (``RobotConfig.cue``): which cue each robot shows,
and the cue drawn into rendered images.

A row's cue bit says a class (1 = Glorp): it equals the label with probability ``correlation``
(its own random stream per split, so the rest of the data is unchanged by the knob). Drawing is
exact and local: ``swatch`` paints a square in the top-left corner white (Glorp) or black (Drent),
``corner`` paints a white square in the top-left (Glorp) or top-right (Drent)
corner, ``tint`` shifts every pixel toward red (Glorp) or blue (Drent) by ``strength`` levels,
clipped to 0..255. :func:`draw_cue` on the plain render with the other bit is the cue-flipped
counterfactual: the same robot, the other cue.
"""

from __future__ import annotations

import numpy as np

from synthetic.robot.config import SpuriousCue

#: Image side the corner square's ``strength`` (its side in pixels) refers to.
CUE_REFERENCE_PX = 32


def cue_bits(cfg: SpuriousCue, y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``int64 [N]``: 1 where the row's cue says Glorp; equal to ``y`` with probability ``correlation``
    (one uniform draw per row, always drawn, so the stream does not depend on the knob's value)."""
    agree = rng.random(len(y)) < cfg.correlation
    return np.where(agree, y, 1 - y).astype(np.int64)


def corner_box(cfg: SpuriousCue, size: int, glorp: bool) -> tuple[slice, slice]:
    """``(rows, cols)`` of the corner square for an image of side ``size`` (a swatch: top-left for both)."""
    side = max(1, round(cfg.strength * size / CUE_REFERENCE_PX))
    return slice(0, side), (slice(0, side) if glorp or cfg.kind == "swatch" else slice(size - side, size))


def draw_cue(x: np.ndarray, bits: np.ndarray, cfg: SpuriousCue) -> np.ndarray:
    """``x`` (``uint8 [N, H, W, 3]``) with each row's cue drawn (a new array; ``kind=none``: a copy)."""
    out = np.array(x, dtype=np.uint8, copy=True)
    bits = np.asarray(bits).astype(bool)
    if cfg.kind == "corner":
        size = out.shape[1]
        for glorp in (True, False):
            rows, cols = corner_box(cfg, size, glorp)
            out[bits == glorp, rows, cols, :] = 255
    elif cfg.kind == "swatch":
        rows, cols = corner_box(cfg, out.shape[1], True)
        out[:, rows, cols, :] = np.where(bits, 255, 0).astype(np.uint8)[:, None, None, None]
    elif cfg.kind == "tint":
        shift = np.where(bits[:, None], [cfg.strength, 0, -cfg.strength], [-cfg.strength, 0, cfg.strength])
        out = np.clip(out.astype(np.int16) + shift[:, None, None, :], 0, 255).astype(np.uint8)
    return out


def cue_mask(cfg: SpuriousCue, size: int, glorp: bool) -> np.ndarray:
    """``bool [size, size]``: the pixels the cue of one class occupies (all of them for a tint)."""
    mask = np.zeros((size, size), dtype=bool)
    if cfg.kind in ("corner", "swatch"):
        mask[corner_box(cfg, size, glorp)] = True
    elif cfg.kind == "tint":
        mask[:] = True
    return mask
