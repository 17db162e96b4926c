"""Pixels each robot concept changes when flipped: our ``render=reference`` vs concept-benchmark 0.4.1.

For ``--n`` catalogue robots (random rows of 0.4.1's catalogue, each in its row's colour scheme),
every concept is flipped on its own (knees, elbows, ears, mouth, head, body, antennae) and every
flat/pointy foot pair is swapped (0.4.1's twins: trapezoid, rounded, square; and the two other
index pairs), and the pixels that change are counted: any change, and a change of more than 40
levels in some channel. The same robots are drawn by our renderer and by the reference's own
``draw_robot`` + PNG export (run in ``--reference-python``, an interpreter with concept-benchmark,
pero, colorir and pycairo; :mod:`synthetic.robot.reference.oracle_child`). Writes
``benchmarks/results/vs_reference_pixels.json`` and prints the table; acceptance: ours within
+-25% of the reference's count of changed pixels for every concept (0 for knees and elbows below
120 px); the changes of more than 40 levels, a few pixels each, within +-25% or one pixel.

    python benchmarks/vs_reference_pixels.py --reference-python /path/to/reference-venv/bin/python
    python benchmarks/vs_reference_pixels.py --ours-only      # our counts only, no reference run
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from synthetic.robot.attributes import BODY_NAMES
from synthetic.robot.reference.catalog import catalogue
from synthetic.robot.reference.draw import render
from synthetic.robot.reference.geometry import FOOT_NAMES
from synthetic.robot.reference.oracle import CHILD

RESULTS = Path(__file__).with_name("results") / "vs_reference_pixels.json"
#: Flipped concepts: name -> (body column, value a, value b); the count compares a robot with a and with b.
CONCEPTS: dict[str, tuple[int, int, int]] = {
    "knees": (BODY_NAMES.index("knees"), 0, 1),
    "elbows": (BODY_NAMES.index("elbows"), 0, 1),
    "ears": (BODY_NAMES.index("ears_triangle"), 0, 1),
    "mouth": (BODY_NAMES.index("mouth_closed"), 0, 1),
    "head": (BODY_NAMES.index("head_round"), 0, 1),
    "body": (BODY_NAMES.index("body_round"), 0, 1),
    "antennae": (BODY_NAMES.index("antennae"), 0, 1),
    **{f"feet {FOOT_NAMES[a]} / {FOOT_NAMES[b]}": (BODY_NAMES.index("foot_subtype"), a, b)
       for a, b in ((0, 5), (1, 6), (2, 7), (3, 9), (4, 8))},
}  # fmt: skip
#: Relative tolerance of the acceptance.
TOLERANCE = 0.25


def robots(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` random rows of 0.4.1's 4-render catalogue: body attributes and colour schemes."""
    body, scheme = catalogue(4)
    rows = np.random.default_rng(seed).choice(len(body), n, replace=False)
    return body[rows], scheme[rows]


