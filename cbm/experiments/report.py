"""Collect ``metrics.json`` files of runs into one results table.

Used as a Hydra callback (``on_multirun_end`` prints the sweep's table and writes
``results.md`` / ``results.json`` into the sweep directory) and as ``cbm-report DIR``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from cbm.experiments.common import fail, write_json_atomic, write_text_atomic


def collect(root: str | Path) -> list[dict[str, Any]]:
    """All ``metrics.json`` under ``root``, in a stable order (dataset, model, seed)."""
    runs = []
    for path in sorted(Path(root).rglob("metrics.json")):
        try:
            runs.append(json.loads(path.read_text()))
        except json.JSONDecodeError:
            print(f"cbm-report: skipping unreadable {path}", file=sys.stderr)
    order = {"blackbox": 0, "cbm": 1, "cem": 2, "probcbm": 3, "ecbm": 4}
    return sorted(runs, key=lambda r: (r.get("dataset", ""), order.get(r.get("model"), 9), r.get("seed", 0)))


def write_report(root: str | Path) -> str:
    from cbm.experiments.train import results_table

    runs = collect(root)
    if not runs:
        raise FileNotFoundError(f"no metrics.json under {root}")
    table = results_table(runs)
    write_text_atomic(Path(root) / "results.md", table + "\n")
    write_json_atomic(Path(root) / "results.json", runs)
    return table


class ReportCallback(Callback):
    """Hydra callback: print the combined table when a multirun ends."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        root = Path(config.hydra.sweep.dir)
        try:
            print(f"\nResults of {root}:\n" + write_report(root))
        except FileNotFoundError as err:
            print(f"cbm-report: {err}", file=sys.stderr)


def main() -> None:
    if len(sys.argv) != 2:
        fail("cbm-report", "usage: cbm-report RUN_OR_SWEEP_DIR")
    try:
        print(write_report(sys.argv[1]))
    except FileNotFoundError as err:
        fail("cbm-report", str(err))


if __name__ == "__main__":
    main()
