"""Sudoku generator throughput vs plain baselines run in the same process, single-threaded.

Three measurements, each against a plain per-board implementation written here:

1. valid boards/s: HiGHS MIP solves + vectorised validity-preserving transforms
   (MIP time included) vs a recursive randomised backtracking generator;
2. labelled boards/s (valid + invalid, 27 exact concepts each): our pipeline vs a
   per-board generator in the style of the benchmark's reference code (pattern
   board + shuffles, one random corruption, ``np.unique`` per group). It also
   counts how many of the baseline's "invalid" boards are in fact valid;
3. rendered boards/s at 18 px and 50 px, printed and handwritten: glyph-bank
   gather vs a per-board PIL renderer (per-cell text / jittered strokes with
   elastic distortion, as the reference draws them).

Prints a markdown table; the reference code's own numbers on this machine
(2,868 labelled boards/s; 2.4 handwritten and 33 printed boards/s at 50 px) are
quoted for comparison.

    python benchmarks/bench_sudoku.py [--quick]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"  # before numpy is imported: no multi-threaded BLAS/OpenMP

import argparse  # noqa: E402
import random  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from PIL import Image, ImageDraw, ImageFont  # noqa: E402
from timing import best_rate, single_thread  # noqa: E402

from synthetic.sudoku import (  # noqa: E402
    SudokuConfig,
    check_board,
    labelled_boards,
    render_boards,
    solve_mip,
    valid_boards,
)
from synthetic.sudoku.glyphs import STROKES, _jitter_strokes, glyph_bank, pencil_bank  # noqa: E402
from synthetic.sudoku.render import image_size, lined_bank  # noqa: E402

#: The reference code's throughput on this machine (quoted in the issues).
QUOTED = {"labelled": 2868.0, "render50_handwritten": 2.4, "render50_printed": 33.0}
#: The reference code's labelled boards/s by board count on this machine (issue 15: 2,038-2,233).
QUOTED_LABELLED_BY_SIZE = {1_000: 2038.0, 10_000: 2233.0, 50_000: 2110.0}


# ------------------------------------------------------------------ baselines
def backtrack_board(rng: random.Random) -> list[list[int]]:
    """Plain recursive backtracking: fill cells in order, digits in random order."""
    board = [[0] * 9 for _ in range(9)]

    def ok(r: int, c: int, d: int) -> bool:
        if d in board[r] or any(board[i][c] == d for i in range(9)):
            return False
        br, bc = 3 * (r // 3), 3 * (c // 3)
        return all(board[i][j] != d for i in range(br, br + 3) for j in range(bc, bc + 3))

    def fill(i: int) -> bool:
        if i == 81:
            return True
        r, c = divmod(i, 9)
        digits = list(range(1, 10))
        rng.shuffle(digits)
        for d in digits:
            if ok(r, c, d):
                board[r][c] = d
                if fill(i + 1):
                    return True
                board[r][c] = 0
        return False

    fill(0)
    return board


def _baseline_valid(rng: random.Random) -> np.ndarray:
    """A valid board the reference way: pattern board, in-band row / in-stack column
    shuffles, band / stack shuffles, digit relabelling through a Python mapping."""
    b = np.fromfunction(lambda r, c: (3 * (r % 3) + r // 3 + c) % 9 + 1, (9, 9), dtype=int)
    for band in range(3):
        rows = list(range(3 * band, 3 * band + 3))
        rng.shuffle(rows)
        b[3 * band : 3 * band + 3] = b[rows]
    for stack in range(3):
        cols = list(range(3 * stack, 3 * stack + 3))
        rng.shuffle(cols)
        b[:, 3 * stack : 3 * stack + 3] = b[:, cols]
    bands = list(range(3))
    rng.shuffle(bands)
    b = np.vstack([b[3 * i : 3 * i + 3] for i in bands])
    stacks = list(range(3))
    rng.shuffle(stacks)
    b = np.hstack([b[:, 3 * i : 3 * i + 3] for i in stacks])
    perm = list(range(1, 10))
    rng.shuffle(perm)
    mapping = {d: perm[d - 1] for d in range(1, 10)}
    return np.vectorize(lambda v: mapping[int(v)])(b)


def _baseline_corrupt(b: np.ndarray, rng: random.Random) -> np.ndarray:
    """One random corruption; the label is *assumed* invalid afterwards."""
    b = b.copy()
    mode = rng.randrange(6)
    if mode == 0:  # swap two cells of a column inside one band
        c, band = rng.randrange(9), rng.randrange(3)
        r1, r2 = rng.sample(range(3 * band, 3 * band + 3), 2)
        b[r1, c], b[r2, c] = b[r2, c], b[r1, c]
    elif mode == 1:  # swap two cells of a row inside one stack
        r, stack = rng.randrange(9), rng.randrange(3)
        c1, c2 = rng.sample(range(3 * stack, 3 * stack + 3), 2)
        b[r, c1], b[r, c2] = b[r, c2], b[r, c1]
    elif mode == 2:  # swap two rows from different bands
        b1, b2 = rng.sample(range(3), 2)
        r1, r2 = 3 * b1 + rng.randrange(3), 3 * b2 + rng.randrange(3)
        b[[r1, r2]] = b[[r2, r1]]
    elif mode == 3:  # swap two columns from different stacks
        s1, s2 = rng.sample(range(3), 2)
        c1, c2 = 3 * s1 + rng.randrange(3), 3 * s2 + rng.randrange(3)
        b[:, [c1, c2]] = b[:, [c2, c1]]
    elif mode == 4:  # duplicate a value inside a row
        r = rng.randrange(9)
        c1, c2 = rng.sample(range(9), 2)
        b[r, c2] = b[r, c1]
    else:  # duplicate a value inside a column
        c = rng.randrange(9)
        r1, r2 = rng.sample(range(9), 2)
        b[r2, c] = b[r1, c]
    return b


def _baseline_concepts(b: np.ndarray) -> list[int]:
    rows = [int(len(np.unique(b[i])) == 9) for i in range(9)]
    cols = [int(len(np.unique(b[:, j])) == 9) for j in range(9)]
    boxes = [int(len(np.unique(b[3 * i : 3 * i + 3, 3 * j : 3 * j + 3])) == 9) for i in range(3) for j in range(3)]
    return rows + cols + boxes


def baseline_labelled(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` labelled boards, half valid, the per-board way. Returns boards, concepts, assumed labels."""
    rng = random.Random(seed)
    boards, concepts, labels = [], [], []
    for i in range(n):
        b = _baseline_valid(rng)
        y = 1
        if i % 2:
            b, y = _baseline_corrupt(b, rng), 0
        boards.append(b)
        concepts.append(_baseline_concepts(b))
        labels.append(y)
    return np.array(boards), np.array(concepts), np.array(labels)


