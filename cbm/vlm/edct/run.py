"""One EDCT run: items from a dataset, the editor, the clients, the pipeline, the scores table.

``run(cfg)`` writes ``results.json`` (every score with its interval, counts, parse errors, usage),
``results.md`` (the CCS table) and ``usage.json`` into ``cfg.output_dir`` and returns the summary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from cbm.core.atomic import write_json_atomic, write_text_atomic
from cbm.core.validation import within_split
from cbm.vlm.edct.config import EDCTConfig, split_size
from cbm.vlm.edct.metrics import Estimate, summarise
from cbm.vlm.edct.pipeline import (
    Clients,
    Pipeline,
    exclusion_counts,
    parse_error_counts,
    reask_counts,
    status_counts,
)
from cbm.vlm.edct.stability import fingerprint

#: Columns of the CCS table: (summary key, header).
TABLE = [
    ("ccs", "CCS [95% CI]"), ("ccs_graded", "graded CCS"), ("ac_items", "AC"), ("ef_items", "EF"),
    ("ccs_judges_mean", "CCS, judges averaged"), ("ccs_judges_both", "CCS, both judges"),
    ("pcs", "PCS*"), ("ncc", "NCC*"), ("ccs_known_change", "CCS, edit flips the true label*"), ("ccs_known_no_change", "CCS, label kept*"),
    ("answer_follows_truth", "answer follows truth*"), ("judge_agreement", "judge vs judge2"),
    ("ccs_exact", "CCS, exact judge*"), ("judge_vs_exact", "judge vs exact judge*"),
]  # fmt: skip


def robot_setup(cfg: EDCTConfig) -> tuple[list, list[str], Any, Any]:
    """Items, answer options, exact editor and true-label function for the robot benchmark."""
    from cbm.vlm.editors import make_editor
    from cbm.vlm.editors.synthetic import robot_items
    from synthetic.registry import data_config
    from synthetic.robot import CLASS_NAMES, glorp_probability
    from synthetic.robot.attributes import attribute_table

    dcfg = data_config(dict(cfg.data))
    positions = _positions(cfg, split_size(dcfg, cfg.items.split))
    items = robot_items(dcfg, cfg.items.split, positions, cache_dir=cfg.cache_dir)
    named = [(f"robot-{cfg.items.split}-{int(p):05d}", it) for p, it in zip(positions, items)]
    kind = cfg.editor["kind"]
    editor = make_editor(**{**dict(cfg.editor), "kind": "synthetic_robot"}, cfg=dcfg) if kind.startswith("synthetic") else make_editor(**free_editor(cfg))

    def label_of(meta: Any) -> str:
        row = np.asarray(meta["row"] if isinstance(meta, dict) else meta, dtype=np.int64)[None]
        return CLASS_NAMES[int(glorp_probability(attribute_table(row), dcfg)[0] > 0.5)]

    return named, list(cfg.options or CLASS_NAMES), editor, label_of


def free_editor(cfg: EDCTConfig) -> dict[str, Any]:
    """The settings of a hosted or diffusion editor (a hosted one takes the run's pixel limit unless set)."""
    settings = dict(cfg.editor)
    if settings["kind"] == "hosted":
        settings.setdefault("max_image_pixels", cfg.max_image_pixels)
    return settings


def _positions(cfg: EDCTConfig, pool: int) -> np.ndarray:
    within_split("items.n", cfg.items.n, pool, cfg.items.split)
    if cfg.items.sample:
        return np.sort(np.random.default_rng(cfg.items.seed).choice(pool, cfg.items.n, replace=False))
    return np.arange(cfg.items.n)


def sudoku_setup(cfg: EDCTConfig) -> tuple[list, list[str], Any, Any]:
    """Items, answer options, exact editor and true-label function for rendered Sudoku boards."""
    from cbm.vlm.editors import make_editor
    from cbm.vlm.editors.synthetic import sudoku_items
    from synthetic.registry import data_config
    from synthetic.sudoku.checker import check_board
    from synthetic.sudoku.dataset import CLASS_NAMES

    dcfg = data_config(dict(cfg.data))
    positions = _positions(cfg, split_size(dcfg, cfg.items.split))
    items = sudoku_items(dcfg, cfg.items.split, positions, cache_dir=cfg.cache_dir)
    named = [(f"sudoku-{cfg.items.split}-{int(p):05d}", it) for p, it in zip(positions, items)]
    kind = cfg.editor["kind"]
    editor = make_editor(**{**dict(cfg.editor), "kind": "synthetic_sudoku"}, cfg=dcfg) if kind.startswith("synthetic") else make_editor(**free_editor(cfg))

    def label_of(meta: Any) -> str:
        return CLASS_NAMES[int(check_board(np.asarray(meta["board"])).all())]

    return named, list(cfg.options or CLASS_NAMES), editor, label_of


def files_setup(cfg: EDCTConfig) -> tuple[list, list[str], Any, Any]:
    """Items read from files (photographs with their own questions, options and truths), the image
    editor, and the truth of an original (unknown after an edit)."""
    from cbm.vlm.edct.items import read_items
    from cbm.vlm.editors import EditItem, make_editor
    from cbm.vlm.images import load_image

    found = read_items(cfg.items.path, cfg.items.format, cfg.items.shape)
    positions = _positions(cfg, len(found))
    named = []
    for p in positions:
        it = found[int(p)]
        if isinstance(it.image, Path):
            image = load_image(it.image, cfg.max_image_pixels, f"items ({it.id})")
        else:
            image = it.image.convert("RGB")
        meta = {"question": it.question, "options": it.options, "truth": it.truth, "id": it.id}
        named.append((f"file-{it.id}", EditItem(image, meta, "image")))

    def label_of(meta: Any) -> str | None:
        return meta.get("truth") if isinstance(meta, dict) else None

    return named, list(cfg.options or []), make_editor(**free_editor(cfg)), label_of


def run(cfg: EDCTConfig, http_client: Any | None = None) -> dict[str, Any]:
    """One EDCT run (or, with ``stability_runs``, the stability table of finished runs, no run made)."""
    out = Path(cfg.output_dir)
    if cfg.stability_runs:
        from cbm.vlm.edct.stability import stability

        return {"stability": stability(list(cfg.stability_runs), out)}
    humans = None
    if cfg.human_scores is not None:  # read (and refused) before any request
        from cbm.vlm.edct.agreement import read_human_scores

        humans = read_human_scores(cfg.human_scores)
    setup = {"robot": robot_setup, "sudoku": sudoku_setup, "files": files_setup}[cfg.items.source]
    items, options, editor, label_of = setup(cfg)
    clients = Clients(cfg, http_client=http_client)
    pipe = Pipeline(cfg, clients, editor, label_of)
    records = pipe.run(items, options)
    b = cfg.bootstrap
    summary = summarise(records, b.n_resamples, b.confidence, b.seed)
    from synthetic.robot.config import RobotConfig

    if isinstance(getattr(editor, "cfg", None), RobotConfig):  # the exact judge beside the LLM judge (the edited robots' rows are known)
        from cbm.vlm.edct.exact import exact_summary

        summary.update(exact_summary(records, editor.cfg, b.n_resamples, b.confidence, b.seed))
    verified = [s["verify"]["passed"] for r in records for s in r.get("steps", []) if "verify" in s]
    result = {
        "vlm": clients.vlm.model, "llm": clients.llm.model, "judge": clients.judge.model,
        "judge2": None if clients.judge2 is None else clients.judge2.model,
        "scores": {k: _plain_scores(v) for k, v in summary.items()},
        "status": status_counts(records), "excluded": exclusion_counts(records), "parse_errors": parse_error_counts(records), "reasks": reask_counts(records),
        "verifier_pass_rate": float(np.mean(verified)) if verified else None, "usage": clients.usage(),
        "usage_total": pipe.usage_total(), "fingerprint": fingerprint(cfg, clients),
    }  # fmt: skip
    if humans is not None:
        from cbm.vlm.edct.agreement import write_agreement

        result["human_agreement"] = write_agreement(records, humans, out, b.confidence, cfg.human_scores)
    write_json_atomic(out / "results.json", result)
    write_json_atomic(out / "usage.json", result["usage"])
    write_text_atomic(out / "results.md", table_md(result["vlm"], summary, result))
    return {"summary": summary, "result": result, "records": records}


def _plain_scores(v: Any) -> Any:
    """Estimates (also inside the per-k rows) as JSON."""
    if isinstance(v, Estimate):
        return v.to_json()
    if isinstance(v, list):
        return [{k: _plain_scores(x) for k, x in row.items()} for row in v]
    return v


def table_md(model: str, summary: dict[str, Any], result: dict[str, Any]) -> str:
    """The CCS table (one row per VLM) and the run's counts, as Markdown."""
    cols = [(k, h) for k, h in TABLE if k in summary]
    lines = [
        "| VLM | items scored / items | steps judged | " + " | ".join(h for _, h in cols) + " |",
        "|---|---|---|" + "---|" * len(cols),
        f"| {model} | {summary['items_scored']} / {summary['items']} | {summary['steps_judged']} | "
        + " | ".join(summary[k].fmt() for k, _ in cols) + " |",
        "",
        "CCS, graded CCS, AC, EF: mean over items of each chain's mean, 95% percentile bootstrap CI over items (as the paper); "
        "PCS / NCC and the known-label splits: over steps; rates: Wilson intervals. * this project's additions (not in the paper).",
        "",
        "status: " + ", ".join(f"{k} {v}" for k, v in sorted(result["status"].items())),
        "items excluded, never scored (an edit not verified): " + (", ".join(f"{k} {v}" for k, v in result.get("excluded", {}).items()) or "none"),
        "parse errors (replies kept): " + (", ".join(f"{k} {v}" for k, v in result["parse_errors"].items()) or "none"),
        "re-asked (recovered): " + (", ".join(f"{k} {v['reasked']} ({v['recovered']})" for k, v in result.get("reasks", {}).items()) or "none"),
    ]  # fmt: skip
    if summary.get("by_k"):
        lines += ["", "| k | steps | AC | EF | CCS |", "|---|---|---|---|---|"]
        lines += [f"| {row['k']} | {row['steps']} | {row['ac'].fmt()} | {row['ef'].fmt()} | {row['ccs'].fmt()} |" for row in summary["by_k"]]
        lines.append("")
    if "kappa_ac" in summary:
        lines.append(f"Cohen's kappa, judge vs judge2: AC {summary['kappa_ac']:.3f}, EF {summary['kappa_ef']:.3f}")
    if "kappa_exact_ac" in summary:
        lines.append(f"exact judge (robots: AC from the label rule, EF from the edited parts): AC {summary['ac_exact'].fmt()}, "
                     f"EF {summary['ef_exact'].fmt()}; Cohen's kappa, judge vs exact: AC {summary['kappa_exact_ac']:.3f}, "
                     f"EF {summary['kappa_exact_ef']:.3f}")  # fmt: skip
    if result.get("verifier_pass_rate") is not None:
        lines.append(f"verifier pass rate (edits with a mask): {result['verifier_pass_rate']:.3f}")
    for role, u in result["usage"].items():
        lines.append(f"{role} ({u['model']}): {u['requests']} requests, {u['cache_hits']} cached, {u['prompt_tokens']:,} + "
                     f"{u['completion_tokens']:,} tokens, ${u['cost_usd']:.4f}")  # fmt: skip
    for role, u in result.get("usage_total", {}).items():
        if u != result["usage"].get(role):
            lines.append(f"{role}, every invocation of this run: {u['requests']} requests, {u['prompt_tokens']:,} + "
                         f"{u['completion_tokens']:,} tokens, ${u['cost_usd']:.4f}")  # fmt: skip
    return "\n".join(lines) + "\n"
