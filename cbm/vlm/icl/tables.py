"""The ICL study's tables and statistics from its trial records: accuracy (by model, dataset, N x K),
parse errors, re-asks and losses by reason, the judge's scores and the checker's, the paper's tables
in their layout, the paired tests (Cochran's Q, McNemar, Friedman, Spearman), judge-vs-human
agreement and the radar chart."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cbm.core.atomic import savefig_atomic
from cbm.core.tables import markdown_table
from cbm.vlm.icl import stats
from cbm.vlm.icl.judge import GLOBAL_METRIC, METRICS
from cbm.vlm.icl.parse import (
    ERROR_KINDS,
    LOSS_ORDER,
    loss_reason,
    refused,
)


def _fmt(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def columns_of(rows: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(k for r in rows for k in r))


def rows_md(rows: list[dict[str, Any]]) -> str:
    """Markdown of ``rows`` (floats to 3 decimals: judge means are 1-5, shares 0-1)."""
    if not rows:
        return "(no rows)\n"
    cols = columns_of(rows)
    shown = [{c: _fmt(r.get(c, math.nan)) if isinstance(r.get(c, math.nan), float) else r[c] for c in cols} for r in rows]
    return markdown_table(shown, cols) + "\n"


def _groups(records: list[dict[str, Any]], *keys: str) -> dict[tuple, list[dict[str, Any]]]:
    out: dict[tuple, list[dict[str, Any]]] = {}
    for r in records:
        out.setdefault(tuple(r[k] for k in keys), []).append(r)
    return out


def accuracy_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for (m, d, c), rs in sorted(_groups(records, "model", "dataset", "condition").items()):
        answered = [r for r in rs if r["status"] == "answered"]
        a = stats.accuracy([r["correct"] for r in answered])
        issues = [i["kind"] for r in answered for i in r["parsed"]["issues"]]
        rows.append({"model": m, "dataset": d, "condition": c, "trials": len(rs), "answered": len(answered), "accuracy": a["acc"],
                     "se": a["se"], "unparsed_response": sum(r["parsed"]["response"] is None for r in answered),
                     "parse_errors": len(issues)})  # fmt: skip
    return rows


def parse_error_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for (m, c), rs in sorted(_groups(records, "model", "condition").items()):
        counts = dict.fromkeys(ERROR_KINDS, 0)
        for r in rs:
            for i in r.get("parsed", {}).get("issues", []):
                counts[i["kind"]] += 1
        reasked = [r for r in rs if "reask" in r]
        rows.append({"model": m, "condition": c, "replies": sum(r["status"] == "answered" for r in rs), **counts,
                     "reasked": len(reasked), "recovered": sum(r["parsed"]["response"] is not None for r in reasked)})  # fmt: skip
    return rows


#: Why a trial ends without a label: the request failed (after its retries), or its reply (after
#: the re-ask) was refused / had no, an unclosed or an unknown ``<response>`` (:func:`loss_reason`).
LOSS_REASONS = ("request_failed", *LOSS_ORDER)


def loss_rows(records: list[dict[str, Any]], judged: Sequence[str]) -> list[dict[str, Any]]:
    """Re-asks and losses by reason per model x dataset x condition: ``reasked`` answers and how many
    the re-ask ``recovered``; ``lost`` trials without a label, split by reason (``lost_<reason>``,
    :data:`LOSS_REASONS`); in the ``judged`` conditions, the judge's re-asks and recoveries, its
    incomplete and failed replies, and the refusals never sent to it (``judge_skipped_refused``:
    left out of every judge mean)."""
    rows = []
    for (m, d, c), rs in sorted(_groups(records, "model", "dataset", "condition").items()):
        answered = [r for r in rs if r["status"] == "answered"]
        reasons = [loss_reason(r["parsed"]) for r in answered]
        reasked = [r for r in answered if "reask" in r]
        judge = [r["judge"] for r in answered if "judge" in r]
        jre = [j for j in judge if "reask" in j]
        row: dict[str, Any] = {"model": m, "dataset": d, "condition": c, "trials": len(rs), "reasked": len(reasked),
                               "recovered": sum(r["parsed"]["response"] is not None for r in reasked),
                               "lost": len(rs) - len(answered) + sum(x is not None for x in reasons),
                               "lost_request_failed": len(rs) - len(answered),
                               **{f"lost_{k}": reasons.count(k) for k in LOSS_ORDER},
                               "judge_reasked": len(jre), "judge_recovered": sum(bool(j.get("complete")) for j in jre),
                               "judge_incomplete": sum(not j.get("complete") and "error" not in j for j in judge),
                               "judge_failed": sum("error" in j for j in judge),
                               "judge_skipped_refused": sum(refused(r["parsed"]) for r in answered) if c in judged else 0}  # fmt: skip
        rows.append(row)
    return rows


def losses_md(rows: list[dict[str, Any]]) -> str:
    """The losses table with the sentence that says how to read it."""
    return ("Re-asks and losses by reason, per model x dataset x condition: reasked / recovered (a re-ask gave a label); lost = trials "
            "without a label, by reason (request_failed: the endpoint failed after its retries; refused: the reply declines to answer; "
            "missing / unclosed / not_in_options: the <response> after the re-ask); judge_*: the judge's re-asks, recoveries, replies "
            "without every score and failures; judge_skipped_refused: refusals never judged (in no judge mean).\n\n" + rows_md(rows))


def judge_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for (m, c), rs in sorted(_groups(records, "model", "condition").items()):
        judged = [r["judge"]["scores"] for r in rs if r.get("judge", {}).get("scores")]
        row: dict[str, Any] = {"model": m, "condition": c, "judged": len(judged)}
        for k in METRICS:
            v = [s[k] for s in judged if k in s]
            row[k] = float(np.mean(v)) if v else math.nan
        g = [r["judge_global"]["scores"][GLOBAL_METRIC] for r in rs if GLOBAL_METRIC in r.get("judge_global", {}).get("scores", {})]
        if g:
            row[GLOBAL_METRIC] = float(np.mean(g))
        rep = [r["reproducibility"]["jaccard"] for r in rs if r.get("reproducibility", {}).get("jaccard") is not None]
        if rep:
            row["reproducibility"] = float(np.mean(rep))
        rows.append(row)
    return rows


def checker_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for (m, d), rs in sorted(_groups([r for r in records if "checker" in r], "model", "dataset").items()):
        ch = [r["checker"] for r in rs]
        share = lambda key, ch=ch: float(np.mean([bool(c[key]) for c in ch]))  # noqa: E731
        rows.append({"model": m, "dataset": d, "outputs": len(ch), "syntactic_validity": float(np.mean([c["syntactic_validity"] for c in ch])),
                     "valid": share("valid"), "placeholders": float(np.mean([bool(c["placeholders"]) for c in ch])),
                     "claimed_necessary": share("claimed_necessary"), "fired_match": share("fired_match"),
                     "entails_response": share("entails_response"), "consistent": share("consistent"),
                     "correct": float(np.mean([bool(r.get("correct")) for r in rs]))})  # fmt: skip
    return rows


# ------------------------------------------------------------------ tables as the paper
#: Accuracy and SE are shown in percent, as the paper's tables do.
PERCENT = 100.0


def _answered(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["status"] == "answered"]


def _in_order(keys: Sequence[Any], order: Sequence[Any]) -> list[Any]:
    """``keys`` in ``order`` first (the configured conditions), the rest sorted."""
    return [k for k in order if k in keys] + sorted(k for k in keys if k not in order)


def accuracy_by(records: list[dict[str, Any]], key: str, conditions: Sequence[str]) -> list[dict[str, Any]]:
    """Accuracy by condition x ``key`` (``model``: the paper's Table 4, aggregated over datasets and
    episodes; ``dataset``: Table 5, over models): ``n`` answered trials, accuracy and its SE."""
    groups = _groups(_answered(records), "condition", key)
    rows = []
    for c in _in_order({g[0] for g in groups}, conditions):
        for v in sorted({g[1] for g in groups if g[0] == c}):
            a = stats.accuracy([r["correct"] for r in groups[(c, v)]])
            rows.append({"condition": c, key: v, "n": a["n"], "accuracy": a["acc"], "se": a["se"]})
    return rows


def accuracy_nk_rows(records: list[dict[str, Any]], conditions: Sequence[str]) -> list[dict[str, Any]]:
    """Accuracy per model x dataset x condition x N x K (the paper's Appendix D, Tables 7-10)."""
    groups = _groups(_answered(records), "model", "dataset", "condition", "n_way", "k_shot")
    order = {c: i for i, c in enumerate(_in_order({g[2] for g in groups}, conditions))}
    rows = []
    for m, d, c, n, k in sorted(groups, key=lambda g: (g[0], g[1], order[g[2]], g[3], g[4])):
        a = stats.accuracy([r["correct"] for r in groups[(m, d, c, n, k)]])
        rows.append({"model": m, "dataset": d, "condition": c, "n_way": n, "k_shot": k, "n": a["n"], "accuracy": a["acc"], "se": a["se"]})
    return rows


def judge_by_condition_rows(records: list[dict[str, Any]], conditions: Sequence[str]) -> list[dict[str, Any]]:
    """Mean judge score (and SE, n) per condition x metric over every model, dataset and episode
    (the paper's Table 6); a score counts where the judge gave it."""
    groups = _groups([r for r in records if r.get("judge", {}).get("scores")], "condition")
    rows = []
    for c in _in_order({g[0] for g in groups}, conditions):
        for metric in METRICS:
            ms = stats.mean_se([r["judge"]["scores"][metric] for r in groups[(c,)] if metric in r["judge"]["scores"]])
            rows.append({"condition": c, "metric": metric, "n": ms["n"], "mean": ms["mean"], "se": ms["se"]})
    return rows


def _cell(x: float, se: float, scale: float, digits: int) -> str:
    return "n/a" if math.isnan(x) else f"{scale * x:.{digits}f} ({'n/a' if math.isnan(se) else f'{scale * se:.{digits}f}'})"


def _wide(rows: list[dict[str, Any]], row_key: str, col_key: str, cell: Any) -> str:
    """A markdown table: one row per ``row_key`` value, one column per ``col_key`` value."""
    if not rows:
        return "(no rows)\n"
    rkeys = list(dict.fromkeys(r[row_key] for r in rows))
    ckeys = list(dict.fromkeys(r[col_key] for r in rows))
    at = {(r[row_key], r[col_key]): r for r in rows}
    out = [{row_key: rk, **{str(ck): cell(at[(rk, ck)]) if (rk, ck) in at else "" for ck in ckeys}} for rk in rkeys]
    return markdown_table(out, [row_key, *map(str, ckeys)]) + "\n"


def _acc_cell(r: dict[str, Any]) -> str:
    return f"{_cell(r['accuracy'], r['se'], PERCENT, 1)}, n = {r['n']}"


def paper_tables_md(tables: dict[str, list[dict[str, Any]]]) -> str:
    """The paper's tables in its layout: Table 4 (condition x model), Table 5 (condition x dataset),
    Table 6 (judge means per condition) and Appendix D (per model: dataset x condition by N, K)."""
    lines = ["## Tables as the paper", "",
             "Accuracy (%) by condition and model, over every dataset and episode (Table 4): mean (SE), n trials:", "",
             _wide(tables["accuracy_by_model"], "condition", "model", _acc_cell),
             "Accuracy (%) by condition and dataset, over every model and episode (Table 5): mean (SE), n trials:", "",
             _wide(tables["accuracy_by_dataset"], "condition", "dataset", _acc_cell),
             "Judge scores (1-5) by condition, over every model, dataset and episode (Table 6): mean (SE), n judged:", "",
             _wide(tables["judge_by_condition"], "condition", "metric", lambda r: f"{_cell(r['mean'], r['se'], 1.0, 2)}, n = {r['n']}")]  # fmt: skip
    nk = tables["accuracy_by_nk"]
    for m in sorted({r["model"] for r in nk}):
        rows = [{**r, "dataset / condition": f"{r['dataset']} / {r['condition']}", "N, K": f"N={r['n_way']} K={r['k_shot']}"}
                for r in nk if r["model"] == m]  # fmt: skip
        lines += [f"Accuracy (%) of {m} by dataset, condition, N and K (Appendix D): mean (n trials):", "",
                  _wide(rows, "dataset / condition", "N, K", lambda r: f"{PERCENT * r['accuracy']:.1f} ({r['n']})")]  # fmt: skip
    return "\n".join(lines)


def spearman_by_condition(records: list[dict[str, Any]], conditions: Sequence[str], correction: str) -> dict[str, Any]:
    """Spearman(metric, correct) per metric x judged condition over every model, dataset and
    episode, the p-values corrected over the whole family of metric x condition tests (the paper's
    Figure 3: 9 metrics x 4 conditions = 36 tests, Bonferroni). ``planned``: metrics x judged
    conditions; ``family``: the tests run (a constant metric or outcome gives none)."""
    scored = [r for r in records if r.get("judge", {}).get("complete")]
    judged = _in_order({r["condition"] for r in scored}, conditions)
    rows = []
    for c in judged:
        rs = [r for r in scored if r["condition"] == c]
        rows += [{"condition": c, **row} for row in stats.spearman_rows({k: [r["judge"]["scores"][k] for r in rs] for k in METRICS},
                                                                       [r["correct"] for r in rs])]  # fmt: skip
    family = stats.correct_rows(rows, correction)
    return {"correction": correction, "planned": len(METRICS) * len(judged), "family": family, "rows": rows}


def statistics(records: list[dict[str, Any]], conditions: list[str], correction: str) -> dict[str, Any]:
    """Per model x dataset: McNemar for every pair of conditions, Cochran's Q, and per judge metric
    Friedman, Wilcoxon for every pair, Spearman(metric, correct) corrected over the metrics."""
    out: dict[str, Any] = {}
    for (m, d), rs in sorted(_groups([r for r in records if r["status"] == "answered"], "model", "dataset").items()):
        by = {(r["condition"], r["episode"]): r for r in rs}
        eps = sorted({r["episode"] for r in rs if all((c, r["episode"]) in by for c in conditions)})
        key = f"{m}/{d}"
        res: dict[str, Any] = {"episodes_paired": len(eps)}
        if eps:
            corr = np.array([[by[(c, e)]["correct"] for c in conditions] for e in eps], dtype=bool)
            res["mcnemar"] = {f"{a} vs {b}": stats.mcnemar_exact(corr[:, i], corr[:, j])
                              for i, a in enumerate(conditions) for j, b in enumerate(conditions) if i < j}  # fmt: skip
            adjusted = stats.correct_pvalues([v["p"] for v in res["mcnemar"].values()], correction)  # over every pair
            for v, p_adj in zip(res["mcnemar"].values(), adjusted):
                v["p_adjusted"] = float(p_adj)
            if len(conditions) >= 2:
                res["cochrans_q"] = stats.cochrans_q(corr.astype(float))
        judged = [c for c in conditions if any(by.get((c, e), {}).get("judge", {}).get("complete") for e in eps)]
        jeps = [e for e in eps if all(by[(c, e)].get("judge", {}).get("complete") for c in judged)]
        res["judge_episodes"], res["judged_conditions"] = len(jeps), judged  # the n of every judge test below
        if jeps and len(judged) >= 2:
            res["judge"] = {}
            for metric in METRICS:
                t = np.array([[by[(c, e)]["judge"]["scores"][metric] for c in judged] for e in jeps], dtype=float)
                entry: dict[str, Any] = {"wilcoxon": {f"{a} vs {b}": stats.wilcoxon(t[:, i], t[:, j])
                                                      for i, a in enumerate(judged) for j, b in enumerate(judged) if i < j}}  # fmt: skip
                if len(judged) >= 3:
                    entry["friedman"] = stats.friedman(t)
                res["judge"][metric] = entry
        scored = [r for r in rs if r.get("judge", {}).get("complete")]
        if scored:
            scores = {k: [r["judge"]["scores"][k] for r in scored] for k in METRICS}
            res["spearman_vs_correct"] = stats.spearman_with_correctness(scores, [r["correct"] for r in scored], correction)
        out[key] = res
    return out


def read_human_scores(path: str) -> list[dict[str, Any]]:
    """The rows of a human-scores CSV (a ``trial`` column and metric columns, 1-5), read before the
    run starts so a bad file costs no request; every score a number."""
    p = Path(path)
    try:
        with p.open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except OSError as err:
        raise ValueError(f"statistics.human_scores: cannot read {p} ({err.strerror})") from None
    except (csv.Error, UnicodeDecodeError) as err:
        raise ValueError(f"statistics.human_scores: {p} is not a UTF-8 CSV file ({str(err).splitlines()[0]})") from None
    if not rows or "trial" not in rows[0]:
        raise ValueError(f"statistics.human_scores: {p} needs a header with a 'trial' column and metric columns")
    for i, row in enumerate(rows, 2):
        for metric in METRICS:
            value = (row.get(metric) or "").strip()
            try:
                if value and not math.isfinite(float(value)):
                    raise ValueError
            except ValueError:
                raise ValueError(f"statistics.human_scores: {p} line {i}: {metric}={value!r} is not a number") from None
    return rows


def human_agreement(rows: list[dict[str, Any]], records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Judge vs human per metric from the rows of :func:`read_human_scores`."""
    by_trial = {r["trial"]: r["judge"]["scores"] for r in records if r.get("judge", {}).get("scores")}
    out = []
    for metric in [m for m in METRICS if m in rows[0]]:
        j, h = [], []
        for row in rows:
            if row["trial"] in by_trial and metric in by_trial[row["trial"]] and (row.get(metric) or "").strip():
                h.append(float(row[metric]))
                j.append(by_trial[row["trial"]][metric])
        out.append({"metric": metric, **stats.judge_vs_human(j, h)})
    return out


def radar_chart(rows: list[dict[str, Any]], path: Path) -> None:
    """One polar panel per model: the nine mean judge scores of each condition."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = sorted({r["model"] for r in rows})
    if not models:
        return
    angles = np.linspace(0, 2 * np.pi, len(METRICS), endpoint=False)
    fig, axes = plt.subplots(1, len(models), subplot_kw={"polar": True}, figsize=(5.5 * len(models), 5.5), squeeze=False)
    for ax, m in zip(axes[0], models):
        for r in [r for r in rows if r["model"] == m]:
            v = np.array([r[k] for k in METRICS], dtype=float)
            if np.isnan(v).all():
                continue
            v = np.nan_to_num(v)
            ax.plot(np.r_[angles, angles[:1]], np.r_[v, v[:1]], label=r["condition"])
            ax.fill(np.r_[angles, angles[:1]], np.r_[v, v[:1]], alpha=0.08)
        ax.set_xticks(angles)
        ax.set_xticklabels([k.replace("_", "\n") for k in METRICS], fontsize=7)
        ax.set_ylim(0, 5)
        ax.set_title(m)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="lower right", fontsize=7, bbox_to_anchor=(1.25, -0.1))
        else:
            ax.set_title(f"{m} (no judged scores)")
    fig.tight_layout()
    savefig_atomic(fig, path, dpi=110)
    plt.close(fig)


#: The key of :func:`spearman_by_condition`'s result in ``stats.json`` (per model x dataset keys hold a '/').
SPEARMAN_KEY = "spearman_by_condition"


def stats_md(st: dict[str, Any], correction: str) -> str:
    lines = []
    for key, res in st.items():
        if key == "judge_vs_human":
            lines += ["## judge vs human", "", rows_md(res)]
            continue
        if key == SPEARMAN_KEY:
            lines += ["## Spearman(metric, correct) per condition, over every model, dataset and episode", "",
                      f"p adjusted ({res['correction']}) over the family of {res['family']} tests "
                      f"({res['planned']} planned: {len(METRICS)} metrics x the judged conditions; a constant metric or outcome is no test), "
                      "n per test:", "", rows_md(res["rows"])]  # fmt: skip
            continue
        lines += [f"## {key}", "", f"episodes paired across conditions: {res['episodes_paired']}", ""]
        if "cochrans_q" in res:
            q = res["cochrans_q"]
            lines.append(f"Cochran's Q = {q['q']:.3f} (df {q['df']}), p = {q['p']:.4g}")
        for pair, v in res.get("mcnemar", {}).items():
            lines.append(f"- McNemar (exact) {pair}, n = {res['episodes_paired']}: {v['a_only']} vs {v['b_only']} discordant, "
                         f"p = {v['p']:.4g}, {correction}-adjusted over the {len(res['mcnemar'])} pairs p = {v['p_adjusted']:.4g}")  # fmt: skip
        if "spearman_vs_correct" in res:
            lines += ["", f"Spearman(metric, correct), p adjusted ({correction}) over the {len(METRICS)} metrics:", "",
                      rows_md(res["spearman_vs_correct"])]  # fmt: skip
        if res.get("judge"):
            lines += ["", f"judge tests on the {res['judge_episodes']} episodes judged completely in every judged condition "
                          f"({', '.join(res['judged_conditions'])}):"]  # fmt: skip
        for metric, v in res.get("judge", {}).items():
            if "friedman" in v:
                lines.append(f"- {metric}: Friedman chi2 = {v['friedman']['stat']:.3f}, p = {v['friedman']['p']:.4g}, "
                             f"n = {res['judge_episodes']}")  # fmt: skip
        lines.append("")
    return "\n".join(lines) + "\n"
