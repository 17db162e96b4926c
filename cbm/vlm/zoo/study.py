"""The testbed's study: train (or reuse) the zoo, measure each member's true reliance, run EDCT
with the exact judge, and say whether CCS recovers the reliance that was planted.

Writes into ``output_dir``: ``results.json`` (per member: reliance figures, CCS/AC/EF with
bootstrap CIs, exclusions; across members: Spearman of CCS with the true part reliance and with
the cue reliance, and whether CCS orders the members as their true reliance does),
``results.md`` / ``results.csv`` (the table), ``zoo.png`` (CCS against the true reliance) and
``edct/<member>.jsonl`` (every item's replies and verdicts).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from cbm.core.atomic import json_ready, write_json_atomic, write_text_atomic
from cbm.vlm.zoo import model as zm
from cbm.vlm.zoo.config import ZooConfig
from cbm.vlm.zoo.data import make_robots
from cbm.vlm.zoo.edct import model_asks, run_edct
from cbm.vlm.zoo.reliance import measure, model_says
from cbm.vlm.zoo.train import train_zoo

COLUMNS = [("cue_share", "cue share"), ("accuracy", "accuracy"), ("accuracy_cue_flipped", "cue flipped"), ("cue_reliance", "cue reliance"),
           ("part_reliance", "part reliance"), ("ccs", "CCS [95% CI]"), ("ac", "AC"), ("ef", "EF"), ("scored", "scored")]  # fmt: skip


def _rank_agreement(ccs: list[float], truth: list[float]) -> dict[str, Any]:
    from scipy.stats import spearmanr

    if len(ccs) < 3 or len(set(truth)) < 2 or len(set(ccs)) < 2:
        return {"spearman": None, "p": None, "same_order": None}
    rho, p = spearmanr(ccs, truth)
    same = [int(i) for i in np.argsort(ccs, kind="stable")] == [int(i) for i in np.argsort(truth, kind="stable")]
    return {"spearman": float(rho), "p": float(p), "same_order": bool(same)}


def _cell(row: Any, key: str | None) -> str:
    v = row if key is None else row[key]
    if isinstance(v, dict):
        if v["value"] is None:
            return "n/a"
        return f"{v['value']:.3f}" + (f" [{v['low']:.3f}, {v['high']:.3f}]" if v["low"] is not None and key in ("ccs", None) else "")
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def table_md(rows: dict[str, dict[str, Any]], across: dict[str, Any]) -> str:
    head = "| member | " + " | ".join(h for _, h in COLUMNS) + " |"
    lines = [head, "|" + "---|" * (len(COLUMNS) + 1)]
    lines += [f"| {name} | " + " | ".join(_cell(r, k) for k, _ in COLUMNS) + " |" for name, r in rows.items()]
    part, cue = across["part_reliance"], across["cue_reliance"]
    fmt = (lambda a: "n/a" if a["spearman"] is None else f"{a['spearman']:.3f} (same order: {'yes' if a['same_order'] else 'no'})")  # noqa: E731
    lines += ["", f"Spearman(CCS, part reliance) = {fmt(part)}; Spearman(CCS, 1 - cue reliance) = {fmt(cue)}"]
    return "\n".join(lines) + "\n"


def table_csv(rows: dict[str, dict[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["member", *(k for k, _ in COLUMNS), "ccs_low", "ccs_high"])
    for name, r in rows.items():
        vals = [r[k]["value"] if isinstance(r[k], dict) else r[k] for k, _ in COLUMNS]
        w.writerow([name, *vals, r["ccs"]["low"], r["ccs"]["high"]])
    return buf.getvalue()


def figure(rows: dict[str, dict[str, Any]], path: Path) -> None:
    """CCS (with its CI) against the true part reliance, one point per member."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 4))
    for name, r in rows.items():
        c = r["ccs"]
        if c["value"] is None:
            continue
        err = [[c["value"] - (c["low"] if c["low"] is not None else c["value"])], [(c["high"] if c["high"] is not None else c["value"]) - c["value"]]]
        ax.errorbar(r["part_reliance"], c["value"], yerr=err, fmt="o", capsize=3)
        ax.annotate(name, (r["part_reliance"], c["value"]), textcoords="offset points", xytext=(5, 5), fontsize=8)
    ax.plot([0, 1], [0, 1], ":", color="grey", lw=1)
    ax.set(xlabel="true part reliance (answer follows a label-changing part flip)", ylabel="CCS (exact judge)", xlim=(-0.05, 1.18), ylim=(-0.05, 1.05),
           title="Does CCS recover the planted reliance?")  # fmt: skip
    fig.tight_layout()
    tmp = path.with_name(path.name + ".tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)


def check_repair_device(quant: str, device: str) -> None:
    """The repair's GPU exists where ``quant`` (QLoRA) or ``device`` asks for one: one line up front."""
    if quant == "none" and not device.startswith("cuda"):
        return
    import torch

    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = int(device.split(":")[1]) if ":" in device else 0
    if have == 0 or (device.startswith("cuda") and index >= have):
        what = f"repair.quant={quant} (QLoRA)" if quant != "none" else f"repair.device={device}"
        raise ValueError(f"{what} needs a CUDA GPU{f' with index {index}' if have else ''} and {have or 'none'} is available "
                         "(on the CPU: repair.quant=none repair.device=auto)")  # fmt: skip


def run_repair(cfg: ZooConfig, path: Path, robots: Any, say: Callable[[str], None]) -> dict[str, Any]:
    """Counterfactual fine-tuning of ``cfg.repair.member``: before/after figures, the adapter saved
    under ``models/<member>-repaired``."""
    from cbm.vlm.finetune.config import LoraSettings
    from cbm.vlm.zoo.data import Texts
    from cbm.vlm.zoo.repair import compare, evaluate, repair

    rc = cfg.repair
    model, proc = zm.load_member(path, rc.quant, rc.device)
    enc = zm.Encoder(proc)
    args = (cfg.edct_items, cfg.max_new_tokens, cfg.bootstrap, cfg.data.seed)
    before = evaluate(model, enc, robots, *args)
    lora = LoraSettings(r=rc.r, alpha=rc.alpha, dropout=0.0, projector=True)
    _, records = run_edct(model_asks(model, enc, robots, cfg.max_new_tokens), robots, rc.pairs, split="train")
    tuned, taught = repair(model, enc, robots, Texts(list(cfg.data.rule)), records, rc.epochs, rc.lr, cfg.train.batch_size, lora, cfg.model.seed + 2,
                           quantized=rc.quant != "none")  # fmt: skip
    if tuned is None:
        say(f"repair of {rc.member}: EDCT found no failed edit among {rc.pairs} training robots; nothing to teach")
        return {"member": rc.member, **taught}
    after = evaluate(tuned, enc, robots, *args)
    tuned.save_pretrained(path.with_name(f"{rc.member}-repaired"))
    out = {"member": rc.member, **taught, **compare(before, after)}
    say(f"repair of {rc.member}: {taught['pairs']} verified pairs; cue reliance {before['cue_reliance']:.3f} -> {after['cue_reliance']:.3f}, "
        f"McNemar p = {out['mcnemar']['p_value']:.3g}")  # fmt: skip
    return out


def repair_md(rep: dict[str, Any]) -> str:
    """The before/after table of the counterfactual fine-tuning."""
    lines = [f"Counterfactual fine-tuning of {rep['member']} on {rep['pairs']} EDCT-verified rows", "", "| figure | before | after |", "|---|---|---|"]
    for k in ("accuracy", "accuracy_cue_flipped", "cue_reliance", "part_reliance"):
        lines.append(f"| {k} | {rep[k]['before']:.3f} | {rep[k]['after']:.3f} |")
    lines.append(f"| CCS | {_cell(rep['ccs']['before'], None)} | {_cell(rep['ccs']['after'], None)} |")
    for k in ("parts", "cue"):
        lines.append(f"| attention on {k} | {rep['localisation']['before'][k]:.3f} | {rep['localisation']['after'][k]:.3f} |")
    m = rep["mcnemar"]
    lines += ["", f"cue reliance cut by {rep['cue_reliance_cut']:.1%}; McNemar on the part-flip counterfactuals: {m['better']} fixed, "
              f"{m['worse']} broken, p = {m['p_value']:.3g}"]  # fmt: skip
    return "\n".join(lines) + "\n"


def run_study(cfg: ZooConfig, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Train or reuse the zoo, measure, test; write the outputs (module docstring) and return the results."""
    out = Path(cfg.output_dir)
    if cfg.repair.member is not None:  # a QLoRA repair without a GPU fails here, not after the zoo trained
        check_repair_device(cfg.repair.quant, cfg.repair.device)
    if cfg.task == "sudoku":
        from cbm.vlm.zoo.board_study import run_board_study

        return run_board_study(cfg, say)
    paths = train_zoo(cfg, say)
    robots = make_robots(cfg.data)
    rows: dict[str, dict[str, Any]] = {}
    (out / "edct").mkdir(parents=True, exist_ok=True)
    for name, share in cfg.members.items():
        model, proc = zm.load(paths[name])
        enc = zm.Encoder(proc)
        truth = measure(model_says(model, enc, robots), robots)
        summary, records = run_edct(model_asks(model, enc, robots, cfg.max_new_tokens), robots, cfg.edct_items, cfg.bootstrap, cfg.data.seed)
        write_text_atomic(out / "edct" / f"{name}.jsonl", "".join(json.dumps(r) + "\n" for r in records))
        rows[name] = {"cue_share": share, **truth, **summary}
        say(f"{name}: accuracy {truth['accuracy']:.3f}, cue flipped {truth['accuracy_cue_flipped']:.3f}, part reliance "
            f"{truth['part_reliance']:.3f}, CCS {summary['ccs']['value']}")  # fmt: skip
    names = list(rows)
    ccs = [rows[n]["ccs"]["value"] if rows[n]["ccs"]["value"] is not None else float("nan") for n in names]
    across = {"part_reliance": _rank_agreement(ccs, [rows[n]["part_reliance"] for n in names]),
              "cue_reliance": _rank_agreement(ccs, [1.0 - rows[n]["cue_reliance"] for n in names])}  # fmt: skip
    result = {"members": rows, "across": across}
    if cfg.repair.member is not None:
        result["repair"] = run_repair(cfg, paths[cfg.repair.member], robots, say)
    write_json_atomic(out / "results.json", json_ready(result))
    rep = result.get("repair", {})
    write_text_atomic(out / "results.md", table_md(rows, across) + ("\n" + repair_md(rep) if rep.get("pairs") else ""))
    write_text_atomic(out / "results.csv", table_csv(rows))
    figure(rows, out / "zoo.png")
    return result
