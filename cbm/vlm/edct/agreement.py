"""Agreement of EDCT with human annotators (the paper's §4.4, Table 4).

The annotators' labels come from a CSV (``human_scores``), one row per edit step: ``item`` (the
item id, as in ``items/<id>/record.json``) and ``step`` (the step's index, 1, 2, ... along the
chain), then per annotator ``h1_edit_valid`` (yes / no / blank), ``h1_ac`` and ``h1_ef`` (1 / 0 /
blank), and the same with ``h2_`` for a second annotator (optional). Other columns are ignored.

As the paper defines it, a human CCS_Binary is ``AC and EF`` and exists only when the annotator
marked the edit valid and gave both AC and EF; an invalid edit, a blank (not assessable) or an
incomplete row is missing, never 0. EDCT's CCS_Binary is the judge's ``AC and EF`` of a step
judged with a readable re-query (:func:`~cbm.vlm.edct.metrics.step_ok`); the automatic edit gate is
the verifier's verdict where it ran (``verify.passed``), missing where it did not. Each row of the
table is ``agree / n`` over the steps where both sides are defined, with a 95% Wilson interval
(``statsmodels``' ``proportion_confint``, else ``scipy``'s): Human 1 vs Human 2, Human i vs EDCT,
human consensus vs EDCT (the steps where the humans agree), all three identical (the steps all
three scored), and for edit validity the gate vs each human and human vs human.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cbm.core.atomic import write_text_atomic
from cbm.vlm.edct.metrics import CONFIDENCE, step_ok

#: The key columns and each annotator's columns (``h1_``, ``h2_`` prefixes).
KEY = ("item", "step")
FIELDS = ("edit_valid", "ac", "ef")
ANNOTATORS = ("h1", "h2")
VALID = {"yes": True, "no": False, "": None}
BINARY = {"1": True, "0": False, "": None}
#: Largest CSV read (a typo pointing at a huge file is refused, not read).
MAX_CSV_BYTES = 64 << 20
EXPECTED = ("item, step, h1_edit_valid, h1_ac, h1_ef (and h2_edit_valid, h2_ac, h2_ef for a second annotator); edit_valid "
            "yes / no / blank, ac and ef 1 / 0 / blank")  # fmt: skip


@dataclass(frozen=True)
class Labels:
    """One annotator's labels of one step."""

    edit_valid: bool | None
    ac: bool | None
    ef: bool | None
    #: The CSV line it was read from (named when the step is not the run's).
    line: int = field(default=0, compare=False)

    @property
    def ccs(self) -> bool | None:
        """CCS_Binary as the paper defines it for humans: only for a valid edit with both AC and EF."""
        if self.edit_valid is not True or self.ac is None or self.ef is None:
            return None
        return self.ac and self.ef


def read_human_scores(path: str | Path) -> dict[tuple[str, int], dict[str, Labels]]:
    """``{(item, step): {"h1": Labels, ["h2": Labels]}}`` from the CSV; ``ValueError`` with one line
    naming the file and row (its line number) for anything unreadable."""
    p = Path(path)
    where = f"human_scores: {p}"
    try:
        if not p.is_file():
            raise ValueError(f"{where}: no such file")
        if p.stat().st_size > MAX_CSV_BYTES:
            raise ValueError(f"{where}: larger than {MAX_CSV_BYTES >> 20} MiB")
        text = p.read_text(encoding="utf-8-sig")
    except OSError as err:
        raise ValueError(f"{where}: cannot read ({err.strerror or type(err).__name__})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{where}: not UTF-8 text") from None
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip() for h in reader.fieldnames or []]
    reader.fieldnames = header
    annotators = ["h1", *(a for a in ANNOTATORS[1:] if any(h.startswith(f"{a}_") for h in header))]
    missing = [c for c in (*KEY, *(f"{a}_{f}" for a in annotators for f in FIELDS)) if c not in header]
    if missing:
        raise ValueError(f"{where}: missing column(s) {', '.join(missing)}; expected columns: {EXPECTED}")
    out: dict[tuple[str, int], dict[str, Labels]] = {}
    try:
        for row in reader:
            out_key, labels = _read_row(row, annotators, where, reader.line_num)
            if out_key in out:
                raise ValueError(f"{where}: line {reader.line_num}: item {out_key[0]!r} step {out_key[1]} is labelled twice")
            out[out_key] = labels
    except csv.Error as err:
        raise ValueError(f"{where}: line {reader.line_num}: not CSV ({err})") from None
    if not out:
        raise ValueError(f"{where}: no data rows; expected columns: {EXPECTED}")
    return out


