"""The documentation's figures, drawn from the project's own generators, models and plotting code.

    python docs/figures.py                          # every figure into docs/img/ (or: make docs-figures)
    python docs/figures.py --smoke --out /tmp/figs  # tiny sizes, seconds (tests/core/test_docs_figures.py)
    python docs/figures.py --only sudoku_boards.png # one figure

Nothing is downloaded and nothing is pasted: the robots and boards come from the generators
(``conf/data`` presets), the intervention, risk-coverage and reliability figures from models trained
here for a few epochs (``conf/model`` presets), the EDCT chain from a ``cbm-edct`` run against a
scripted in-process endpoint (the exact robot editor and the verifier are the real ones), and the
zoo figure from the measured default zoo (``benchmarks/results/zoo_default_cpu.json``; the full zoo
takes 27 minutes). ``--smoke`` draws the same figures from tiny data (tabular robots for the trained
models), for the test; its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
#: Where the committed figures live (the pages link them as ``img/<name>``).
IMG = ROOT / "docs" / "img"
#: The measured default zoo the zoo figure draws (``cbm-vlm-zoo output_dir=outputs/zoo/default``).
ZOO_RESULT = ROOT / "benchmarks" / "results" / "zoo_default_cpu.json"
#: Resolution of the figures written (modest: each PNG stays well under 200 KB).
DPI = 90


@dataclass(frozen=True)
class Sizes:
    """How much data and training each figure gets."""

    per_class: int = 4  # robots of each class on the grid
    robot_px: int = 64  # side of the robots on the class and concept grids
    n_train: int = 2000  # robots to train on (the trained models' figures)
    n_calib: int = 1000
    n_test: int = 2000
    modality: str = "image"
    epochs: int = 10
    batch_size: int = 32  # paper_v04_robot_ours's
    boards: int = 40  # boards per split of each Sudoku preset
    glyph_variants: int | None = None  # None: the preset's own
    edct_items: int = 6
    edct_px: int = 64


FULL = Sizes()
SMOKE = Sizes(per_class=2, n_train=160, n_calib=80, n_test=80, modality="tabular", epochs=1, boards=8, glyph_variants=8, edct_items=1)

#: Trained for the intervention, risk-coverage and reliability figures (conf/model presets).
ARCHITECTURES = ("blackbox", "cbm", "cem", "probcbm")
#: Sudoku presets on the boards figure (conf/data), at 50 / 18 / 10 px per cell.
SUDOKU_PRESETS = ("sudoku_50px", "sudoku_18px", "sudoku_10px", "sudoku_v04")
#: Outline colour of each kind of failing check on the boards figure.
CHECK_COLOURS = {"row": "#d62728", "col": "#1f77b4", "box": "#ff7f0e"}

#: Every figure: file name -> the pages that show it.
FIGURES: dict[str, tuple[str, ...]] = {
    "robots.png": ("index.md", "benchmarks.md", "guides/data.md"),
    "robot_concepts.png": ("benchmarks.md", "guides/data.md"),
    "robots_reference_vs_ours.png": ("benchmarks.md", "guides/renderers.md"),
    "sudoku_boards.png": ("index.md", "benchmarks.md", "guides/sudoku-data.md"),
    "intervention_curves.png": ("index.md", "guides/interventions.md"),
    "intervention_policies.png": ("guides/interventions.md",),
    "risk_coverage.png": ("guides/automation.md",),
    "reliability.png": ("guides/automation.md",),
    "edct_chain.png": ("guides/edct.md",),
    "zoo.png": ("guides/zoo.md",),
}


def say(text: str) -> None:
    print(text, flush=True)


# ------------------------------------------------------------------------------------------ configs
def composed(config: str, overrides: list[str]) -> Any:
    """A command's config composed from ``conf/`` (presets and all), without its ``hydra`` node."""
    from omegaconf import OmegaConf

    from cbm.core.cli import compose_plain

    cfg = compose_plain(config, overrides)
    return OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])


def data_preset(name: str, overrides: list[str]) -> Any:
    """The validated data config of preset ``conf/data/<name>.yaml`` with ``overrides`` (``data.`` keys)."""
    from omegaconf import OmegaConf

    from synthetic.registry import data_config

    cfg = composed("data_cli", [f"data={name}", *overrides])
    return data_config(OmegaConf.to_container(cfg.data, resolve=True))