def baseline_render(boards: np.ndarray, cell: int, style: str, seed: int = 0) -> np.ndarray:
    """Per-board, per-cell PIL drawing (grid lines, then one glyph drawn per cell)."""
    from scipy.ndimage import gaussian_filter, map_coordinates

    rng = np.random.default_rng(seed)
    side = image_size(cell)
    out = np.empty((len(boards), side, side, 3), dtype=np.uint8)
    for k, board in enumerate(boards):
        im = Image.new("L", (side, side), 255)
        d = ImageDraw.Draw(im)
        for i in range(10):
            w = 3 if i % 3 == 0 else 1
            d.rectangle([i * cell, 0, i * cell + w - 1, side - 1], fill=0 if w == 3 else 110)
            d.rectangle([0, i * cell, side - 1, i * cell + w - 1], fill=0 if w == 3 else 110)
        font = ImageFont.load_default(size=int(cell * 0.8))
        for r in range(9):
            for c in range(9):
                digit = int(board[r, c])
                if style == "printed":
                    d.text((c * cell + cell / 2, r * cell + cell / 2), str(digit), font=font, fill=0, anchor="mm")
                    continue
                s = 4 * cell  # jittered strokes at 4x, elastic distortion, downsample, paste
                glyph = Image.new("L", (s, s), 0)
                gd = ImageDraw.Draw(glyph)
                strokes = _jitter_strokes(STROKES[digit][rng.integers(len(STROKES[digit]))], rng)
                for st in strokes:
                    pts = [(float(0.19 * s + x * 0.62 * s), float(0.19 * s + y * 0.62 * s)) for x, y in st]
                    gd.line(pts, fill=255, width=max(1, int(0.08 * s)), joint="curve")
                a = np.asarray(glyph, dtype=np.float32)
                dx = gaussian_filter(rng.uniform(-1, 1, a.shape), 3.0) * 8
                dy = gaussian_filter(rng.uniform(-1, 1, a.shape), 3.0) * 8
                yy, xx = np.meshgrid(np.arange(s), np.arange(s), indexing="ij")
                a = map_coordinates(a, [yy + dy, xx + dx], order=1, mode="reflect")
                tile = Image.fromarray(np.clip(a, 0, 255).astype(np.uint8)).resize((cell, cell), Image.Resampling.LANCZOS)
                im.paste(0, (c * cell, r * cell), tile)
        out[k] = np.asarray(im)[..., None]
    return out


