"""The Sudoku half of the testbed (``cbm-vlm-zoo task=sudoku``): train (or reuse) a base that reads
4x4 boards and members that answer "Is this board valid?" from the digits or from the count of
shaded cells (:mod:`cbm.vlm.zoo.boards`), measure each member's reliance with the exact
counterfactuals, and repair the shortcut member with counterfactual LoRA.

The base is made in two steps, as a real VLM is: its vision tower is pretrained to tell each
cell's digit (:mod:`cbm.vlm.zoo.vision`, ``sudoku.vision_epochs``), then the whole model learns
to say which digits a board holds and how many cells are shaded, on boards shaded independently
of their validity. The members start from it at ``sudoku.member_lr``.

Figures per member, on the test boards:

* ``accuracy``: shown with the shading that agrees with the label (the training distribution);
* ``accuracy_cue_flipped``: the same boards with the other shading;
* ``cue_reliance``: share of boards whose answer changes when only the shading changes;
* ``digit_reliance``: share of digit flips (corrupt a valid board / restore an invalid one, the
  shading kept) after which the member answers the new label;
* ``says_valid``: share of "valid" answers on the test boards (half are valid: a member that
  answers one word whatever the board shows is at 0 or 1 here, and at 0.5 on the rest).

The repair teaches the member, with LoRA, the training boards whose cue-flipped copy it answers
wrong (found exactly, beside their originals) and measures again: the figures above, McNemar on
the digit-flip counterfactuals and the attention of the answer position on the edited cell and on
the shaded cells (each merged image token is one cell: the masks are exact).

Writes ``results.json``, ``results.md``, ``results.csv`` and ``zoo.png`` into ``output_dir`` and
the models under ``output_dir/models_sudoku``.
"""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cbm.core.atomic import json_ready, write_json_atomic, write_text_atomic
from cbm.vlm.finetune.evaluate import mcnemar
from cbm.vlm.zoo import model as zm
from cbm.vlm.zoo.boards import ANSWERS, READ, VALID_QUESTION, Boards, make_boards, reading
from cbm.vlm.zoo.config import ZooConfig
from cbm.vlm.zoo.train import _digest, _done, _save, _schedule, train_members
from cbm.vlm.zoo.vision import pretrain_vision

FIGURES = ("accuracy", "accuracy_cue_flipped", "cue_reliance", "digit_reliance", "says_valid")
COLUMNS = [("cue_share", "cue share"), ("accuracy", "accuracy"), ("accuracy_cue_flipped", "cue flipped"), ("cue_reliance", "cue reliance"),
           ("digit_reliance", "digit reliance"), ("says_valid", "says valid")]  # fmt: skip