def robot_overrides(s: Sizes, size: int | None = None, modality: str = "image") -> list[str]:
    """``data=robot_v04`` (0.4's balanced rule and training shift) at the figures' sizes, one render per robot."""
    return ["data.renders_per_robot=1", f"data.n_train={s.n_train}", f"data.n_calib={s.n_calib}", f"data.n_test={s.n_test}",
            f"data.modality={modality}", *([f"data.image_size={size}"] if size else [])]  # fmt: skip


def rule_text(label: Any) -> str:
    """``Pr(Glorp) = sigmoid(scale * (sum w [attr] + bias))`` of a robot ``LabelConfig``, as the code has it."""
    terms = "".join(f" {'+' if w > 0 else '-'} {abs(w):g}[{name}]" for name, w in label.weights.items())
    return f"Pr(Glorp) = sigmoid({label.scale:g} * ({terms.strip().removeprefix('+ ')} {'+' if label.bias >= 0 else '-'} {abs(label.bias):g}))"


# ------------------------------------------------------------------------------------------ robots
def robots_figure(out: Path, s: Sizes, cache: str) -> None:
    """robots.png: Glorps and Drents of data=robot_v04 with their concepts, the label rule under them."""
    from cbm.experiments.data_cli import show_grid
    from synthetic.registry import load_data

    cfg = data_preset("robot_v04", robot_overrides(s, s.robot_px))
    data = load_data(cfg, cache)
    test = data.indices("test")
    rows = np.concatenate([test[data.y[test] == y][: s.per_class] for y in (1, 0)])  # Glorps, then Drents
    caption = (f"data=robot_v04 (label_rule={cfg.label_rule}), drawn at {s.robot_px} px; the label is drawn from\n"
               f"{rule_text(cfg.label)}")  # fmt: skip
    show_grid(data, rows, out / "robots.png", caption=caption, cols=s.per_class)


def flipped(meta: np.ndarray, concept: str, value: int | None = None) -> np.ndarray:
    """``meta`` rows with ``concept`` set to ``value`` (``None``: each row's other value; ``foot_pointy``:
    the flat / pointy foot of the same slot)."""
    from synthetic.robot.attributes import META_INDEX, N_FOOT

    out = meta.copy()
    half = N_FOOT // 2
    col = META_INDEX["foot_subtype" if concept == "foot_pointy" else concept]
    now = out[:, col] // half if concept == "foot_pointy" else out[:, col]
    new = 1 - now if value is None else np.full_like(now, value)
    out[:, col] = out[:, col] % half + half * new if concept == "foot_pointy" else new
    return out


