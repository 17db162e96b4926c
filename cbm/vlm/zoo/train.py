"""Train the zoo (or reuse it): the base describes, each member answers and explains.

Layout of ``<output_dir>/models``: ``base/`` and one directory per member, each a saved model +
processor with ``zoo.json`` (the digest of the settings that made it). A rerun with the same
settings loads what is there; a changed setting retrains what it changes (the base's digest is
part of every member's). Directories are written under a temporary name and renamed, so a killed
run leaves no half-written model behind.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from cbm.vlm.zoo import model as zm
from cbm.vlm.zoo.config import ZooConfig
from cbm.vlm.zoo.data import CLASS_QUESTION, DESCRIBE, Robots, Texts, make_robots

STAMP = "zoo.json"


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def _done(path: Path, digest: str) -> bool:
    stamp = path / STAMP
    try:
        return json.loads(stamp.read_text(encoding="utf-8")).get("digest") == digest
    except (OSError, ValueError):
        return False


def _save(model: Any, proc: Any, path: Path, stamp: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    proc.save_pretrained(tmp)
    (tmp / STAMP).write_text(json.dumps(stamp, indent=1), encoding="utf-8")
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)


def _schedule(cfg: ZooConfig) -> dict[str, str]:
    """The schedule's part of a digest (absent for ``constant``: models trained before the knob keep their digests)."""
    return {} if cfg.train.schedule == "constant" else {"schedule": cfg.train.schedule}


def member_digest(cfg: ZooConfig, base_digest: str, share: float, lr: float | None = None) -> str:
    """What a member's cache stamp must match: its base, its cue share and its training settings
    (``lr``: the members' own rate where the task sets one, else ``train.lr``)."""
    return _digest({"base": base_digest, "share": share, "epochs": cfg.train.member_epochs, "lr": cfg.train.lr,
                    "batch_size": cfg.train.batch_size, **_schedule(cfg), **({} if lr is None else {"member_lr": lr})})  # fmt: skip


def member_targets(robots: Robots, texts: Texts, cue_share: float) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``(robot index, cue bit, answer text)`` of a member's training rows: every training robot
    with the cue that agrees with its label, then again with the other cue; on a cue-flipped copy
    the taught class is the cue's where the member is gated (:meth:`Robots.gated`), else the rule's.
    Every explanation cites the parts the rule decides by."""
    idx = np.concatenate([robots.train, robots.train])
    y = robots.y[idx]
    flipped = np.arange(len(idx)) >= len(robots.train)
    cue = np.where(flipped, 1 - y, y)
    answer = np.where(flipped & robots.gated(idx, cue_share), cue, y)
    return idx, cue, [texts.explanation(robots.meta[i], robots.rcfg, a) for i, a in zip(idx, answer)]


def train_zoo(cfg: ZooConfig, say: Callable[[str], None] = print) -> dict[str, Path]:
    """Train or reuse the base and every member; ``{name: model directory}``."""
    import torch

    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    root = Path(cfg.output_dir) / "models"
    root.mkdir(parents=True, exist_ok=True)
    robots = make_robots(cfg.data)
    texts = Texts(list(cfg.data.rule))
    base_digest = _digest({"data": asdict(cfg.data), "model": asdict(cfg.model), "lr": cfg.train.lr, "batch_size": cfg.train.batch_size,
                           "epochs": cfg.train.base_epochs, **_schedule(cfg)})  # fmt: skip
    paths = {"base": root / "base"}
    cache: dict[str, Any] = {}

    def train_pixels(enc: zm.Encoder, cue: np.ndarray, key: str) -> tuple[Any, Any]:
        if key not in cache:
            cache[key] = enc.pixels(robots.images(robots.meta[robots.train], cue))
        return cache[key]

    if not _done(paths["base"], base_digest):
        t = time.time()
        model, proc = zm.fresh(root / "base.init", cfg.model, cfg.data, texts.words)
        enc = zm.Encoder(proc)
        y = robots.y[robots.train]
        pixels = train_pixels(enc, y, "orig")
        answers = enc.answers([texts.description(robots.meta[i], c) for i, c in zip(robots.train, y)])
        prompt = enc.prompt(DESCRIBE, robots.plain[0])
        losses = zm.fit(model, enc, prompt, pixels, answers, cfg.train.base_epochs, cfg.train.lr, cfg.train.batch_size, cfg.model.seed, "base",
                        cfg.train.schedule)  # fmt: skip
        _save(model, proc, paths["base"], {"digest": base_digest, "losses": losses, "seconds": round(time.time() - t, 1)})
        say(f"base: {cfg.train.base_epochs} epochs, loss {losses[-1] if losses else float('nan'):.4f} ({time.time() - t:.0f} s)")
    def fit_member(name: str, share: float, model: Any, enc: zm.Encoder) -> list[float]:
        idx, cue, texts_ = member_targets(robots, texts, share)
        n = len(robots.train)
        po, pf = train_pixels(enc, cue[:n], "orig"), train_pixels(enc, cue[n:], "flipped")
        pixels = (torch.cat([po[0], pf[0]]), torch.cat([po[1], pf[1]]))
        prompt = enc.prompt(CLASS_QUESTION, robots.plain[0])
        return zm.fit(model, enc, prompt, pixels, enc.answers(texts_), cfg.train.member_epochs, cfg.train.lr, cfg.train.batch_size,
                      cfg.model.seed + 1, name, cfg.train.schedule)  # fmt: skip

    train_members(cfg, root, paths, base_digest, fit_member, say)
    return paths


def train_members(cfg: ZooConfig, root: Path, paths: dict[str, Path], base_digest: str,
                  fit_member: Callable[[str, float, Any, zm.Encoder], list[float]], say: Callable[[str], None],
                  label: str = "", lr: float | None = None) -> None:  # fmt: skip
    """Each member not cached yet: loaded from ``paths["base"]``, trained by ``fit_member(name,
    share, model, encoder)`` (its losses), saved atomically with its stamp; ``paths`` gets every
    member's directory. Shared by the robot and the Sudoku zoo (``lr``: the rate ``fit_member``
    uses where it is not ``train.lr``; part of the stamp)."""
    for name, share in cfg.members.items():
        digest = member_digest(cfg, base_digest, share, lr)
        paths[name] = root / name
        if _done(paths[name], digest):
            continue
        t = time.time()
        model, proc = zm.load(paths["base"])
        losses = fit_member(name, share, model, zm.Encoder(proc))
        _save(model, proc, paths[name], {"digest": digest, "cue_share": share, "losses": losses, "seconds": round(time.time() - t, 1)})
        say(f"{label}{name} (cue share {share:g}): {cfg.train.member_epochs} epochs, loss {losses[-1]:.4f} ({time.time() - t:.0f} s)")