# ------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    single_thread()
    q = args.quick
    n_valid, n_ref_valid = (20_000, 200) if q else (200_000, 2_000)
    n_lab, n_ref_lab = (10_000, 500) if q else (100_000, 5_000)
    n_r18, n_r50, n_ref_r = (500, 100, 2) if q else (4_000, 1_000, 6)
    rows: list[dict] = []

    def add(what, ours, base, quoted=None, note=""):
        rows.append({"what": what, "ours": ours, "base": base, "quoted": quoted, "note": note})

    # 1. valid boards
    solve_mip(rng=0)  # import / warm-up
    t0 = time.perf_counter()
    for i in range(8):
        solve_mip(rng=i)
    mip_ms = (time.perf_counter() - t0) / 8 * 1e3
    ours = best_rate(lambda: valid_boards(n_valid, seed=1, n_mip_seeds=32), n_valid, args.repeats)
    rng = random.Random(0)
    base = best_rate(lambda: [backtrack_board(rng) for _ in range(n_ref_valid)], n_ref_valid, 1)
    add("valid boards/s (32 MIP solves + transforms)", ours, base, note=f"one HiGHS solve ≈ {mip_ms:.0f} ms")

    # 2. labelled boards
    cfg = SudokuConfig(modality="tabular", n_train=n_lab, n_val=0, n_calib=0, n_test=0)
    ours = best_rate(lambda: labelled_boards(cfg), n_lab, args.repeats)
    base = best_rate(lambda: baseline_labelled(n_ref_lab), n_ref_lab, 1)
    bb, bc, by = baseline_labelled(max(n_ref_lab, 4000), seed=1)
    wrong = int(((by == 0) & check_board(bb).all(1)).sum())
    add("labelled boards/s (valid + invalid, 27 concepts)", ours, base, QUOTED["labelled"],
        note=f"baseline mislabels {wrong}/{int((by == 0).sum())} 'invalid' boards (they are valid); ours: 0 by construction")

    # 2b. labelled boards by size: a new config each time (its seed grids solved: one HiGHS solve per
    # 2,000 boards, at most 32), median of the repeats, against the reference at the same size
    for n in (1_000, 10_000) if q else (1_000, 10_000, 50_000, 100_000):
        times = []
        for r in range(max(args.repeats, 5)):
            c = SudokuConfig(modality="tabular", n_train=n, n_val=0, n_calib=0, n_test=0, seed=100 + r)
            t0 = time.perf_counter()
            labelled_boards(c)
            times.append(time.perf_counter() - t0)
        times.sort()
        rate = n / times[len(times) // 2]
        spread = f"runs {n / times[-1]:,.0f}-{n / times[0]:,.0f}/s"
        quoted = QUOTED_LABELLED_BY_SIZE.get(n)
        add(f"labelled boards/s at {n:,} boards ({c.mip_seeds_used} MIP solves incl., median)", rate, base, quoted, note=spread)

    # 3. rendering
    boards = valid_boards(max(n_r18, n_r50), seed=2, n_mip_seeds=4)
    for cell, n in ((18, n_r18), (50, n_r50)):
        for style in ("printed", "handwritten"):
            t0 = time.perf_counter()
            lined_bank(style, cell, 48, 0)
            pencil_bank(style, cell, 8, 0)
            glyph_bank(style, cell, 48, 0)
            setup = time.perf_counter() - t0
            b = boards[:n]
            render_boards(b[:8], cell_size=cell, style=style)  # warm-up
            ours = best_rate(lambda b=b, c=cell, s=style: render_boards(b, cell_size=c, style=s), n, args.repeats)
            base = best_rate(lambda c=cell, s=style: baseline_render(boards[:n_ref_r], c, s), n_ref_r, 1)
            quoted = QUOTED.get(f"render50_{style}") if cell == 50 else None
            add(f"rendered boards/s, {cell} px {style}", ours, base, quoted, note=f"glyph banks built once: {setup:.2f} s")
            if cell == 18 and style == "handwritten":  # the sudoku_18px preset: + pencil marks
                kw = {"cell_size": 18, "style": "handwritten", "pencil_prob": 0.3}
                ours = best_rate(lambda b=b, kw=kw: render_boards(b, **kw), n, args.repeats)
                add("rendered boards/s, 18 px handwritten + pencil marks (preset)", ours, base, None)

    print("| measurement | ours | in-process baseline | ratio | reference code (quoted) | ratio vs quoted | note |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for r in rows:
        quoted = f"{r['quoted']:,.1f}" if r["quoted"] else ""
        rq = f"{r['ours'] / r['quoted']:,.0f}×" if r["quoted"] else ""
        print(f"| {r['what']} | {r['ours']:,.0f} | {r['base']:,.1f} | {r['ours'] / r['base']:,.0f}× | {quoted} | {rq} "
              f"| {r['note']} |")
    return rows


if __name__ == "__main__":
    main()
