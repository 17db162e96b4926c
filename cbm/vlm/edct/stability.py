"""Stability of EDCT's scores over repeated runs of one configuration (the paper's §4.5, Table 5).

Each finished ``cbm-edct`` run writes, in ``results.json``, a settings fingerprint
(:func:`fingerprint`): the digests of what makes its scores (clients, prompts, task, editor, data,
items drawn, bootstrap) with every *seed* left out (the clients' sampling seed, ``items.seed``,
``bootstrap.seed``) and nothing of ``output_dir``, the caches, workers or progress. Runs are
compared on it: runs whose fingerprints differ are refused in one line naming the parts.
:func:`stability` gives CCS_Binary, CCS_Graded, AC and EF per run and their mean ± SD over runs
(sample SD, ``ddof=1``; the paper does not say which), written as ``stability.md`` / ``.csv``.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import numpy as np

from cbm.core.atomic import write_text_atomic
from cbm.vlm.edct.records import PART_NAMES as RUN_PART_NAMES
from cbm.vlm.edct.records import settings_parts
from cbm.vlm.sealed import client_identity, digest, read_json

#: The scores of Table 5 (and AC, EF): (key in results.json's ``scores``, column header).
SCORES = [("ccs", "CCS_Binary"), ("ccs_graded", "CCS_Graded"), ("ac_items", "AC"), ("ef_items", "EF")]
#: Decimals of Table 5 (the paper's: 0.5783 ± 0.0356).
DIGITS = 4
#: Names of the fingerprint's parts in a refusal: the run file's, and the items and bootstrap.
PART_NAMES = {**RUN_PART_NAMES, "items": "items (source, split, n, sample)", "bootstrap": "bootstrap (n_resamples, confidence)"}


def fingerprint(cfg: Any, clients: Any) -> dict[str, str]:
    """The run's settings as compared across runs: :func:`~cbm.vlm.edct.records.settings_parts`
    with each client's sampling seed left out, plus the items drawn and the bootstrap, seeds left out."""
    parts = settings_parts(cfg, clients)
    for role in ("vlm", "llm", "judge", "judge2"):
        client = getattr(clients, role)
        if client is not None:
            ident = client_identity(client)
            parts[role] = digest({**ident, "params": {k: v for k, v in ident["params"].items() if k != "seed"}})
    items = cfg.items
    parts["items"] = digest({"source": items.source, "split": items.split, "n": items.n, "sample": items.sample,
                             "path": items.path, "format": items.format, "shape": items.shape})  # fmt: skip
    parts["bootstrap"] = digest({"n_resamples": cfg.bootstrap.n_resamples, "confidence": cfg.bootstrap.confidence})
    return parts


def read_results(run_dir: str | Path) -> dict[str, Any]:
    """A finished run's ``results.json`` with its fingerprint; ``ValueError`` (one line) otherwise."""
    path = Path(run_dir) / "results.json"
    if not path.is_file():
        raise ValueError(f"stability_runs: {run_dir} is not a finished cbm-edct run (no results.json)")
    body = read_json(path)
    if not isinstance(body, dict) or not isinstance(body.get("scores"), dict):
        raise ValueError(f"stability_runs: {path} is not a cbm-edct results file")
    if not isinstance(body.get("fingerprint"), dict):
        raise ValueError(f"stability_runs: {path} has no settings fingerprint (written by an older version); rerun its "
                         "command: it resumes from its records without a request and rewrites it")  # fmt: skip
    return body


def read_runs(run_dirs: list[str]) -> list[dict[str, Any]]:
    """Each run's ``results.json``; ``ValueError`` (one line) when one is listed twice, unfinished,
    of an older version, or made with other settings than the first (naming the parts that differ)."""
    if len(set(map(str, run_dirs))) < len(run_dirs):
        raise ValueError("stability_runs: a run directory is listed twice")
    results = [read_results(d) for d in run_dirs]
    first = results[0]["fingerprint"]
    for d, res in zip(run_dirs[1:], results[1:]):
        diff = [PART_NAMES.get(k, k) for k in sorted(set(first) | set(res["fingerprint"])) if first.get(k) != res["fingerprint"].get(k)]
        if diff:
            raise ValueError(f"stability_runs: {d} was made with other settings than {run_dirs[0]} ({', '.join(diff)}); "
                             "only seeds and output_dir may differ")  # fmt: skip
    return results


def stability(run_dirs: list[str], out_dir: str | Path | None = None) -> dict[str, Any]:
    """Per run and over runs (mean, SD with ``ddof=1``, n runs) of :data:`SCORES`, from
    :func:`read_runs`. Written to ``out_dir/stability.md`` and ``stability.csv`` when ``out_dir`` is given."""
    results = read_runs(run_dirs)
    per_run = []
    for d, res in zip(run_dirs, results):
        row: dict[str, Any] = {"run": str(d), "vlm": res.get("vlm")}
        for key, _ in SCORES:
            est = res["scores"].get(key) or {}
            row[key] = est.get("value")
            row[f"{key}_n"] = est.get("n")
        per_run.append(row)
    summary: dict[str, Any] = {"runs": per_run, "n_runs": len(per_run)}
    for key, _ in SCORES:
        vals = np.array([r[key] for r in per_run if r[key] is not None], dtype=np.float64)
        summary[key] = {"mean": float(vals.mean()) if vals.size else None, "sd": float(vals.std(ddof=1)) if vals.size > 1 else None,
                        "n_runs": int(vals.size)}  # fmt: skip
    if out_dir is not None:
        write_text_atomic(Path(out_dir) / "stability.md", stability_md(summary))
        write_text_atomic(Path(out_dir) / "stability.csv", stability_csv(summary))
    return summary


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.{DIGITS}f}"


def stability_md(summary: dict[str, Any]) -> str:
    """Table 5 (mean ± SD over runs) and the per-run values, as Markdown."""
    heads = [h for _, h in SCORES]
    lines = [f"| | {' | '.join(heads)} |", "|---|" + "---|" * len(heads),
             "| Mean ± SD | " + " | ".join(f"{_num(summary[k]['mean'])} ± {_num(summary[k]['sd'])}" for k, _ in SCORES) + " |",
             "", f"n runs: {summary['n_runs']} (SD over runs, ddof=1; each run's score is its mean over items)", "",
             "| run | " + " | ".join(heads) + " |", "|---|" + "---|" * len(heads)]  # fmt: skip
    lines += [f"| {r['run']} | " + " | ".join(_num(r[k]) for k, _ in SCORES) + " |" for r in summary["runs"]]
    return "\n".join(lines) + "\n"


def stability_csv(summary: dict[str, Any]) -> str:
    """One row per run, then ``mean`` and ``sd`` rows; a column per score."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["run", *(h for _, h in SCORES)])
    for r in summary["runs"]:
        w.writerow([r["run"], *("" if r[k] is None else r[k] for k, _ in SCORES)])
    for stat in ("mean", "sd"):
        w.writerow([stat, *("" if summary[k][stat] is None else summary[k][stat] for k, _ in SCORES)])
    return buf.getvalue()
