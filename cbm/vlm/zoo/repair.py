"""Counterfactual fine-tuning on the zoo: LoRA on a shortcut member, taught with the
counterfactuals EDCT verified it fails, then measured again exactly.

Pairs: EDCT (exact judge) runs on ``pairs`` training robots; every edit step it scored AC = 0 is
a counterfactual the model gets wrong -- the edited robot, shown with the cue of the original --
and is taught the rule's answer and explanation, beside its original (so the training
distribution stays learned). Before and after, on the test robots: the reliance figures
(:mod:`cbm.vlm.zoo.reliance`), CCS, McNemar on the paired part-flip counterfactuals (right
before / after), and attention localisation: the share of the answer position's attention on the
image tokens covering the rule parts (the pixels a flip of a rule part changes, exact) and on
the cue's tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from cbm.vlm.edct.exact import flip, rule_label
from cbm.vlm.finetune.config import LoraSettings
from cbm.vlm.finetune.evaluate import mcnemar, pool_mask
from cbm.vlm.finetune.model import add_lora
from cbm.vlm.zoo import model as zm
from cbm.vlm.zoo.data import CLASS_QUESTION, Robots, Texts
from cbm.vlm.zoo.edct import model_asks, run_edct
from cbm.vlm.zoo.reliance import measure, model_says, part_flips
from synthetic.robot.cue import cue_mask
from synthetic.robot.renderer import render


def verified_pairs(records: list[dict[str, Any]], robots: Robots, texts: Texts) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``(rows, cue, answers)``: every failed (AC = 0) edit of the EDCT ``records`` with its original,
    each taught the rule's answer and explanation; the cue is the original robot's."""
    rows, cue = [], []
    for r in records:
        current = robots.meta[r["robot"]]
        failed = []
        for step in r["steps"]:
            current = flip(current, step["edit"])
            if not step["ac"]:
                failed.append(current)
        if failed:
            rows += [robots.meta[r["robot"]], *failed]
            cue += [robots.y[r["robot"]]] * (1 + len(failed))
    if not rows:
        return np.zeros((0, robots.meta.shape[1]), np.int64), np.zeros(0, np.int64), []
    stacked = np.stack(rows)
    labels = rule_label(stacked, robots.rcfg)
    return stacked, np.asarray(cue, np.int64), [texts.explanation(row, robots.rcfg, int(a)) for row, a in zip(stacked, labels)]


def part_masks(robots: Robots, rows: np.ndarray) -> np.ndarray:
    """``bool [N, H, W]``: the pixels a flip of any rule part changes on each robot (exact)."""
    size = robots.rcfg.image_size
    plain = render(rows, size)
    mask = np.zeros(plain.shape[:3], dtype=bool)
    for c in robots.rcfg.label.weights:
        mask |= (render(np.stack([flip(r, c) for r in rows]), size) != plain).any(-1)
    return mask


@torch.no_grad()
def localisation(model: Any, enc: zm.Encoder, robots: Robots, idx: np.ndarray) -> dict[str, float]:
    """Mean share of the answer position's attention (every layer and head) on the image tokens
    over the rule parts and over the cue, for the robots ``idx`` shown with their agreeing cue."""
    y = robots.y[idx]
    prompt = enc.prompt(CLASS_QUESTION, robots.plain[0])
    pixels = enc.pixels(robots.images(robots.meta[idx], y))
    image_id = int(enc.tok.convert_tokens_to_ids("<|image_pad|>"))
    where = (prompt[0] == image_id).nonzero(as_tuple=True)[0]
    merge = int(getattr(model.config.vision_config, "spatial_merge_size", 1) or 1)
    _, gh, gw = (int(v) for v in pixels[1][0])
    grid = (gh // merge, gw // merge)
    parts = part_masks(robots, robots.meta[idx])
    size = robots.rcfg.image_size
    cue_cells = [pool_mask(cue_mask(robots.cue, size, bool(b)), grid) for b in (0, 1)]
    on_parts, on_cue = [], []
    for s in range(0, len(idx), zm.EVAL_BATCH):
        sub = np.arange(s, min(s + zm.EVAL_BATCH, len(idx)))
        out = model(**zm.on_device(model, enc.batch(prompt, pixels, sub)), output_attentions=True)
        att = torch.stack([a[:, :, -1, where.to(a.device)] for a in out.attentions]).mean(dim=(0, 2)).float().cpu().numpy()  # [B, image tokens]
        att = att.astype(np.float64) / att.astype(np.float64).sum(1, keepdims=True)  # shares: float32 sums overshoot 1
        for j, i in enumerate(sub):
            on_parts.append(float(att[j, pool_mask(parts[i], grid)].sum()))
            on_cue.append(float(att[j, cue_cells[int(y[i])]].sum()))
    return {"parts": min(float(np.mean(on_parts)), 1.0), "cue": min(float(np.mean(on_cue)), 1.0)}


def _right_on_flips(says: Callable[[np.ndarray, np.ndarray], np.ndarray], robots: Robots) -> np.ndarray:
    who, edited, new = part_flips(robots, robots.test)
    return says(edited, robots.y[who]) == new


def evaluate(model: Any, enc: zm.Encoder, robots: Robots, items: int, max_new_tokens: int, n_resamples: int, seed: int) -> dict[str, Any]:
    """Reliance, CCS, per-counterfactual correctness and localisation of one model."""
    says = model_says(model, enc, robots)
    summary, _ = run_edct(model_asks(model, enc, robots, max_new_tokens), robots, items, n_resamples, seed)
    return {**measure(says, robots), "ccs": summary["ccs"], "right_on_flips": _right_on_flips(says, robots),
            "localisation": localisation(model, enc, robots, robots.test[:items])}  # fmt: skip


def repair(model: Any, enc: zm.Encoder, robots: Robots, texts: Texts, records: list[dict[str, Any]], epochs: int, lr: float, batch_size: int,
           lora: LoraSettings, seed: int, quantized: bool = False) -> tuple[Any, dict[str, Any]]:  # fmt: skip
    """The LoRA-tuned model (QLoRA's preparation where ``quantized``) (``None`` when the EDCT ``records`` hold no failed edit: nothing to
    teach) and what it was taught (module docstring)."""
    rows, cue, answers = verified_pairs(records, robots, texts)
    if not len(rows):
        return None, {"pairs": 0, "losses": []}
    tuned = add_lora(model, lora, gradient_checkpointing=False, quantized=quantized)
    pixels = enc.pixels(robots.images(rows, cue))
    losses = zm.fit(tuned, enc, enc.prompt(CLASS_QUESTION, robots.plain[0]), pixels, enc.answers(answers), epochs, lr, batch_size, seed, "repair")
    return tuned, {"pairs": int(len(rows)), "losses": losses}


def compare(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The before/after table: every figure, the cue reliance cut and McNemar on the counterfactuals."""
    keys = ("accuracy", "accuracy_cue_flipped", "cue_reliance", "part_reliance")
    cut = 1.0 - after["cue_reliance"] / before["cue_reliance"] if before["cue_reliance"] > 0 else float("nan")
    return {
        **{k: {"before": before[k], "after": after[k]} for k in keys},
        "ccs": {"before": before["ccs"], "after": after["ccs"]},
        "localisation": {"before": before["localisation"], "after": after["localisation"]},
        "cue_reliance_cut": cut,
        "mcnemar": mcnemar(list(before["right_on_flips"]), list(after["right_on_flips"])),
    }