def robot_concepts_figure(out: Path, s: Sizes, cache: str) -> None:
    """robot_concepts.png: one robot with each true concept (and elbows, which the balanced rule reads) off and on."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from cbm.core.atomic import savefig_atomic
    from synthetic.registry import load_data
    from synthetic.robot import render

    cfg = data_preset("robot_v04", robot_overrides(s, s.robot_px))
    data = load_data(cfg, cache)
    meta = data.meta[data.indices("test")[:1]]
    concepts = [*data.concept_names, "elbows"]
    weights = cfg.label.weights
    fig = Figure(figsize=(1.25 * len(concepts), 3.0))
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, len(concepts), squeeze=False)
    for j, concept in enumerate(concepts):
        for value in (0, 1):
            ax = axes[value][j]
            ax.imshow(render(flipped(meta, concept, value), s.robot_px)[0], interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
        w = weights.get(concept)
        axes[0][j].set_title(f"{concept}\n(rule weight {w:+g})" if w is not None else f"{concept}\n(not in the rule)", fontsize=7)
    axes[0][0].set_ylabel("0 (off)", fontsize=8)
    axes[1][0].set_ylabel("1 (on)", fontsize=8)
    fig.suptitle(f"One robot, each concept off and on (data=robot_v04, our renderer, {s.robot_px} px)", fontsize=9)
    fig.tight_layout()
    savefig_atomic(fig, out / "robot_concepts.png", dpi=DPI)


def reference_figure(out: Path, s: Sizes, cache: str) -> None:
    """robots_reference_vs_ours.png: the same robots in our renderer and 0.4.1's (data.render=reference) at 32 px,
    and the pixels that change when their knees are flipped."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from cbm.core.atomic import savefig_atomic
    from synthetic.registry import load_data
    from synthetic.robot import render
    from synthetic.robot.attributes import META_INDEX
    from synthetic.robot.reference.rows import images as reference_images

    px, n = 32, 5
    cfg = data_preset("robot_v04", robot_overrides(s, px))
    data = load_data(cfg, cache)
    meta = data.meta[data.indices("test")[:n]]
    knees = meta[:, META_INDEX["knees"]]
    renderers = [("ours (render=ours)", lambda m: render(m, px)), ("0.4.1's (render=reference)", lambda m: reference_images(m, px))]
    fig = Figure(figsize=(1.7 * n, 7.4))
    FigureCanvasAgg(fig)
    axes = fig.subplots(4, n, squeeze=False)
    for r, (name, draw) in enumerate(renderers):
        img, other = draw(meta), draw(flipped(meta, "knees"))
        changed = (img.astype(int) != other.astype(int)).any(-1)
        for j in range(n):
            top, diff = axes[2 * r][j], axes[2 * r + 1][j]
            top.imshow(img[j], interpolation="nearest")
            top.set_title(f"knees={knees[j]}", fontsize=7)
            faded = (0.35 * img[j] + 0.65 * 255).astype(np.uint8)
            faded[changed[j]] = (214, 39, 40)
            diff.imshow(faded, interpolation="nearest")
            diff.set_title(f"{int(changed[j].sum())} px change", fontsize=7)
            for ax in (top, diff):
                ax.set_xticks([])
                ax.set_yticks([])
        axes[2 * r][0].set_ylabel(name.replace(" (", "\n("), fontsize=7)
        axes[2 * r + 1][0].set_ylabel("knees flipped", fontsize=7)
    fig.suptitle("The same robots at 32 px: red, the pixels that change when the knees are flipped", fontsize=9)
    fig.tight_layout()
    savefig_atomic(fig, out / "robots_reference_vs_ours.png", dpi=DPI)



# ------------------------------------------------------------------------------------------ Sudoku
def board_grid(cfg: Any) -> tuple[int, int]:
    """``(offset, cell)`` in pixels of a preset's rendered board: where the grid starts and a cell's side."""
    return (cfg.v04.margin_px if cfg.renderer == "v04" else 0), cfg.cell_size


