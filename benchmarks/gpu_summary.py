"""One table for a GPU check (benchmarks/gpu_all.sh, gpu_check.sh, qlora_gpu_check.sh): each step's
state and seconds (the ``steps.tsv`` that ``step`` in benchmarks/gpu_lib.sh writes) and its figures,
read from what the step wrote under the check's work folder:

    python benchmarks/gpu_summary.py --steps W/steps.tsv --work W --logs W/logs [--md S.md] [--json S.json]

Exit status 1 when a step did not pass (FAIL, TIMEOUT, SKIPPED) or missed its target (the solo run
over 10 s, a sweep's acceptance checks); a step without results says so (a dry run has none).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from seed_sweep import checks  # noqa: E402

#: The default robot run alone: training + evaluation within this many seconds (the issue's target).
SOLO_TARGET_S = 10.0
PYTEST_LINE = re.compile(r"(\d+ (passed|failed|errors?|skipped|deselected)|\d+ tests? collected|no tests ran)")


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def last_line(log: Path, pattern: re.Pattern[str] | None = None) -> str:
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    if pattern is not None:
        lines = [ln for ln in lines if pattern.search(ln)]
    return lines[-1].strip("= ") if lines else ""


def sweep(path: Path, strict: bool) -> tuple[str, bool]:
    data = _json(path)
    if not data:
        return "no results", True
    rows = data["rows"]
    bad = {r["arch"]: checks(r, strict) for r in rows}
    accs = [a for r in rows for a in r.get("task_acc", [])]
    kmax = [r["kmax_min"] for r in rows if "kmax_min" in r]
    text = f"{len(rows)} archs; task acc min {100 * min(accs):.2f}" if accs else f"{len(rows)} archs"
    if kmax:
        text += f", oracle k=max min {100 * min(kmax):.2f}"
    failed = {a: b for a, b in bad.items() if b}
    text += "; checks pass" if not failed else "; FAILED " + "; ".join(f"{a}: {', '.join(b)}" for a, b in failed.items())
    return text, not failed


def figures(name: str, work: Path, logs: Path) -> tuple[str, bool]:
    """``(text, met)`` for one step; ``met`` False when a target or acceptance check failed."""
    log = logs / f"{name}.log"
    if name.endswith("tests"):
        return last_line(log, PYTEST_LINE), True
    if name in ("robot-sweep", "sudoku-sweep"):
        return sweep(work / f"{name.split('-')[0]}.json", strict=name == "robot-sweep")
    if name == "solo":
        timing = _json(work / "solo" / "timing.json")
        if not timing:
            return "no results", True
        total = sum(timing.values())
        parts = ", ".join(f"{k} {v:.1f}" for k, v in timing.items())
        return f"training + evaluation {total:.1f} s ({parts}); target <= {SOLO_TARGET_S:.0f} s", total <= SOLO_TARGET_S
    if name == "qlora-finetune":
        r = _json(work / "finetune" / "results.json")
        if not r:
            return "no results", True
        t = r.get("timing", {})
        return (f"{r['quant']}: {r['steps']} steps, loss {r['loss_first']:.3f} -> {r['loss_last']:.3f}; "
                f"train {t.get('train_s', float('nan')):.1f} s"), True  # fmt: skip
    if name.startswith("zoo-"):
        r = _json(work / f"zoo_{name[4:]}" / "results.json")
        rep = (r or {}).get("repair")
        if not rep:
            return "no results", True
        c = rep["cue_reliance"]
        return f"cue reliance {c['before']:.3f} -> {c['after']:.3f}, McNemar p {rep['mcnemar']['p_value']:.3g}", True
    if name == "throughput":
        r = _json(work / "throughput.json")
        if not r:
            return "no results", True
        return "; ".join(f"{x['size']} {x['quant']} b{x['batch']}{' ckpt' if x['checkpointing'] else ''}: {x['tokens_per_s']:.0f} tok/s"
                         + (f", {x['peak_mib']:.0f} MiB" if x.get("peak_mib") is not None else "") for x in r["rows"]), True  # fmt: skip
    return last_line(log), True


def summarise(steps: Path, work: Path, logs: Path) -> list[dict[str, Any]]:
    out = []
    for line in steps.read_text().splitlines() if steps.exists() else []:
        name, state, seconds = (line.split("\t") + ["", ""])[:3]
        text, met = figures(name, work, logs) if state != "SKIPPED" else ("", True)
        if state == "ok" and not met:
            state = "MISSED"
        out.append({"step": name, "state": state, "seconds": int(seconds or 0), "figures": text})
    return out


def table(rows: list[dict[str, Any]], seconds: int | None) -> str:
    lines = ["| step | state | s | figures |", "|---|---|---|---|"]
    lines += [f"| {r['step']} | {r['state']} | {r['seconds']} | {r['figures'].replace('|', '/')} |" for r in rows]
    passed = all(r["state"] == "ok" for r in rows)
    total = "" if seconds is None else f" in {seconds} s"
    lines += ["", f"{len(rows)} steps{total}: {'all passed' if passed and rows else 'SOME STEPS DID NOT PASS'}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--logs", type=Path, required=True)
    ap.add_argument("--seconds", type=int)
    ap.add_argument("--md", type=Path)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    rows = summarise(a.steps, a.work, a.logs)
    text = table(rows, a.seconds)
    print(text)
    if a.md:
        a.md.write_text(text + "\n")
    if a.json:
        a.json.write_text(json.dumps({"seconds": a.seconds, "steps": rows}, indent=2) + "\n")
    return 0 if rows and all(r["state"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