def pairs(body: np.ndarray, scheme: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every concept's two versions of every robot, stacked concept by concept (a block, then b)."""
    bodies, schemes = [], []
    for col, a, b in CONCEPTS.values():
        for value in (a, b):
            flipped = body.copy()
            flipped[:, col] = value
            bodies.append(flipped)
            schemes.append(scheme)
    return np.concatenate(bodies), np.concatenate(schemes)


def counts(x: np.ndarray, n: int) -> dict[str, dict[str, float]]:
    """Mean pixels changed per robot, per concept: any change and more than 40 levels."""
    out = {}
    for i, name in enumerate(CONCEPTS):
        a, b = x[2 * i * n : (2 * i + 1) * n].astype(np.int16), x[(2 * i + 1) * n : (2 * i + 2) * n].astype(np.int16)
        d = np.abs(a - b).max(axis=-1)
        out[name] = {"any": float((d > 0).sum((1, 2)).mean()), "over40": float((d > 40).sum((1, 2)).mean())}
    return out


def reference_images(python: str, body: np.ndarray, scheme: np.ndarray, size: int) -> np.ndarray:
    """The same robots drawn by concept-benchmark 0.4.1 (its ``draw_robot`` and PNG export)."""
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = Path(tmp) / "in.npz", Path(tmp) / "out.npz"
        np.savez(inp, body=body, scheme=scheme, size=size)
        subprocess.run([python, str(CHILD), "draw", str(inp), str(out)], check=True)
        with np.load(out) as f:
            return f["x"]


def within(ours: float, ref: float, floor: float = 0.0) -> bool:
    """``ours`` within +-25% of ``ref`` (or ``floor`` pixels, if more); exactly 0 where ``ref`` is 0 and no floor."""
    return abs(ours - ref) <= max(TOLERANCE * ref, floor)


def judge(row: dict) -> dict:
    """The acceptance of one concept's row: its count of changed pixels within +-25% of the
    reference's; strong changes (> 40 levels, a few pixels) within +-25% or one pixel."""
    return {"within_25pct": within(row["ours_any"], row["reference_any"]),
            "over40_within_25pct_or_1px": within(row["ours_over40"], row["reference_over40"], floor=1.0)}  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="robots")
    ap.add_argument("--size", type=int, default=32, help="image size (px)")
    ap.add_argument("--seed", type=int, default=0, help="which catalogue rows")
    ap.add_argument("--reference-python", default=os.environ.get("CBM_REFERENCE_PYTHON"),
                    help="interpreter with concept-benchmark 0.4.1 installed (env CBM_REFERENCE_PYTHON)")  # fmt: skip
    ap.add_argument("--ours-only", action="store_true", help="count our renders only")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)

    body, scheme = robots(args.n, args.seed)
    flip_body, flip_scheme = pairs(body, scheme)
    t0 = time.perf_counter()
    ours = counts(render(flip_body, flip_scheme, args.size), args.n)
    ours_s = time.perf_counter() - t0
    result: dict = {"n": args.n, "size": args.size, "seed": args.seed, "images": len(flip_body), "ours_seconds": round(ours_s, 2)}
    ref = None
    if not args.ours_only:
        if not args.reference_python:
            sys.exit("vs_reference_pixels: give --reference-python (or CBM_REFERENCE_PYTHON), or --ours-only")
        t0 = time.perf_counter()
        ref_x = reference_images(args.reference_python, flip_body, flip_scheme, args.size)
        result["reference_seconds"] = round(time.perf_counter() - t0, 2)
        ref = counts(ref_x, args.n)
        ours_x = render(flip_body, flip_scheme, args.size).astype(np.int16)
        diff = np.abs(ours_x - ref_x.astype(np.int16))
        result["same_images"] = {"mean_abs_level_diff": round(float(diff.mean()), 4), "max_level_diff": int(diff.max()),
                                 "pixels_identical": round(float((diff.max(-1) == 0).mean()), 4)}  # fmt: skip
    rows = {}
    print(f"| concept ({args.n} robots, {args.size} px) | ours: any | reference: any | ours: >40 | reference: >40 | within +-25% |")
    print("|---|---:|---:|---:|---:|:---:|")
    for name in CONCEPTS:
        row = {"ours_any": ours[name]["any"], "ours_over40": ours[name]["over40"]}
        if ref is not None:
            row |= {"reference_any": ref[name]["any"], "reference_over40": ref[name]["over40"]}
            row |= judge(row)
        rows[name] = row
        cells = [f"{row[k]:.1f}" if k in row else "-" for k in ("ours_any", "reference_any", "ours_over40", "reference_over40")]
        ok = {True: "yes", False: "NO"}.get(row.get("within_25pct"), "-")
        print(f"| {name} | {' | '.join(cells)} | {ok} |")
    result["concepts"] = rows
    if ref is not None:
        result["accepted"] = all(r["within_25pct"] for r in rows.values())
        result["over40_accepted"] = all(r["over40_within_25pct_or_1px"] for r in rows.values())
        print(f"\naccepted (every concept's changed pixels within +-25%): {result['accepted']}; changes > 40 levels within "
              f"+-25% or 1 px: {result['over40_accepted']}; same robots: {result['same_images']}")
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