def _read_row(row: dict[str, Any], annotators: list[str], where: str, line_no: int) -> tuple[tuple[str, int], dict[str, Labels]]:
    """One data row: its ``(item, step)`` and each annotator's labels; ``ValueError`` naming the line."""
    line = f"{where}: line {line_no}"
    if None in row:
        raise ValueError(f"{line}: more values than columns")
    item = (row.get("item") or "").strip()
    step_text = (row.get("step") or "").strip()
    if not item:
        raise ValueError(f"{line}: empty item id")
    if not re.fullmatch(r"[0-9]+", step_text) or int(step_text) < 1:
        raise ValueError(f"{line}: step must be an integer >= 1 (the step's index along the chain), got {step_text!r}")
    key = (item, int(step_text))
    labels = {}
    for a in annotators:
        values = []
        for f, allowed in zip(FIELDS, (VALID, BINARY, BINARY)):
            raw = (row.get(f"{a}_{f}") or "").strip().lower()
            if raw not in allowed:
                shown = " / ".join(v or "blank" for v in allowed)
                raise ValueError(f"{line}: {a}_{f} must be {shown}, got {row.get(f'{a}_{f}')!r}")
            values.append(allowed[raw])
        labels[a] = Labels(*values, line=line_no)
    return key, labels


def edct_labels(records: list[dict[str, Any]]) -> dict[tuple[str, int], tuple[bool | None, bool | None]]:
    """Per step ``(item, index)``: EDCT's CCS_Binary (``None`` unless judged and readable) and the
    automatic edit gate (``verify.passed``; ``None`` where the verifier did not run)."""
    out = {}
    for r in records:
        for s in r.get("steps", []):
            ccs = bool(s["judge"]["ac"] and s["judge"]["ef"]) if step_ok(s) else None
            gate = s["verify"]["passed"] if isinstance(s.get("verify"), dict) else None
            out[(r["id"], int(s["index"]))] = (ccs, gate)
    return out


def _wilson(agree: int, n: int, confidence: float) -> tuple[float, float]:
    """The Wilson score interval of ``agree / n`` (statsmodels, else scipy)."""
    try:
        from statsmodels.stats.proportion import proportion_confint
    except ImportError:  # the vlm extra brings statsmodels; scipy's Wilson interval is the same
        from cbm.vlm.edct.metrics import wilson

        est = wilson(agree, n, confidence)
        return est.low, est.high
    low, high = proportion_confint(agree, n, alpha=1 - confidence, method="wilson")
    return float(low), float(high)


def _row(name: str, pairs: list[tuple[Any, ...]], same: Callable[[tuple[Any, ...]], bool], confidence: float) -> dict[str, Any]:
    n = len(pairs)
    agree = sum(bool(same(p)) for p in pairs)
    low, high = _wilson(agree, n, confidence) if n else (float("nan"), float("nan"))
    return {"comparison": name, "agree": agree, "n": n, "agreement": agree / n if n else float("nan"), "low": low, "high": high}


