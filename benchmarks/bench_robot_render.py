"""Robot renderer throughput: vectorised numpy compositing vs a plain per-image PIL baseline.

Both draw the same robots (same geometry code, same ``meta`` rows) in the same
process, single-threaded. Prints a markdown table of images/s and the ratio.

    python benchmarks/bench_robot_render.py [--n 4096] [--n-ref 256] [--sizes 32 64]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"  # before numpy is imported: no multi-threaded BLAS/OpenMP

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from timing import best_rate, single_thread  # noqa: E402

from synthetic.robot import RobotConfig, generate  # noqa: E402
from synthetic.robot.renderer import layer_masks, render, render_reference  # noqa: E402


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096, help="images per timed call of the vectorised renderer")
    ap.add_argument("--n-ref", type=int, default=256, help="images per timed call of the PIL baseline")
    ap.add_argument("--sizes", type=int, nargs="+", default=[32, 64])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    single_thread()

    meta = generate(RobotConfig(modality="tabular", n_train=args.n, val_fraction=0.0, n_calib=0, n_test=0)).meta
    rows = []
    for size in args.sizes:
        t0 = time.perf_counter()
        layer_masks(size)  # one-off mask drawing, cached per size
        setup_s = time.perf_counter() - t0
        ours = best_rate(lambda s=size: render(meta, s), len(meta), args.repeats)
        ref_meta = meta[: args.n_ref]
        ref = best_rate(lambda s=size, m=ref_meta: render_reference(m, s), len(ref_meta), args.repeats)
        diff = np.abs(render(ref_meta, size).astype(np.int16) - render_reference(ref_meta, size)).mean()
        rows.append({"size": size, "ours": ours, "pil": ref, "ratio": ours / ref, "setup_s": setup_s, "mad": diff})

    print("| image size | vectorised (img/s) | per-image PIL (img/s) | ratio | mask setup (s, once) | mean abs pixel diff |")
    print("|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['size']} px | {r['ours']:,.0f} | {r['pil']:,.0f} | {r['ratio']:.1f}x "
            f"| {r['setup_s']:.2f} | {r['mad']:.2f} |"
        )
    return rows


if __name__ == "__main__":
    main()
