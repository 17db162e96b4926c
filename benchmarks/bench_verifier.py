"""The EDCT edit verifier against exact ground truth (what the paper cannot measure).

Every editable part of N test robots is edited exactly (re-rendered, exact changed-pixel mask).
Edits that *are* local: the exact edit with its exact mask. Edits that are *not* local (each
built from an exact edit): a global brightness shift on top of it, a whole-image Gaussian blur on
top of it, the edit checked against another part's mask (the change is elsewhere), and no edit at
all. The verifier's decision is scored as a classifier (positive = "local edit"): recall on the
local edits, precision over all; and its change map against the exact mask, pixel by pixel
(IoU, precision, recall) on the local edits.

    python benchmarks/bench_verifier.py                 # 64 and 32 px, 60 robots each
    python benchmarks/bench_verifier.py --sizes 64 --robots 200
"""

from __future__ import annotations

import argparse
import time

import cv2
import numpy as np

from cbm.vlm.editors import EditInstruction, RobotEditor, robot_items
from cbm.vlm.editors.synthetic import ROBOT_PARTS
from cbm.vlm.verify import VerifyConfig, change_map, verify_edit
from synthetic.registry import data_config

BRIGHTNESS = 40  # grey levels added to every pixel
BLUR_SIGMA = 1.5


def cases(size: int, n: int, cache: str | None) -> list[tuple[str, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """``(kind, before, after, claimed mask, exact mask)`` for every robot x part."""
    cfg = data_config({"name": "robot", "image_size": size, "n_train": 10, "n_calib": 0, "n_test": n})
    editor = RobotEditor(cfg)
    out = []
    for item in robot_items(cfg, "test", np.arange(n), cache_dir=cache):
        before = item.array
        edits = {}
        for part in ROBOT_PARTS:
            res = editor.edit(item, EditInstruction(part))
            if res.mask.any():
                edits[part] = (np.asarray(res.image), res.mask)
        parts = list(edits)
        for i, (after, mask) in enumerate(edits.values()):
            out.append(("local", before, after, mask, mask))
            bright = np.clip(after.astype(np.int16) + BRIGHTNESS, 0, 255).astype(np.uint8)
            out.append(("brightness", before, bright, mask, mask))
            out.append(("blur", before, cv2.GaussianBlur(after, (0, 0), BLUR_SIGMA), mask, mask))
            other = next((edits[q][1] for q in parts[i + 1 :] + parts[:i] if not (edits[q][1] & mask).any()), None)
            if other is not None:
                out.append(("wrong_mask", before, after, other, mask))
            out.append(("no_edit", before, before.copy(), mask, mask))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="64,32")
    ap.add_argument("--robots", type=int, default=60)
    ap.add_argument("--cache-dir", default=None)
    args = ap.parse_args()
    cfg = VerifyConfig()
    print(f"verifier defaults: tau_in {cfg.tau_in}, tau_out {cfg.tau_out}, dilate {cfg.dilate_px} px; brightness +{BRIGHTNESS}, blur sigma {BLUR_SIGMA}")
    print("| size | robots | local edits | pass rate (recall) | rejected: brightness / blur / wrong mask / no edit | precision | "
          "pixel IoU | pixel precision | pixel recall | ms / check |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for size in (int(s) for s in args.sizes.split(",")):
        rows = cases(size, args.robots, args.cache_dir)
        decided: dict[str, list[bool]] = {}
        iou, prec, rec = [], [], []
        t0 = time.perf_counter()
        for kind, before, after, claimed, exact in rows:
            r = verify_edit(before, after, claimed, cfg)
            decided.setdefault(kind, []).append(r.passed)
            if kind == "local":
                ch = change_map(before, after, cfg, mask=exact)
                inter = float((ch & exact).sum())
                iou.append(inter / float((ch | exact).sum()))
                prec.append(inter / max(float(ch.sum()), 1.0))
                rec.append(inter / float(exact.sum()))
        ms = 1000 * (time.perf_counter() - t0) / (len(rows) + len(decided["local"]))
        tp = sum(decided["local"])
        fp = sum(sum(v) for k, v in decided.items() if k != "local")
        rejected = " / ".join(f"{1 - np.mean(decided[k]):.3f}" if k in decided else "-" for k in ("brightness", "blur", "wrong_mask", "no_edit"))
        print(f"| {size} px | {args.robots} | {len(decided['local'])} | {np.mean(decided['local']):.3f} | {rejected} | "
              f"{tp / max(tp + fp, 1):.3f} | {np.mean(iou):.3f} | {np.mean(prec):.3f} | {np.mean(rec):.3f} | {ms:.1f} |")  # fmt: skip


if __name__ == "__main__":
    main()