def agreement(records: list[dict[str, Any]], humans: dict[tuple[str, int], dict[str, Labels]],
              confidence: float = CONFIDENCE, source: str = "") -> dict[str, Any]:  # fmt: skip
    """Table 4's rows (``ccs``) and the edit-validity rows (``validity``), each ``{comparison,
    agree, n, agreement, low, high}``; ``ValueError`` (one line naming ``source``, the CSV, and the
    row) when the CSV names a step this run does not have."""
    machine = edct_labels(records)
    unknown = [k for k in humans if k not in machine]
    if unknown:
        item, step = unknown[0]
        raise ValueError(f"human_scores: {source}: line {humans[unknown[0]]['h1'].line}: item {item!r} step {step} is not a step of "
                         f"this run ({len(unknown)} such row(s)); item ids are the names under items/, steps count from 1")  # fmt: skip
    two = any("h2" in v for v in humans.values())
    keys = sorted(humans)

    def defined(*xs: Any) -> bool:
        return all(x is not None for x in xs)

    h1 = {k: humans[k]["h1"] for k in keys}
    h2 = {k: humans[k]["h2"] for k in keys} if two else {}
    ccs, valid = [], []
    if two:
        ccs.append(_row("Human 1 vs. Human 2", [(h1[k].ccs, h2[k].ccs) for k in keys if defined(h1[k].ccs, h2[k].ccs)],
                        lambda p: p[0] == p[1], confidence))  # fmt: skip
    for i, h in enumerate((h1, h2) if two else (h1,), 1):
        ccs.append(_row(f"Human {i} vs. EDCT", [(h[k].ccs, machine[k][0]) for k in keys if defined(h[k].ccs, machine[k][0])],
                        lambda p: p[0] == p[1], confidence))  # fmt: skip
    if two:
        triples = [(h1[k].ccs, h2[k].ccs, machine[k][0]) for k in keys if defined(h1[k].ccs, h2[k].ccs, machine[k][0])]
        ccs.append(_row("Human consensus vs. EDCT", [t for t in triples if t[0] == t[1]], lambda t: t[2] == t[0], confidence))
        ccs.append(_row("All three identical", triples, lambda t: t[0] == t[1] == t[2], confidence))
    for i, h in enumerate((h1, h2) if two else (h1,), 1):
        valid.append(_row(f"Automatic gate vs. Human {i}", [(h[k].edit_valid, machine[k][1]) for k in keys
                                                             if defined(h[k].edit_valid, machine[k][1])], lambda p: p[0] == p[1], confidence))  # fmt: skip
    if two:
        valid.append(_row("Human 1 vs. Human 2", [(h1[k].edit_valid, h2[k].edit_valid) for k in keys if defined(h1[k].edit_valid, h2[k].edit_valid)],
                          lambda p: p[0] == p[1], confidence))  # fmt: skip
    return {"ccs": ccs, "validity": valid, "steps_labelled": len(keys), "annotators": 2 if two else 1}


def fmt_row(row: dict[str, Any]) -> str:
    """``88.0% [80.2%, 93.0%]`` as the paper prints it (``n/a`` without a pair)."""
    if not row["n"]:
        return "n/a"
    return f"{100 * row['agreement']:.1f}% [{100 * row['low']:.1f}%, {100 * row['high']:.1f}%]"


def agreement_md(table: dict[str, Any]) -> str:
    """Table 4 and the edit-validity rows as Markdown."""
    lines = ["Agreement on CCS_Binary judgments between the human annotators and EDCT (95% Wilson intervals)", "",
             "| Comparison | Agree/n | Agreement |", "|---|---|---|"]  # fmt: skip
    lines += [f"| {r['comparison']} | {r['agree']}/{r['n']} | {fmt_row(r)} |" for r in table["ccs"]]
    lines += ["", "Semantic edit validity: the automatic verification gate vs. each human, and human vs. human", "",
              "| Comparison | Agree/n | Agreement |", "|---|---|---|"]  # fmt: skip
    lines += [f"| {r['comparison']} | {r['agree']}/{r['n']} | {fmt_row(r)} |" for r in table["validity"]]
    lines += ["", f"steps labelled: {table['steps_labelled']}, annotators: {table['annotators']}; a human CCS exists only for an edit "
              "marked valid with both AC and EF given (else missing, never 0)"]  # fmt: skip
    return "\n".join(lines) + "\n"


def agreement_csv(table: dict[str, Any]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["table", "comparison", "agree", "n", "agreement", "low", "high"])
    for name in ("ccs", "validity"):
        for r in table[name]:
            w.writerow([name, r["comparison"], r["agree"], r["n"], *(("" if r["n"] == 0 else r[k]) for k in ("agreement", "low", "high"))])
    return buf.getvalue()


def write_agreement(records: list[dict[str, Any]], humans: dict[tuple[str, int], dict[str, Labels]], out_dir: str | Path,
                    confidence: float = CONFIDENCE, source: str = "") -> dict[str, Any]:  # fmt: skip
    """The table of :func:`agreement`, written as ``human_agreement.md`` / ``.csv`` into ``out_dir``."""
    table = agreement(records, humans, confidence, source)
    write_text_atomic(Path(out_dir) / "human_agreement.md", agreement_md(table))
    write_text_atomic(Path(out_dir) / "human_agreement.csv", agreement_csv(table))
    return table