def outline_checks(ax: Any, failing: list[str], offset: int, cell: int) -> None:
    """Outline every failing check (``row3``, ``col5``, ``box2``) of a 9x9 board drawn on ``ax``."""
    from matplotlib.patches import Rectangle

    for name in failing:
        kind, i = name[:3], int(name[3:]) - 1
        r0, c0, h, w = {"row": (i, 0, 1, 9), "col": (0, i, 9, 1), "box": (3 * (i // 3), 3 * (i % 3), 3, 3)}[kind]
        ax.add_patch(Rectangle((offset + c0 * cell - 0.5, offset + r0 * cell - 0.5), w * cell, h * cell, fill=False,
                               edgecolor=CHECK_COLOURS[kind], linewidth=1.6))  # fmt: skip


def sudoku_figure(out: Path, s: Sizes, cache: str) -> None:
    """sudoku_boards.png: a valid and an invalid test board of each preset, the invalid one's failing checks outlined."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from cbm.core.atomic import savefig_atomic
    from synthetic.registry import load_data
    from synthetic.sudoku.checker import check_board

    fig = Figure(figsize=(3.0 * len(SUDOKU_PRESETS), 7.2), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, len(SUDOKU_PRESETS), squeeze=False)
    for j, preset in enumerate(SUDOKU_PRESETS):
        over = [f"data.n_{split}={s.boards}" for split in ("train", "val", "test")] + ["data.n_calib=0"]
        over += [f"data.glyph_variants={s.glyph_variants}"] if s.glyph_variants else []
        cfg = data_preset(preset, over)
        data = load_data(cfg, cache)
        test = data.indices("test")
        passes = check_board(data.extra["board"][test])
        n_fail = (~passes).sum(1)
        valid = test[n_fail == 0][0]
        few = np.flatnonzero((n_fail >= 3) & (n_fail <= 6))
        invalid = test[few[0] if len(few) else np.flatnonzero(n_fail > 0)[0]]
        failing = [name for name, ok in zip(data.concept_names, check_board(data.extra["board"][[invalid]])[0]) if not ok]
        offset, cell = board_grid(cfg)
        style = "printed" if cfg.style == "printed" else "handwritten" + (", pencil marks" if getattr(cfg, "pencil_prob", 0) else "")
        for r, row in enumerate((valid, invalid)):
            ax = axes[r][j]
            ax.imshow(data.x[row], cmap="gray", vmin=0, vmax=255, interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
        axes[0][j].set_title(f"data={preset}\n{cfg.cell_size} px per cell, {style}\n{data.x.shape[1]} px board: valid", fontsize=8)
        outline_checks(axes[1][j], failing, offset, cell)
        lines = [", ".join(failing[i : i + 5]) for i in range(0, len(failing), 5)]
        axes[1][j].set_title("invalid, fails:\n" + "\n".join(lines), fontsize=7)
    fig.suptitle("Sudoku boards as the models see them; failing checks outlined: rows red, columns blue, boxes orange", fontsize=9)
    savefig_atomic(fig, out / "sudoku_boards.png", dpi=DPI)


# ------------------------------------------------------------------------------------------ trained models
@dataclass
class Trained:
    """The architectures trained on one dataset, and the dataset's splits."""

    models: dict[str, Any]
    dm: Any
    data: Any
    label: str  # what they were trained on, for the titles


def train_models(s: Sizes, cache: str) -> Trained:
    """:data:`ARCHITECTURES` (their ``conf/model`` presets) trained for ``s.epochs`` epochs on data=robot_v04."""
    import lightning as L
    import torch

    from cbm.core.validation import as_dict
    from cbm.experiments.train import validate
    from cbm.models import build_model
    from cbm.training.trainer import quiet_lightning
    from synthetic.datamodule import SyntheticDataModule
    from synthetic.registry import data_info, load_data

    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    quiet_lightning()
    for noisy in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    models, data, dm = {}, None, None
    for name in ARCHITECTURES:
        over = [f"model={name}", "data=robot_v04", *robot_overrides(s, modality=s.modality), f"trainer.max_epochs={s.epochs}",
                f"batch_size={s.batch_size}", "output_dir=unused"]  # fmt: skip
        train_cfg, data_cfg, model_cfg = validate(composed("train", over))
        if data is None:
            data = load_data(data_cfg, cache)
            dm = SyntheticDataModule(lambda loaded=data: loaded, train_cfg.batch_size, train_cfg.eval_batch_size, seed=train_cfg.seed)
        L.seed_everything(train_cfg.seed, verbose=False)
        start = time.perf_counter()
        model = build_model(model_cfg, data_info(data, data_cfg), as_dict(data_cfg))
        L.Trainer(max_epochs=s.epochs, accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                  enable_model_summary=False, limit_val_batches=0).fit(model, dm)  # fmt: skip
        models[name] = model.eval()
        say(f"  trained {name}: {s.epochs} epochs in {time.perf_counter() - start:.0f} s")
    what = f"data=robot_v04, n_train={s.n_train}, {s.epochs} epochs" + ("" if s.modality == "image" else f", {s.modality}")
    return Trained(models, dm, data, what)


def intervention_figures(out: Path, t: Trained) -> None:
    """intervention_curves.png (every architecture, oracle answers) and intervention_policies.png (the CBM, by
    policy and intervener), from ``run_grid`` on the test split."""
    from cbm.experiments.figures import accuracy_vs_k
    from cbm.interventions import (
        ExpertIntervener,
        OracleIntervener,
        RandomPolicy,
        UncertaintyPolicy,
        model_accuracy,
        run_grid,
    )
    from cbm.interventions.plots import plot_accuracy_vs_k

    blackbox = model_accuracy(t.models["blackbox"], t.dm.test_dataloader())
    m = t.data.n_concepts
    cells = []
    for name, model in t.models.items():
        if name == "blackbox":
            continue
        interveners = {"oracle": OracleIntervener(), **({"expert 80%": ExpertIntervener(0.8)} if name == "cbm" else {})}
        policies = {"random": lambda: RandomPolicy(0), "uncertainty": UncertaintyPolicy}
        grid = run_grid(model, t.dm.test_dataloader(), interveners, policies, list(range(m + 1)), blackbox_accuracy=blackbox)
        if name == "cbm":
            plot_accuracy_vs_k(grid, out / "intervention_policies.png", title=f"cbm: test accuracy under interventions ({t.label})")
        cells.append({"setting": t.label, "model": name, "seed": 0,
                      "_results": {"rows": grid.rows, "blackbox_accuracy": blackbox, "meta": grid.meta}})  # fmt: skip
    accuracy_vs_k(cells, t.label, out / "intervention_curves.png")


def selective_figures(out: Path, t: Trained, target: float = 0.9) -> None:
    """risk_coverage.png (test curve of every architecture, the threshold calibrated on the calibration split
    for ``target`` accuracy marked) and reliability.png (the same models' confidence against their accuracy)."""
    from cbm.selective.automation import calibrate_model, score_split
    from cbm.selective.calibration import CalibrationError
    from cbm.selective.metrics import risk_coverage_curve
    from cbm.selective.plots import plot_reliability, plot_risk_coverage

    curves, points, scored = {}, [], {}
    for name, model in t.models.items():
        try:
            cal, _ = calibrate_model(model, t.dm.calib_dataloader(), target, method="ltt", delta=0.1)
        except CalibrationError:  # no threshold reaches the target (a smoke model): the curve without its point
            cal = None
        test = score_split(model, t.dm.test_dataloader())
        cov, risk, _ = risk_coverage_curve(test.scores, test.correct)
        curves[name] = (cov, risk)
        scored[name] = (test.scores, test.correct)
        if cal is not None:
            accepted = test.scores > cal.tau
            if accepted.any():
                points.append((name, float(accepted.mean()), float(1.0 - test.correct[accepted].mean())))
    plot_risk_coverage(curves, out / "risk_coverage.png", target, points, title=f"Test risk-coverage\n{t.label}")
    plot_reliability(scored, out / "reliability.png", n_bins=10, low=0.5, title=f"Reliability on the test split\n{t.label}")


# ------------------------------------------------------------------------------------------ VLM wing
#: The scripted endpoint's parts of an EDCT run (the roles are told apart by their prompts, conf/edct.yaml).
EDCT_CONCEPTS = ("feet", "mouth")
EDCT_REPLIES = {
    "Answer Consistency (AC)": "<ac>yes</ac><ef>yes</ef><score>4</score>",
    "chronological chain": "".join(f'<edit index="{i}"><concept>{c}</concept><keep>the rest of the robot</keep><change>the {c}</change>'
                                   f"<how>draw the other {c}</how><constraints>nothing else moves</constraints></edit>"
                                   for i, c in enumerate(EDCT_CONCEPTS, 1)),  # fmt: skip
    "List up to": "".join(f"<concept>{c}</concept>" for c in EDCT_CONCEPTS),
    "Explain your answer": "<explanation>Its feet are pointy and its mouth is closed.</explanation>",
}


def scripted_endpoint() -> Any:
    """An in-process OpenAI-compatible chat endpoint (an ``httpx`` transport, no socket) playing EDCT's VLM,
    LLM and judge: the VLM always says Glorp, the LLM cites the feet and the mouth, the judge agrees."""
    import httpx2

    def handler(request: Any) -> Any:
        last = json.loads(request.content)["messages"][-1]["content"]
        text = last if isinstance(last, str) else " ".join(p.get("text", "") for p in last if p.get("type") == "text")
        reply = next((r for mark, r in EDCT_REPLIES.items() if mark in text), "<answer>Glorp</answer>")
        body = {"id": "scripted", "object": "chat.completion", "created": 0, "model": "scripted",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}  # fmt: skip
        return httpx2.Response(200, json=body)

    return httpx2.Client(transport=httpx2.MockTransport(handler))


def edct_figure(out: Path, s: Sizes, cache: str) -> None:
    """edct_chain.png: a ``cbm-edct`` run on robots (exact editor, real verifier, scripted endpoint), one item's chain."""
    from cbm.vlm.apps.edct import validate
    from cbm.vlm.edct.figure import chain_figure
    from cbm.vlm.edct.run import run

    with tempfile.TemporaryDirectory() as tmp:
        client = ["backend=openai", "model=scripted", "base_url=http://127.0.0.1:9/v1", "cache_dir=null", "max_retries=0"]
        over = [f"{role}.{kv}" for role in ("vlm", "llm", "judge") for kv in client]
        over += [f"output_dir={tmp}/run", f"cache_dir={cache}", f"items.n={s.edct_items}", "data.n_train=20", "data.n_calib=0",
                 f"data.n_test={max(s.edct_items, 4)}", f"data.image_size={s.edct_px}", "workers=1", "progress=false", "logger=csv_only"]  # fmt: skip
        records = run(validate(composed("edct", over)), http_client=scripted_endpoint())["records"]
        pick = next((r for r in records if any(st.get("known_change") for st in r.get("steps", []))), records[0])
        chain_figure(Path(tmp) / "run" / "items" / pick["id"], out / "edct_chain.png",
                     title=f"EDCT on a {s.edct_px} px robot: the cited concepts edited in order (exact editor, verified)")  # fmt: skip


def zoo_figure(out: Path) -> None:
    """zoo.png: CCS against the true part reliance of the measured default zoo (its own figure function)."""
    from cbm.vlm.zoo.study import figure

    figure(json.loads(ZOO_RESULT.read_text())["members"], out / "zoo.png")


# ------------------------------------------------------------------------------------------ the command
def trained_figures(out: Path, s: Sizes, cache: str) -> None:
    t = train_models(s, cache)
    intervention_figures(out, t)
    selective_figures(out, t)


#: Each drawing step and the figures it writes, in order.
STEPS: list[tuple[tuple[str, ...], Callable[[Path, Sizes, str], None]]] = [
    (("robots.png",), robots_figure),
    (("robot_concepts.png",), robot_concepts_figure),
    (("robots_reference_vs_ours.png",), reference_figure),
    (("sudoku_boards.png",), sudoku_figure),
    (("intervention_curves.png", "intervention_policies.png", "risk_coverage.png", "reliability.png"), trained_figures),
    (("edct_chain.png",), edct_figure),
    (("zoo.png",), lambda out, s, cache: zoo_figure(out)),
]
#: A committed figure larger than this is reported (the pages load every one of them).
MAX_BYTES = 200_000
#: Colours a figure keeps when it is written (a palette PNG: a third to a tenth of matplotlib's RGBA bytes).
PALETTE = 128


def shrink(path: Path) -> None:
    """Rewrite a PNG with a palette of :data:`PALETTE` colours (no dithering), atomically."""
    from PIL import Image

    from cbm.core.atomic import atomic_write

    with Image.open(path) as im:
        small = im.convert("RGB").quantize(colors=PALETTE, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    atomic_write(path, lambda f: small.save(f, format="PNG", optimize=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Draw the documentation's figures from the project's own generators and plotting code.")
    parser.add_argument("--out", type=Path, default=IMG, help="folder to write the PNGs into (default: docs/img)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (seconds): checks the script, not the figures")
    parser.add_argument("--only", action="append", choices=sorted(FIGURES), metavar="NAME.png",
                        help="draw only the step that writes this figure (repeatable)")  # fmt: skip
    parser.add_argument("--cache-dir", default=os.environ.get("CBM_CACHE_DIR", ".cache/cbm"), help="dataset cache (default: $CBM_CACHE_DIR or .cache/cbm)")
    args = parser.parse_args(argv)
    sizes = SMOKE if args.smoke else FULL
    args.out.mkdir(parents=True, exist_ok=True)
    total = time.perf_counter()
    for names, draw in STEPS:
        if args.only and not set(args.only) & set(names):
            continue
        start = time.perf_counter()
        draw(args.out, sizes, args.cache_dir)
        for name in names:
            shrink(args.out / name)
            size = (args.out / name).stat().st_size
            big = "  (larger than 200 KB)" if size > MAX_BYTES and not args.smoke else ""
            say(f"{args.out / name}: {size / 1000:.0f} KB{big}")
        say(f"  {time.perf_counter() - start:.1f} s")
    say(f"done in {time.perf_counter() - total:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
