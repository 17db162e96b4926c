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


def read_metrics(path: Path) -> dict[str, Any] | str:
    """One run's ``metrics.json``, or why it is not one."""
    try:
        m = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        return f"unreadable ({type(err).__name__})"
    if not isinstance(m, dict) or not isinstance(m.get("model"), str) or not isinstance(m.get("dataset"), str):
        return "not a cbm-train metrics.json (no model / dataset)"
    oracle = m.get("oracle_random", {})
    if not isinstance(oracle, dict) or not all(str(k).isdigit() and isinstance(v, int | float) for k, v in oracle.items()):
        return "oracle_random must map integer budgets to accuracies"
    if not isinstance(m.get("seed", 0), int):
        m["seed"] = 0
    return m


def collect(root: str | Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The runs under ``root`` in a stable order (dataset, model, seed), and one note per
    ``metrics.json`` that is not a run's."""
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"{root} does not exist")
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a directory (give a run or sweep directory)")
    runs, skipped = [], []
    for path in sorted(root.rglob("metrics.json")):
        m = read_metrics(path)
        if isinstance(m, str):
            skipped.append(f"{path}: {m}")
        else:
            runs.append(m)
    order = {"blackbox": 0, "cbm": 1, "cem": 2, "probcbm": 3, "ecbm": 4}
    return sorted(runs, key=lambda r: (r.get("dataset", ""), order.get(r.get("model"), 9), r.get("seed", 0))), skipped


def write_report(root: str | Path) -> str:
    """The table of every run under ``root``, also written to ``results.md`` / ``results.json``
    there; files that are not a run's are named on stderr."""
    from cbm.experiments.train import results_table

    runs, skipped = collect(root)
    if not runs:
        why = f" ({len(skipped)} skipped, e.g. {skipped[0]})" if skipped else ""
        raise FileNotFoundError(f"no usable metrics.json under {root}{why}")
    for note in skipped:
        print(f"cbm-report: skipping {note}", file=sys.stderr)
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