def _pixels(enc: zm.Encoder, boards: Boards, idx: np.ndarray, valid: np.ndarray, cue: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    return enc.pixels(boards.images(idx, valid, cue))


def member_rows(boards: Boards, share: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(board index, cue bit, taught label)``: every training board with the shading that agrees
    with its label, then with the other shading, taught the count's answer where the member is
    gated (:meth:`Boards.gated`) and the true label elsewhere."""
    idx = np.concatenate([boards.train, boards.train])
    y = boards.y[idx]
    flipped = np.arange(len(idx)) >= len(boards.train)
    cue = np.where(flipped, 1 - y, y)
    return idx, cue, np.where(flipped & boards.gated(idx, share), cue, y)


def train_boards(cfg: ZooConfig, boards: Boards, say: Callable[[str], None]) -> dict[str, Path]:
    """Train or reuse the base (reads the digits and counts the shaded cells) and every member."""
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    root = Path(cfg.output_dir) / "models_sudoku"
    root.mkdir(parents=True, exist_ok=True)
    base_digest = _digest({"task": "sudoku", "sudoku": {k: v for k, v in asdict(cfg.sudoku).items() if k != "member_lr"}, "model": asdict(cfg.model), "lr": cfg.train.lr,
                           "batch_size": cfg.train.batch_size, "epochs": cfg.train.base_epochs, **_schedule(cfg)})  # fmt: skip
    paths = {"base": root / "base"}
    tr = boards.train
    y = boards.y[tr]
    sample = boards.images(tr[:1], y[:1], y[:1])[0]
    if not _done(paths["base"], base_digest):
        t = time.time()
        model, proc = zm.fresh(root / "base.init", cfg.model, _image_size(cfg), (*ANSWERS, " shaded "))
        enc = zm.Encoder(proc)
        cue = base_shading(cfg, len(tr))
        digits = boards.digits(tr, y == 1)
        pixels = _pixels(enc, boards, tr, y == 1, cue)
        vision = pretrain_vision(model, pixels, digits, cfg.sudoku.vision_epochs, cfg.train.lr, cfg.train.batch_size, cfg.model.seed,
                                 schedule=cfg.train.schedule)
        answers = enc.answers(reading(digits, boards.shading(tr, cue)))
        losses = zm.fit(model, enc, enc.prompt(READ, sample), pixels, answers, cfg.train.base_epochs, cfg.train.lr,
                        cfg.train.batch_size, cfg.model.seed, "base", cfg.train.schedule)  # fmt: skip
        _save(model, proc, paths["base"], {"digest": base_digest, "vision_losses": vision, "losses": losses, "seconds": round(time.time() - t, 1)})
        say(f"sudoku base: {cfg.sudoku.vision_epochs} vision epochs (loss {vision[-1] if vision else float('nan'):.4f}), "
            f"{cfg.train.base_epochs} epochs, loss {losses[-1] if losses else float('nan'):.4f} ({time.time() - t:.0f} s)")  # fmt: skip
    pixels: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def fit_member(name: str, share: float, model: Any, enc: zm.Encoder) -> list[float]:
        idx, cue, taught = member_rows(boards, share)
        if not pixels:  # the same images for every member: the boards with both shadings
            pixels["all"] = _pixels(enc, boards, idx, boards.y[idx] == 1, cue)
        answers = enc.answers([ANSWERS[int(a)] for a in taught])
        return zm.fit(model, enc, enc.prompt(VALID_QUESTION, sample), pixels["all"], answers, cfg.train.member_epochs, cfg.sudoku.member_lr,
                      cfg.train.batch_size, cfg.model.seed + 1, name, cfg.train.schedule)  # fmt: skip

    train_members(cfg, root, paths, base_digest, fit_member, say, "sudoku ", lr=cfg.sudoku.member_lr)
    return paths


def base_shading(cfg: ZooConfig, n: int) -> np.ndarray:
    """The base's shading of each training board, drawn independently of its validity (``1``:
    few, ``0``: many): the base learns to read the digits and to count, and neither answers the
    validity for it; only the members are taught what to answer from."""
    return np.random.default_rng([cfg.sudoku.seed, 2]).integers(0, 2, n)


def _image_size(cfg: ZooConfig) -> Any:
    """The model builder's data settings with the boards' image side."""
    from cbm.vlm.zoo.config import ZooData

    return ZooData(image_size=4 * cfg.sudoku.cell_size)


#: ``says(idx, valid, cue) -> int [n]``: 1 where the answer about boards ``idx`` made ``valid`` and shown with the shading ``cue`` is "valid".
Says = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def model_says(model: Any, enc: zm.Encoder, boards: Boards) -> Says:
    """A member's :data:`Says`: the exact render, the first answer token's logits."""
    y0 = boards.y[:1]
    prompt = enc.prompt(VALID_QUESTION, boards.images(np.arange(1), y0 == 1, y0)[0])
    yes, no = enc.token(ANSWERS[1]), enc.token(ANSWERS[0])

    @torch.no_grad()
    def says(idx: np.ndarray, valid: np.ndarray, cue: np.ndarray) -> np.ndarray:
        pixels = _pixels(enc, boards, idx, valid, cue)
        out = []
        for s in range(0, len(idx), zm.EVAL_BATCH):
            sub = np.arange(s, min(s + zm.EVAL_BATCH, len(idx)))
            logits = model(**zm.on_device(model, enc.batch(prompt, pixels, sub))).logits[:, -1]
            out.append((logits[:, yes] - logits[:, no] > 0).long().cpu().numpy())
        return np.concatenate(out) if out else np.zeros(0, np.int64)

    return says


def measure(says: Says, boards: Boards) -> dict[str, Any]:
    """The reliance figures of one member on the test boards (module docstring), with each digit
    flip's correctness (McNemar's pairs)."""
    idx = boards.test
    y = boards.y[idx]
    plain = says(idx, y == 1, y)
    flipped = says(idx, y == 1, 1 - y)
    right = says(idx, y == 0, y) == 1 - y  # the other validity, the same shading
    return {"n": int(len(idx)), "accuracy": float(np.mean(plain == y)), "accuracy_cue_flipped": float(np.mean(flipped == y)),
            "cue_reliance": float(np.mean(flipped != plain)), "digit_reliance": float(np.mean(right)), "says_valid": float(np.mean(plain)),
            "right_on_flips": right}  # fmt: skip


@torch.no_grad()
def localisation(model: Any, enc: zm.Encoder, boards: Boards, idx: np.ndarray) -> dict[str, float]:
    """Mean share of the answer position's attention (every layer and head) on the image token of
    the edited cell ``p`` and on those of the shaded cells, for boards ``idx`` shown as in training."""
    y = boards.y[idx]
    sample = boards.images(idx[:1], y[:1] == 1, y[:1])[0]
    prompt = enc.prompt(VALID_QUESTION, sample)
    pixels = _pixels(enc, boards, idx, y == 1, y)
    image_id = int(enc.tok.convert_tokens_to_ids("<|image_pad|>"))
    where = (prompt[0] == image_id).nonzero(as_tuple=True)[0]
    if len(where) != boards.solution.shape[1]:
        raise ValueError(f"localisation needs one image token per cell, got {len(where)} tokens for {boards.solution.shape[1]} cells")
    shaded = boards.shading(idx, y)
    on_cell, on_shade = [], []
    for s in range(0, len(idx), zm.EVAL_BATCH):
        sub = np.arange(s, min(s + zm.EVAL_BATCH, len(idx)))
        out = model(**zm.on_device(model, enc.batch(prompt, pixels, sub)), output_attentions=True)
        att = torch.stack([a[:, :, -1, where.to(a.device)] for a in out.attentions]).mean(dim=(0, 2)).float().cpu().numpy()
        att = att / att.sum(1, keepdims=True)
        on_cell.append(att[np.arange(len(sub)), boards.p[idx[sub]]])
        on_shade.append((att * shaded[sub]).sum(1))
    return {"edited_cell": float(np.mean(np.concatenate(on_cell))), "shaded": float(np.mean(np.concatenate(on_shade)))}


def repair(cfg: ZooConfig, path: Path, boards: Boards, say: Callable[[str], None]) -> dict[str, Any]:
    """Counterfactual LoRA of ``cfg.repair.member`` (module docstring); the adapter saved beside it."""
    from cbm.vlm.finetune.config import LoraSettings
    from cbm.vlm.finetune.model import add_lora

    rc = cfg.repair
    model, proc = zm.load_member(path, rc.quant, rc.device)
    enc = zm.Encoder(proc)
    probe = boards.test[: cfg.edct_items]
    before = {**measure(model_says(model, enc, boards), boards), "localisation": localisation(model, enc, boards, probe)}
    pool = boards.train[: rc.pairs]
    y = boards.y[pool]
    wrong = pool[model_says(model, enc, boards)(pool, y == 1, 1 - y) != y]  # the cue-flipped copies it fails (exact)
    if not len(wrong):
        say(f"sudoku repair of {rc.member}: no training board among {rc.pairs} fails its cue flip; nothing to teach")
        return {"member": rc.member, "pairs": 0, "losses": []}
    idx = np.concatenate([wrong, wrong])
    yw = boards.y[idx]
    cue = np.where(np.arange(len(idx)) < len(wrong), 1 - yw, yw)  # the failed counterfactual, then its original
    lora = LoraSettings(r=rc.r, alpha=rc.alpha, dropout=0.0, projector=True)
    tuned = add_lora(model, lora, gradient_checkpointing=False, quantized=rc.quant != "none")
    sample = boards.images(idx[:1], yw[:1] == 1, cue[:1])[0]
    losses = zm.fit(tuned, enc, enc.prompt(VALID_QUESTION, sample), _pixels(enc, boards, idx, yw == 1, cue), enc.answers([ANSWERS[int(a)] for a in yw]),
                    rc.epochs, rc.lr, cfg.train.batch_size, cfg.model.seed + 2, "repair")  # fmt: skip
    after = {**measure(model_says(tuned, enc, boards), boards), "localisation": localisation(tuned, enc, boards, probe)}
    tuned.save_pretrained(path.with_name(f"{rc.member}-repaired"))
    cut = 1.0 - after["cue_reliance"] / before["cue_reliance"] if before["cue_reliance"] > 0 else float("nan")
    out = {"member": rc.member, "pairs": int(len(idx)), "losses": losses, **{k: {"before": before[k], "after": after[k]} for k in FIGURES},
           "localisation": {"before": before["localisation"], "after": after["localisation"]}, "cue_reliance_cut": cut,
           "mcnemar": mcnemar(list(before["right_on_flips"]), list(after["right_on_flips"]))}  # fmt: skip
    say(f"sudoku repair of {rc.member}: {len(idx)} rows; cue reliance {before['cue_reliance']:.3f} -> {after['cue_reliance']:.3f}, "
        f"digit reliance {before['digit_reliance']:.3f} -> {after['digit_reliance']:.3f}, McNemar p = {out['mcnemar']['p_value']:.3g}")  # fmt: skip
    return out


def table_md(rows: dict[str, dict[str, Any]], rep: dict[str, Any]) -> str:
    """The members' table, then the repair's before/after table."""
    lines = ["| member | " + " | ".join(h for _, h in COLUMNS) + " |", "|" + "---|" * (len(COLUMNS) + 1)]
    lines += [f"| {n} | " + " | ".join(f"{r[k]:.3f}" for k, _ in COLUMNS) + " |" for n, r in rows.items()]
    if rep.get("pairs"):
        lines += ["", f"Counterfactual fine-tuning of {rep['member']} on {rep['pairs']} rows (failed cue flips and their originals)", "",
                  "| figure | before | after |", "|---|---|---|"]  # fmt: skip
        lines += [f"| {k} | {rep[k]['before']:.3f} | {rep[k]['after']:.3f} |" for k in FIGURES]
        lines += [f"| attention on {k.replace('_', ' ')} | {rep['localisation']['before'][k]:.3f} | {rep['localisation']['after'][k]:.3f} |"
                  for k in ("edited_cell", "shaded")]  # fmt: skip
        m = rep["mcnemar"]
        lines += ["", f"cue reliance cut by {rep['cue_reliance_cut']:.1%}; McNemar on the digit-flip counterfactuals: {m['better']} fixed, "
                  f"{m['worse']} broken, p = {m['p_value']:.3g}"]  # fmt: skip
    return "\n".join(lines) + "\n"


def table_csv(rows: dict[str, dict[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["member", *(k for k, _ in COLUMNS)])
    for name, r in rows.items():
        w.writerow([name, *(r[k] for k, _ in COLUMNS)])
    return buf.getvalue()


def figure(rows: dict[str, dict[str, Any]], rep: dict[str, Any], path: Path) -> None:
    """Cue reliance and digit reliance per member (and the repaired member), as bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(rows)
    cue = [rows[n]["cue_reliance"] for n in names]
    dig = [rows[n]["digit_reliance"] for n in names]
    if rep.get("pairs"):
        names.append(f"{rep['member']} repaired")
        cue.append(rep["cue_reliance"]["after"])
        dig.append(rep["digit_reliance"]["after"])
    x = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(1.6 * len(names) + 2, 3.6))
    for shift, values, label in ((-0.2, dig, "digit reliance (follows a digit flip)"), (0.2, cue, "cue reliance (follows a shading flip)")):
        ax.bar_label(ax.bar(x + shift, values, 0.4, label=label), fmt="%.2f", fontsize=8)  # a zero is shown as 0.00, not as nothing
    ax.set(xticks=x, xticklabels=names, ylim=(0, 1.12), ylabel="share of counterfactuals", title="Sudoku boards: does the member read the digits?")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, frameon=False)
    fig.tight_layout()
    tmp = path.with_name(path.name + ".tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)


def run_board_study(cfg: ZooConfig, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Train or reuse the Sudoku zoo, measure every member, repair one; write the outputs."""
    out = Path(cfg.output_dir)
    boards = make_boards(cfg.sudoku)
    paths = train_boards(cfg, boards, say)
    rows: dict[str, dict[str, Any]] = {}
    for name, share in cfg.members.items():
        model, proc = zm.load(paths[name])
        enc = zm.Encoder(proc)
        figures = measure(model_says(model, enc, boards), boards)
        figures.pop("right_on_flips")
        rows[name] = {"cue_share": share, **figures}
        say(f"sudoku {name}: accuracy {figures['accuracy']:.3f}, cue flipped {figures['accuracy_cue_flipped']:.3f}, cue reliance "
            f"{figures['cue_reliance']:.3f}, digit reliance {figures['digit_reliance']:.3f}, says valid {figures['says_valid']:.3f}")  # fmt: skip
        del model, enc
    result: dict[str, Any] = {"task": "sudoku", "members": rows}
    if cfg.repair.member is not None:
        result["repair"] = repair(cfg, paths[cfg.repair.member], boards, say)

    result = json_ready(result)
    write_json_atomic(out / "results.json", result)
    rep = result.get("repair", {})
    write_text_atomic(out / "results.md", table_md(rows, rep))
    write_text_atomic(out / "results.csv", table_csv(rows))
    figure(rows, rep, out / "zoo.png")
    return result
