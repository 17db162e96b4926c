"""Which tests pass by a hair? Every passing numeric comparison of the suite, under several numerics.

    python benchmarks/margin_audit.py -- tests/interventions -m slow     # pytest arguments after --
    python benchmarks/margin_audit.py --report sweeps/margins              # re-print a finished audit

Runs the given tests once per *numerics* — one torch thread (the suite's default), two threads,
and "another CPU" (torch's kernels without vectorisation ``ATEN_CPU_CAPABILITY=default``, MKL on
SSE4.2 and OpenBLAS on a Prescott core: other reduction orders, as another machine's would be) —
with pytest's assertion-pass hook recording each ``a <op> b`` that passed with numbers on both
sides. It then prints, per assertion, the value under each numerics, the bound and the smallest
margin (``a - b`` for ``>``/``>=``, ``b - a`` for ``<``/``<=``), tightest first: an assertion whose
value moves between numerics by more than its margin would fail on some machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NUMERICS = {
    "1 thread": {"OMP_NUM_THREADS": "1"},
    "2 threads": {"OMP_NUM_THREADS": "2"},
    "another CPU": {"OMP_NUM_THREADS": "1", "ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
                    "OPENBLAS_CORETYPE": "Prescott"},
}  # fmt: skip
NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
COMPARISON = re.compile(rf"^({NUM}) (>=|>|<=|<) ({NUM})$")
#: The pytest plugin (this module, loaded with ``-p margin_audit``) appends records here.
LOG_ENV = "CBM_MARGIN_LOG"


def pytest_assertion_pass(item, lineno, orig, expl):  # noqa: ANN001 - pytest hook
    """Record a passing ``number <op> number`` assertion."""
    path = os.environ.get(LOG_ENV)
    m = COMPARISON.match(expl.splitlines()[0].strip()) if path and expl else None
    if m is None:
        return
    rec = {"test": item.nodeid, "line": lineno, "expr": orig, "value": float(m.group(1)), "op": m.group(2), "bound": float(m.group(3))}
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\n")


def margin(value: float, op: str, bound: float) -> float:
    return value - bound if op in (">", ">=") else bound - value


def run(out: Path, pytest_args: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, env in NUMERICS.items():
        log = out / f"{name.replace(' ', '_')}.jsonl"
        log.unlink(missing_ok=True)
        full = {**os.environ, **env, LOG_ENV: str(log), "PYTHONPATH": f"{ROOT / 'benchmarks'}:{os.environ.get('PYTHONPATH', '')}",
                "PYTHONPYCACHEPREFIX": tempfile.mkdtemp(prefix="margin-pyc-")}  # fmt: skip
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "margin_audit", "-o", "enable_assertion_pass_hook=true",
               "-p", "no:cacheprovider", *pytest_args]  # fmt: skip
        print(f"== {name}: {' '.join(cmd[3:])}", flush=True)
        res = subprocess.run(cmd, cwd=ROOT, env=full, capture_output=True, text=True)
        tail = res.stdout.strip().splitlines()[-1:] or ["(no output)"]
        print(f"   {tail[0]}", flush=True)
        (out / f"{name.replace(' ', '_')}.out").write_text(res.stdout + res.stderr)


def report(out: Path, top: int) -> list[dict]:
    """Assertions with their value under each numerics, tightest relative margin first."""
    rows: dict[tuple, dict] = defaultdict(dict)
    for name in NUMERICS:
        log = out / f"{name.replace(' ', '_')}.jsonl"
        if not log.is_file():
            continue
        for line in log.read_text().splitlines():
            r = json.loads(line)
            key = (r["test"], r["line"], r["expr"], r["op"], r["bound"])
            rows[key].setdefault(name, []).append(r["value"])
    table = []
    for (test, line, expr, op, bound), values in rows.items():
        flat = [v for vs in values.values() for v in vs]
        worst = min(margin(v, op, bound) for v in flat)
        spread = max(flat) - min(flat)
        scale = max(abs(bound), 1e-12)
        table.append({"test": test, "line": line, "expr": expr, "op": op, "bound": bound, "worst_margin": worst,
                      "relative": worst / scale, "spread": spread, "moves": spread > 0, "values": values})  # fmt: skip
    table.sort(key=lambda r: (not r["moves"], r["worst_margin"] - r["spread"]))
    print(f"{len(table)} numeric assertions; {sum(r['moves'] for r in table)} move between numerics")
    print("| test:line | assertion | bound | min margin | spread over numerics | values |")
    print("|---|---|---|---|---|---|")
    for r in table[:top]:
        vals = "; ".join(f"{k}: {min(v):.6g}" + (f"..{max(v):.6g}" if max(v) != min(v) else "") for k, v in r["values"].items())
        print(f"| {r['test'].split('::')[-1][:60]}:{r['line']} | `{r['expr'][:50]}` | {r['op']} {r['bound']:.6g} | "
              f"{r['worst_margin']:.4g} | {r['spread']:.4g} | {vals} |")  # fmt: skip
    (out / "margins.json").write_text(json.dumps(table, indent=1))
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "sweeps" / "margins")
    ap.add_argument("--report", type=Path, help="only print the report of a finished audit in this folder")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("pytest_args", nargs="*")
    a = ap.parse_args()
    if a.report is not None:
        report(a.report, a.top)
        return
    run(a.out, a.pytest_args)
    report(a.out, a.top)


if __name__ == "__main__":
    main()
