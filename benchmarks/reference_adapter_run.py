"""One real run of ``data.source=concept_benchmark`` (the installed concept-benchmark 0.4.1 makes the
robots) next to ``data.render=reference`` (ours), same config: are the rows, labels and features the
same, how close are the pixels, and does the cache serve the second load.

The reference and its drawing stack must be importable, e.g. beside the project::

    pip install --no-deps --target DEPS pero colorir pycairo      # pycairo: Debian libcairo2-dev
    PYTHONPATH=.:REF:DEPS python benchmarks/reference_adapter_run.py   # REF: the unpacked sdist (or concept-benchmark in DEPS)

Writes ``benchmarks/results/reference_adapter_run.json``. One render per robot (7,680 rows) keeps the
reference's drawing to a few minutes; the split sizes are not 0.4.1's defaults on purpose, so the
adapter's size handling is exercised too.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from synthetic.robot import RobotConfig
from synthetic.robot.generator import generate, load

RESULTS = Path(__file__).with_name("results") / "reference_adapter_run.json"
CONFIG = {"render": "reference", "renders_per_robot": 1, "n_train": 1000, "n_test": 2000, "val_fraction": 0.2, "n_calib": 0,
          "label_rule": "balanced", "train_constraints": "rule", "seed": 1014, "image_size": 32}  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as cache:
        t0 = time.perf_counter()
        ref = load(RobotConfig(source="concept_benchmark", **CONFIG), cache_dir=cache)
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        again = load(RobotConfig(source="concept_benchmark", **CONFIG), cache_dir=cache)
        cached = time.perf_counter() - t0
    ours = generate(RobotConfig(**CONFIG))
    rows = lambda d, s: d.meta[d.indices(s), -1]  # noqa: E731
    diff = np.abs(ref.x.astype(np.int16) - ours.x)
    out = {
        "config": CONFIG, "first_load_s": round(first, 1), "cached_load_s": round(cached, 2),
        "rows_per_split": {s: int(len(ref.indices(s))) for s in ("train", "val", "calib", "test")},
        "same_rows_as_ours": {s: bool(np.array_equal(rows(ref, s), rows(ours, s))) for s in ("train", "val", "test")},
        "same_labels_as_ours": bool(np.array_equal(ref.y, ours.y)), "same_meta_as_ours": bool(np.array_equal(ref.meta, ours.meta)),
        "cached_equal": bool(np.array_equal(again.x, ref.x)),
        "pixels_vs_ours": {"mean_abs_level_diff": round(float(diff.mean()), 4), "max_level_diff": int(diff.max()),
                           "pixels_identical": round(float((diff.max(-1) == 0).mean()), 4)},
    }  # fmt: skip
    print(json.dumps(out, indent=2))
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
