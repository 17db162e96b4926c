"""Drawing concept-benchmark 0.4.1's whole robot catalogue: ``data.render=reference`` vs the reference.

Equal work, whole process: each side is one fresh process (interpreter start and imports included)
that draws the 30,720 catalogue images (7,680 robots x 4 renders, scheme = row % 71) at ``--size``
px and writes them to disk: the reference with its own ``generate_robot_catalog(draw=True)``
(pero + cairo, one PNG per robot, as its pipeline's setup stage draws them), ours with
``synthetic.robot.reference.render`` into one ``.npy``. Both run one after the other on the same
machine; ours is repeated (``--repeats``) and its median kept. Writes
``benchmarks/results/reference_render_speed.json`` and prints the table.

    python benchmarks/bench_reference_render.py --reference-python /path/to/reference-venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).with_name("results") / "reference_render_speed.json"
ROOT = Path(__file__).resolve().parents[1]

OURS = """
import sys, numpy as np
from synthetic.robot.reference import render
from synthetic.robot.reference.catalog import catalogue
body, scheme = catalogue(4)
np.save(sys.argv[2], render(body, scheme, int(sys.argv[1])))
"""
REFERENCE = """
import sys
from concept_benchmark.config import ROBOT_CONCEPTS
from concept_benchmark.synthetic.robot.catalog import generate_robot_catalog
df, _ = generate_robot_catalog(concepts=ROBOT_CONCEPTS, num_robots=4 * 7680, resolution=int(sys.argv[1]),
                               output_directory=sys.argv[2], draw=True)
assert len(df) == 4 * 7680
"""


def timed(cmd: list[str], env: dict[str, str] | None = None) -> float:
    """Wall seconds of one process."""
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3, help="runs of ours (median kept)")
    ap.add_argument("--reference-python", default=os.environ.get("CBM_REFERENCE_PYTHON"),
                    help="interpreter with concept-benchmark 0.4.1 installed (env CBM_REFERENCE_PYTHON)")  # fmt: skip
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    if not args.reference_python:
        sys.exit("bench_reference_render: give --reference-python (or CBM_REFERENCE_PYTHON)")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory() as tmp:
        ref_s = timed([args.reference_python, "-c", REFERENCE, str(args.size), str(Path(tmp) / "png")])
        pngs = len(list((Path(tmp) / "png").glob("robot_*.png")))
        ours = [timed([sys.executable, "-c", OURS, str(args.size), str(Path(tmp) / f"ours{i}.npy")], env) for i in range(args.repeats)]
    ours_s = statistics.median(ours)
    result = {
        "images": 4 * 7680, "size": args.size, "reference_pngs": pngs,
        "reference_seconds": round(ref_s, 2), "ours_seconds": round(ours_s, 2), "ours_runs": [round(s, 2) for s in ours],
        "ratio": round(ref_s / ours_s, 1), "cpus": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()],
        "machine": platform.platform(), "date": time.strftime("%Y-%m-%d"),
    }  # fmt: skip
    print(f"| {result['images']:,} catalogue images at {args.size} px, whole process | seconds | images/s |")
    print("|---|---:|---:|")
    print(f"| concept-benchmark 0.4.1 (pero + cairo, PNGs) | {ref_s:.1f} | {result['images'] / ref_s:,.0f} |")
    print(f"| ours, data.render=reference (numpy, one .npy; median of {args.repeats}) | {ours_s:.1f} | {result['images'] / ours_s:,.0f} |")
    print(f"\nratio: {result['ratio']}x (load average {result['load_average']} on {result['cpus']} CPUs)")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
