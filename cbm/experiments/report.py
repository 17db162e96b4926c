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

from cbm.experiments.common import fail, one_line, write_json_atomic, write_text_atomic


def read_metrics(path: Path) -> dict[str, Any] | None:
    """One run's ``metrics.json``, or ``None`` (with a one-line note) when it is not one."""
    try:
        m = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        print(f"cbm-report: skipping {path}: unreadable ({type(err).__name__})", file=sys.stderr)
        return None
    if not isinstance(m, dict) or not isinstance(m.get("model"), str) or not isinstance(m.get("dataset"), str):
        print(f"cbm-report: skipping {path}: not a cbm-train metrics.json (no model / dataset)", file=sys.stderr)
        return None
    oracle = m.get("oracle_random", {})
    if not isinstance(oracle, dict) or not all(str(k).isdigit() and isinstance(v, int | float) for k, v in oracle.items()):
        print(f"cbm-report: skipping {path}: oracle_random must map budgets to accuracies", file=sys.stderr)
        return None
    if not isinstance(m.get("seed", 0), int):
        m["seed"] = 0
    return m


def collect(root: str | Path) -> list[dict[str, Any]]:
    """All ``metrics.json`` under ``root``, in a stable order (dataset, model, seed)."""
    runs = []
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"{root} does not exist")
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a directory (give a run or sweep directory)")
    for path in sorted(root.rglob("metrics.json")):
        m = read_metrics(path)
        if m is not None:
            runs.append(m)
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


USAGE = "usage: cbm-report RUN_OR_SWEEP_DIR"


def main() -> None:
    if len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help"):
        print(f"{USAGE}\n\nCollect the metrics.json of every cbm-train run under the directory into one table;\n"
              "writes results.md and results.json there.")
        return
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        fail("cbm-report", USAGE)
    try:
        print(write_report(sys.argv[1]))
    except OSError as err:  # missing directory, no runs in it, results not writable
        fail("cbm-report", one_line(err))


if __name__ == "__main__":
    main()
