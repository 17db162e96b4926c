"""``data.source=concept_benchmark``: datasets made by the installed ``concept-benchmark`` 0.4.1.

The reference package (MIT; the ``[reference]`` extra) draws its robots with pycairo and pero and
pins torch 2.8, so it is best installed beside the project without its dependencies, e.g.::

    pip install --no-deps --target ~/cb-ref concept-benchmark==0.4.1 pero colorir pycairo
    PYTHONPATH=~/cb-ref cbm-train data=robot_v04 data.source=concept_benchmark

(pycairo builds against the system's cairo: Debian ``libcairo2-dev``). It runs in a child process
(:mod:`~synthetic.robot.reference.oracle_child`, the same interpreter and ``sys.path``), which
calls the reference's own ``DatasetGenerator(seed, renders_per_robot).generate_splits()`` at the
configured image size and writes its PNGs to a temporary folder; this process reads them back as
the reference's loader does (``PIL.Image.open(...).convert("RGB")``). The dataset is then cached
like any other (:func:`synthetic.robot.generator.load`: atomic, locked, keyed by the config), so
the reference runs once per config. Labels, split and images are the reference's; concepts are
the project's concept sets evaluated on the reference's own features.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from synthetic.robot.reference.catalog import meta_rows

#: The module the child process runs.
CHILD = Path(__file__).with_name("oracle_child.py")
#: What the reference needs besides numpy, Pillow and torch (import name -> what to install).
NEEDS = {"concept_benchmark": "concept-benchmark==0.4.1", "pero": "pero", "cairo": "pycairo", "colorir": "colorir"}
_SPLIT_NAMES = {"train": "train", "val": "validation", "test": "test"}


def missing_reference() -> str | None:
    """One line saying what is missing to run the reference here, or ``None`` when nothing is."""
    missing = [pkg for mod, pkg in NEEDS.items() if importlib.util.find_spec(mod) is None]
    if not missing:
        return None
    return (f"source=concept_benchmark needs the reference package, not importable here (missing: {', '.join(missing)}); "
            "install it beside the project: pip install --no-deps --target DIR concept-benchmark==0.4.1 pero colorir pycairo, "
            "then PYTHONPATH=DIR")  # fmt: skip


class ReferenceError(RuntimeError):
    """The reference package failed to make the dataset (its last line of output attached)."""


def run_child(args: list[str], cwd: str) -> None:
    """Run :data:`CHILD` with ``args`` in this interpreter, with this process's ``sys.path``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    res = subprocess.run([sys.executable, str(CHILD), *args], cwd=cwd, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        lines = [ln for ln in (res.stderr or res.stdout).splitlines() if ln.strip()]
        raise ReferenceError(f"concept-benchmark failed to make the robots: {lines[-1] if lines else f'exit {res.returncode}'}")


def _read_png(paths: list[Path], size: int) -> np.ndarray:
    from PIL import Image

    out = np.empty((len(paths), size, size, 3), dtype=np.uint8)
    for i, path in enumerate(paths):  # I/O: one decode per file, as the reference's loader does
        with Image.open(path) as img:
            out[i] = np.asarray(img.convert("RGB"))
    return out


def reference_dataset(cfg: Any) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``{split: (meta, y, x)}`` made by the reference for ``cfg`` (``render=reference``,
    ``source=concept_benchmark``): its train / validation / test rows; ``calib`` takes
    ``n_calib`` of the rows it leaves unused, as :func:`~synthetic.robot.reference.catalog.row_split` does."""
    why = missing_reference()
    if why:
        raise ReferenceError(why)
    with tempfile.TemporaryDirectory(prefix="cbm-reference-") as tmp:
        out = Path(tmp) / "dataset.npz"
        run_child(["dataset", str(out), "--seed", str(cfg.seed), "--renders", str(cfg.renders_per_robot),
                   "--size", str(cfg.image_size), "--image-dir", str(Path(tmp) / "data"), "--label-rule", cfg.label_rule,
                   "--n-train", str(cfg.n_train), "--n-test", str(cfg.n_test), "--val-share", repr(cfg.val_fraction)], tmp)  # fmt: skip
        with np.load(out, allow_pickle=False) as f:
            got = {k: f[k] for k in f.files}
        rows = {name: np.sort(got[f"split_{ref}"]) for name, ref in _SPLIT_NAMES.items()}
        sizes = cfg.split_sizes
        for name, r in rows.items():
            if len(r) != sizes[name]:
                raise ReferenceError(f"concept-benchmark made {len(r)} {name} rows, the config asks for {sizes[name]}")
        taken = np.zeros(len(got["row"]), dtype=bool)
        for r in rows.values():
            taken[r] = True
        rows["calib"] = np.sort(np.random.default_rng([cfg.seed, 11]).permutation(np.flatnonzero(~taken))[: cfg.n_calib])
        order = np.argsort(got["row"])  # position of each catalogue row id
        meta = meta_rows(got["body"][order], got["scheme"][order], got["row"][order])
        y, png = got["y"][order], got["png"][order]
        image_dir = Path(str(got["image_dir"]))
        return {name: (meta[r], y[r], _read_png([image_dir / str(p) for p in png[r]], cfg.image_size))
                for name, r in ((n, rows[n]) for n in ("train", "val", "calib", "test"))}  # fmt: skip
