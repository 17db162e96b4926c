"""Sudoku dataset: ``generate(cfg) -> SyntheticData`` (pure) and ``load`` (cached).

Pipeline, each stage on its own seed stream (so e.g. a rendering change does
not change the boards):

1. ``cfg.mip_seeds_used`` full grids from HiGHS (one per ``boards_per_mip_seed`` boards, at most ``n_mip_seeds``) (:func:`~synthetic.sudoku.solver.solve_mip`).
2. Distinct valid boards by random validity-preserving transforms
   (:func:`~synthetic.sudoku.transforms.expand`): the positives, plus one
   fresh base board per negative.
3. Negatives by random walks to an exact failing-check count
   (:mod:`synthetic.sudoku.negatives`).
4. Concepts ``c = c_true`` from the exact checker on the final boards, ``y`` =
   their AND; never from the construction.
5. Rendering (:func:`~synthetic.sudoku.render.render_boards`) or a one-hot table.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from synthetic.base import SPLITS, SyntheticData, split_codes
from synthetic.cache import aux_cache, cached_arrays, cached_block, cached_without_images, config_hash
from synthetic.chunked import render_to_npy
from synthetic.lazy import RenderedImages
from synthetic.sudoku.checker import CONCEPT_NAMES, check_board  # noqa: F401  (CONCEPT_NAMES re-exported)
from synthetic.sudoku.config import SudokuConfig
from synthetic.sudoku.corrupt import corrupt
from synthetic.sudoku.geometry import geometry, infer_box
from synthetic.sudoku.negatives import FAMILIES, family_probs, parse_fail_counts, sample_targets, walk
from synthetic.sudoku.render import render_boards
from synthetic.sudoku.solver import solve_mip
from synthetic.sudoku.transforms import expand, unique_first
from synthetic.sudoku.v04_render import render_v04, starters

#: Bump when the output for a given config changes.
GENERATOR_VERSION = 5  # 2: images stored grey, one channel [N,S,S]; 3: seed grids scale with the boards, fanned-out walks;
# 4: one glyph bank per split (glyph_bank=per_split): no split shares a glyph with training; 5: the v04 stroke
# handwriting writes each digit in one allograph (data.v04.allographs=one)
CLASS_NAMES = ["invalid", "valid"]


def meta_names(side: int = 9) -> list[str]:
    """Meta columns: the board's digits row-major, its render seed and how it was made invalid."""
    return [f"cell_r{r}c{c}" for r in range(1, side + 1) for c in range(1, side + 1)] + ["render_seed", "neg_op"]


META_NAMES = meta_names(9)

_STREAM_MIP, _STREAM_EXPAND, _STREAM_NEG, _STREAM_LAYOUT, _STREAM_RENDER = range(1, 6)


def _rng(seed: int, stream: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), stream]))


def mip_grids(n: int, rng: np.random.Generator, box: int = 3) -> np.ndarray:
    """``n`` full grids ``int8 [n,9,9]`` (``[n,4,4]`` for ``box=2``) from HiGHS with random first row and column."""
    grids: list[np.ndarray] = []
    while len(grids) < n:
        g = solve_mip(rng=rng, box=box)
        if g is not None:  # random givens are always feasible; guard anyway
            grids.append(g)
    side = box * box
    return np.stack(grids) if grids else np.zeros((0, side, side), dtype=np.int8)


def seed_grids(seed: int, n_mip_seeds: int) -> np.ndarray:
    """The MIP-solved seed grids of a config, cached on disk while a dataset is generated with a
    cache directory: every config with the same ``seed`` and ``n_mip_seeds`` (any split sizes,
    resolution, style) reuses them. The grids come from their own random stream, so reading them
    back changes nothing downstream."""
    import highspy
    import scipy

    key = {"kind": "mip_grids", "seed": int(seed), "n": int(n_mip_seeds), "scipy": scipy.__version__,
           "highspy": getattr(highspy, "__version__", "?")}  # fmt: skip
    return cached_block(key, lambda: mip_grids(n_mip_seeds, _rng(seed, _STREAM_MIP)), "mipgrids").astype(np.int8, copy=False)


def valid_boards(n: int, seed: int = 0, n_mip_seeds: int = 32) -> np.ndarray:
    """``n`` distinct valid boards ``int8 [n,9,9]``: MIP solves expanded by transforms."""
    grids = mip_grids(n_mip_seeds, _rng(seed, _STREAM_MIP))
    return expand(grids, n, _rng(seed, _STREAM_EXPAND))


def pattern_grid(box: int = 3) -> np.ndarray:
    """concept-benchmark 0.4.1's canonical board ``int8 [n,n]``: ``(box*(r % box) + r // box + c) % n + 1``,
    which its valid boards are drawn from (``valid_source=pattern``)."""
    n = box * box
    r, c = np.arange(n)[:, None], np.arange(n)[None, :]
    return ((box * (r % box) + r // box + c) % n + 1).astype(np.int8)


def _fresh_4x4(n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` valid 4x4 boards drawn uniformly (with replacement) from all 288 grids."""
    from synthetic.sudoku.solver import all_grids_4x4

    grids = all_grids_4x4()
    return grids[rng.integers(len(grids), size=n)].copy()


def labelled_boards(cfg: SudokuConfig) -> dict[str, np.ndarray]:
    """Boards, concepts and labels of all splits (no rendering).

    9x9 boards are distinct across all splits; 4x4 boards (``block_size=2``) are drawn uniformly
    from the 288 valid grids with replacement and corrupted by swaps, so they repeat.

    Returns ``board int8 [N,9,9]``, ``c bool [N,27]`` (4x4: ``[N,4,4]``, ``[N,12]``), ``y int64 [N]``,
    ``split int8 [N]``, ``neg_op int64 [N]`` (-1 for valid boards, else the
    index into :data:`~synthetic.sudoku.negatives.FAMILIES`) and ``target``
    (the failing-check count a negative was drawn for; 0 for valid boards).
    """
    sizes = cfg.sizes
    split = split_codes(sizes)
    n = len(split)
    # which rows are valid: exact proportion per split, positions shuffled inside each split
    lay = _rng(cfg.seed, _STREAM_LAYOUT)
    is_pos = np.zeros(n, dtype=bool)
    start = 0
    for name in SPLITS:
        k = sizes[name]
        block = np.zeros(k, dtype=bool)
        block[: int(round(cfg.valid_fraction * k))] = True
        is_pos[start : start + k] = lay.permutation(block)
        start += k
    n_pos = int(is_pos.sum())
    n_neg = n - n_pos
    geo = geometry(cfg.block_size)

    exp_rng = _rng(cfg.seed, _STREAM_EXPAND)
    transpose = cfg.valid_source != "pattern"  # 0.4.1 shuffles lines, bands and stacks and relabels; it never transposes
    if geo.box == 3:
        grids = pattern_grid(geo.box)[None] if cfg.valid_source == "pattern" else seed_grids(cfg.seed, cfg.mip_seeds_used)
        fresh = expand(grids, n_pos + n_neg, exp_rng, transpose=transpose)  # distinct: positives, then one base per negative
    else:
        grids = None
        fresh = _fresh_4x4(n_pos + n_neg, exp_rng)
    boards = np.zeros((n, geo.n, geo.n), dtype=np.int8)
    boards[is_pos] = fresh[:n_pos]

    neg_op = np.full(n, -1, dtype=np.int64)
    target = np.zeros(n, dtype=np.int64)
    if n_neg and cfg.corruption == "swaps":
        neg_rng = _rng(cfg.seed, _STREAM_NEG)
        neg, actions = corrupt(fresh[n_pos:], cfg.max_cell_swaps, neg_rng)
        for _ in range(100 if grids is not None else 0):  # distinct 9x9 boards, as for the walks
            keep = np.zeros(n_neg, dtype=bool)
            keep[unique_first(neg)] = True
            if keep.all():
                break
            redo = np.flatnonzero(~keep)
            bases = expand(grids, len(redo), exp_rng, exclude=fresh, transpose=transpose)
            neg[redo], actions[redo] = corrupt(bases, cfg.max_cell_swaps, neg_rng)
        else:
            if grids is not None:  # pragma: no cover
                raise RuntimeError("labelled_boards: could not make distinct negatives")
        neg_rows = np.flatnonzero(~is_pos)
        boards[neg_rows] = neg
        neg_op[neg_rows] = actions  # the number of actions (1..max_cell_swaps)
        target[neg_rows] = geo.n_groups - check_board(neg, geo.box).sum(1)
    elif n_neg:
        neg_rng = _rng(cfg.seed, _STREAM_NEG)
        fail_p = parse_fail_counts(cfg.fail_counts)
        fam_p = family_probs(cfg.negative_ops, fail_p)
        tg, fam = sample_targets(fail_p, fam_p, n_neg, neg_rng)
        neg, fam = walk(fresh[n_pos:], tg, fam, neg_rng)
        # distinct boards (a collision needs two walks to meet: redo with fresh bases until none)
        for _ in range(100):
            keep = np.zeros(n_neg, dtype=bool)
            keep[unique_first(neg)] = True
            if keep.all():
                break
            redo = np.flatnonzero(~keep)
            bases = expand(grids, len(redo), exp_rng, exclude=fresh, transpose=transpose)
            neg[redo], fam[redo] = walk(bases, tg[redo], fam[redo], neg_rng)
        else:  # pragma: no cover
            raise RuntimeError("labelled_boards: could not make distinct negatives")
        neg_rows = np.flatnonzero(~is_pos)
        boards[neg_rows] = neg
        neg_op[neg_rows] = fam
        target[neg_rows] = tg

    c = check_board(boards, geo.box)  # the only source of concept labels
    y = c.all(axis=1).astype(np.int64)
    if not (y.astype(bool) == is_pos).all() or not (geo.n_groups - c[~is_pos].sum(1) == target[~is_pos]).all():
        raise AssertionError("labelled_boards: construction disagrees with the exact checker")
    return {"board": boards, "c": c, "y": y, "split": split, "neg_op": neg_op, "target": target}


def one_hot(boards: np.ndarray) -> np.ndarray:
    """Tabular view: ``float32 [N,729]``, column ``cell*9 + digit-1`` (4x4 boards: ``[N,64]``, ``cell*4 + digit-1``)."""
    g = geometry(infer_box(boards))
    flat = np.asarray(boards).reshape(len(boards), g.cells).astype(np.int64)
    out = np.zeros((len(flat), g.cells, g.n), dtype=np.float32)
    r, cell = np.nonzero((flat >= 1) & (flat <= g.n))
    out[r, cell, flat[r, cell] - 1] = 1.0
    return out.reshape(len(flat), g.cells * g.n)


def _negative_info(cfg: SudokuConfig, neg_op: np.ndarray) -> dict:
    """How the invalid boards were made, for ``info``."""
    if cfg.corruption == "swaps":
        counts = np.bincount(neg_op[neg_op > 0], minlength=cfg.max_cell_swaps + 1)[1:]
        return {"negative_families": ["swaps"], "swap_action_counts": {str(k + 1): int(v) for k, v in enumerate(counts)}}
    return {"negative_families": list(FAMILIES),
            "negative_family_counts": {f: int((neg_op == i).sum()) for i, f in enumerate(FAMILIES)}}  # fmt: skip


def glyph_part(cfg: SudokuConfig, split: int | str) -> int | None:
    """The glyph bank a split's boards are drawn from: the split's own (its code in
    :data:`~synthetic.base.SPLITS`), or ``None`` (the one bank) under ``glyph_bank=shared``."""
    code = SPLITS[split] if isinstance(split, str) else int(split)
    return None if cfg.glyph_bank == "shared" else code


def render_split_rows(cfg: SudokuConfig, boards: np.ndarray, render_seed: np.ndarray, split: np.ndarray, gray: bool = True) -> np.ndarray:
    """Boards rendered as the dataset stores them: each with its render seed, from its split's glyph
    bank (rows of several splits are rendered split by split, in place)."""
    split = np.asarray(split)
    if cfg.renderer == "v04":  # drawn board by board: no bank, the split plays no part
        grey = render_v04(np.asarray(boards), render_seed, cfg.cell_size, cfg.v04)[0]
        return grey if gray else np.repeat(grey[..., None], 3, axis=-1)
    parts = np.unique(split)
    if len(parts) == 1 or cfg.glyph_bank == "shared":
        return _render(cfg, boards, render_seed, glyph_part(cfg, int(parts[0]) if len(parts) else 0), gray)
    side = cfg.image_side
    out = np.empty((len(boards), side, side) if gray else (len(boards), side, side, 3), dtype=np.uint8)
    for code in parts:
        rows = np.flatnonzero(split == code)
        out[rows] = _render(cfg, boards[rows], render_seed[rows], glyph_part(cfg, int(code)), gray)
    return out


def _render(cfg: SudokuConfig, boards: np.ndarray, seeds: np.ndarray, part: int | None, gray: bool) -> np.ndarray:
    return render_boards(
        boards, cell_size=cfg.cell_size, style=cfg.style, seeds=seeds, pencil_prob=cfg.pencil_prob, pencil_max=cfg.pencil_max,
        blur=cfg.blur, noise=cfg.noise, glyph_seed=cfg.seed, glyph_part=part, glyph_variants=cfg.glyph_variants, gray=gray,
    )  # fmt: skip


def board_renderer(cfg: SudokuConfig, boards: np.ndarray, render_seed: np.ndarray, split: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """``take(rows)``: those boards rendered grey exactly as :func:`generate` stores them (each image
    depends on its board, render seed and split only, so any rows in any order)."""

    def take(rows: np.ndarray) -> np.ndarray:
        return render_split_rows(cfg, boards[rows], render_seed[rows], split[rows])

    return take


def generate(cfg: SudokuConfig, images: Callable[[Callable[[np.ndarray], np.ndarray], tuple[int, ...]], np.ndarray] | None = None) -> SyntheticData:
    """The dataset of ``cfg``: a pure function (same config -> byte-identical arrays).

    ``images(take, shape)`` (optional) makes the image array from ``take(rows)`` (those boards
    rendered exactly as here), e.g. chunk by chunk into a memory-mapped file."""
    if not isinstance(cfg, SudokuConfig):
        raise TypeError("generate: expected a SudokuConfig")
    lab = labelled_boards(cfg)
    boards = lab["board"]
    n = len(boards)
    render_seed = _rng(cfg.seed, _STREAM_RENDER).integers(0, 2**62, size=n, dtype=np.int64)
    geo = geometry(cfg.block_size)
    extra = {"board": boards.astype(np.int8)}
    if cfg.renderer == "v04" and cfg.modality == "image":  # which cells are printed: a function of the render seed
        extra["starter"] = starters(render_seed, cfg.v04.starter_share)
    if cfg.modality == "image" and images is not None:
        side = cfg.image_side
        x = images(board_renderer(cfg, boards, render_seed, lab["split"]), (n, side, side))
    elif cfg.modality == "image":  # boards are grey: one channel, 3x less memory; batches expand it to RGB
        x = render_split_rows(cfg, boards, render_seed, lab["split"])
    else:
        x = one_hot(boards)
    c = lab["c"].astype(np.float32)
    meta = np.concatenate([boards.reshape(n, geo.cells).astype(np.int64), render_seed[:, None], lab["neg_op"][:, None]], 1)
    neg = lab["y"] == 0
    info = {
        "generator": "synthetic.sudoku",
        "version": GENERATOR_VERSION,
        "task": f"is the {geo.n}x{geo.n} board a valid completed Sudoku; concepts = {geo.n_groups} group checks, y = their AND",
        "valid_source": f"{cfg.mip_seeds_used} HiGHS MIP solves (random first row+column, zero objective) expanded by "
        "random validity-preserving transforms, de-duplicated" if geo.box == 3 else
        "drawn uniformly with replacement from all 288 valid 4x4 grids (enumerated)",
        **_negative_info(cfg, lab["neg_op"]),
        "failing_count_hist": {str(int(k)): int(v) for k, v in zip(*np.unique(geo.n_groups - lab["c"][neg].sum(1), return_counts=True))},
        "labels": "c, c_true and y computed by the exact checker on the final boards",
        "image_size": cfg.image_side if cfg.modality == "image" else None,
        "channels": "grey, stored [N,S,S] uint8; batches give float [B,3,S,S] (the grey channel repeated)",
        "render": _render_info(cfg),
        "meta": f"{geo.cells} board digits (row-major), render_seed, neg_op (-1 valid, else "
        + ("the number of swap actions)" if cfg.corruption == "swaps" else "index into negative_families)"),
        "config": cfg.to_dict(),
    }
    return SyntheticData(
        x=x,
        c=c,
        c_true=c.copy(),
        y=lab["y"],
        split=lab["split"],
        meta=meta,
        concept_names=list(geo.concept_names),
        true_concept_names=list(geo.concept_names),
        class_names=list(CLASS_NAMES),
        meta_names=meta_names(geo.n),
        modality=cfg.modality,
        extra=extra,
        info=info,
    )


def _render_info(cfg: SudokuConfig) -> dict:
    if cfg.renderer == "v04":
        return {"renderer": "v04", "cell_size": cfg.cell_size, **cfg.to_dict()["v04"],
                "drawing": "0.4's: per board, drawn at draw_cell_px and LANCZOS-resized; extra 'starter' marks the printed cells"}  # fmt: skip
    return {"renderer": "bank", "cell_size": cfg.cell_size, "style": cfg.style, "glyph_seed": cfg.seed,
            "glyph_variants": cfg.glyph_variants, "glyph_bank": cfg.glyph_bank, "pencil_prob": cfg.pencil_prob,
            "pencil_max": cfg.pencil_max, "blur": cfg.blur, "noise": cfg.noise}  # fmt: skip


def cache_key(cfg: SudokuConfig) -> dict:
    return {"generator": "sudoku", "version": GENERATOR_VERSION, **cfg.to_dict()}


#: Boards rendered per chunk by ``storage="disk"`` (50 px: 205 KB a board, 100 MB a chunk).
CHUNK_ROWS = 512


def load(cfg: SudokuConfig, cache_dir: str | Path | None = None, storage: str = "memory", chunk_rows: int = CHUNK_ROWS) -> SyntheticData:
    """:func:`generate` through the on-disk cache (``cache_dir=None``: no cache); the glyph banks and
    seed grids it needs are cached there too, shared by every config that uses them.
    ``storage="disk"``: images rendered ``chunk_rows`` at a time into a memory-mapped
    ``sudoku-<key>-x.npy`` (resumable, byte-identical) and returned memory-mapped; ``"render"``:
    nothing stored, each batch's boards rendered when read (the same bytes). With both, every
    array but the images is cached as ``sudoku-labels-<key>.npz``: a later load reads it."""
    if storage not in ("memory", "disk", "render"):
        raise ValueError(f"storage must be 'memory', 'disk' or 'render', got '{storage}'")
    geo = geometry(cfg.block_size)
    side = cfg.image_side

    def stored_renderer(a: dict[str, np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
        meta = a["meta"]
        return board_renderer(cfg, meta[:, : geo.cells].reshape(-1, geo.n, geo.n).astype(np.int8), meta[:, geo.cells], a["split"])

    if storage == "render" and cfg.modality == "image":
        with aux_cache(cache_dir):
            return cached_without_images(
                cache_key(cfg),
                lambda: generate(cfg, images=lambda take, shape: RenderedImages(take, shape)),
                lambda a: RenderedImages(stored_renderer(a), (len(a["meta"]), side, side)),
                cache_dir,
                "sudoku-labels",
            )
    if storage == "disk" and cfg.modality == "image":
        if cache_dir is None:
            raise ValueError("storage='disk' needs a cache directory")
        key = config_hash(cache_key(cfg))
        path = Path(cache_dir) / f"sudoku-{key}-x.npy"

        def to_disk(take: Callable[[np.ndarray], np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
            return render_to_npy(path, shape, lambda a, b: take(np.arange(a, b)), chunk_rows, key)

        with aux_cache(cache_dir):
            return cached_without_images(
                cache_key(cfg),
                lambda: generate(cfg, images=to_disk),
                lambda a: to_disk(stored_renderer(a), (len(a["meta"]), side, side)),
                cache_dir,
                "sudoku-labels",
            )
    with aux_cache(cache_dir):
        arrays = cached_arrays(
            cache_key(cfg), lambda: generate(cfg).to_arrays(), cache_dir, prefix="sudoku", required=SyntheticData.ARRAY_KEYS
        )
    return SyntheticData.from_arrays(arrays)


def rerender(data: SyntheticData, rows: np.ndarray, cfg: SudokuConfig, boards: np.ndarray | None = None) -> np.ndarray:
    """Re-render samples from their meta and split (optionally with edited ``boards``: exact
    counterfactuals), grey ``[N,S,S]`` like the stored images."""
    rows = np.asarray(rows)
    geo = geometry(cfg.block_size)
    b = data.meta[rows, : geo.cells].reshape(-1, geo.n, geo.n) if boards is None else np.asarray(boards)
    return render_split_rows(cfg, b, data.meta[rows, geo.cells], data.split[rows])
