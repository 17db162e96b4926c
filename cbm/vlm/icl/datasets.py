"""Image datasets for the ICL study: built-in offline ones (synthetic robots, rendered Sudoku
boards) and anything on disk (an image folder, a torchvision dataset with ``download=False``).

Each is an :class:`ICLDataset`: class names, one class index per item, and ``image(i)``. The
study needs at least four classes (4-way episodes), so the built-ins define multi-class tasks
with exact labels:

* ``robot``: robots classed by one attribute, ``class_by`` (default ``hand_subtype``: ball,
  ring, clover, block, wedge or star hands; also ``foot_subtype``, ``palette``, or ``label`` for
  the two-class Glorp / Drent rule);
* ``sudoku``: completed boards that are ``valid``, have ``two columns broken`` (two cells of one
  row swapped inside a box), ``two rows broken`` (two cells of one column swapped inside a box) or
  ``boxes broken`` (two rows from different bands swapped: rows and columns stay valid). Every
  label is checked by the exact checker.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

SUDOKU_CLASSES = ("valid", "two columns broken", "two rows broken", "boxes broken")
DATASET_KINDS = ("robot", "sudoku", "imagefolder", "torchvision")


@dataclass
class ICLDataset:
    name: str
    class_names: list[str]
    labels: np.ndarray  # int64 [N], index into class_names
    image: Callable[[int], Any]  # item -> uint8 array or PIL image
    fingerprint: dict[str, Any]  # what the episodes were made from (saved beside them)

    def __len__(self) -> int:
        return len(self.labels)


def make_dataset(name: str, spec: dict[str, Any], cache_dir: str | None = None) -> ICLDataset:
    """The dataset ``spec`` describes (``kind`` one of :data:`DATASET_KINDS`)."""
    spec = dict(spec)
    kind = spec.pop("kind", name)
    if kind == "robot":
        return _robot(name, spec, cache_dir)
    if kind == "sudoku":
        return _sudoku(name, spec)
    if kind == "imagefolder":
        return _imagefolder(name, spec)
    if kind == "torchvision":
        return _torchvision(name, spec)
    raise ValueError(f"datasets.{name}.kind: unknown kind '{kind}' (choose from: {', '.join(DATASET_KINDS)})")


def _robot(name: str, spec: dict[str, Any], cache_dir: str | None) -> ICLDataset:
    from synthetic.base import SPLITS
    from synthetic.registry import data_config, load_data
    from synthetic.robot.attributes import FOOT_SUBTYPES, HAND_SUBTYPES, META_INDEX, PALETTE_NAMES
    from synthetic.robot.generator import CLASS_NAMES

    class_by = spec.pop("class_by", "hand_subtype")
    split = spec.pop("split", "test")
    data_spec = {"name": "robot", **dict(spec.pop("data", {}))}
    if spec:
        raise ValueError(f"datasets.{name}: unknown keys {sorted(spec)} (kind, class_by, split, data)")
    names = {"hand_subtype": [f"{h} hands" for h in HAND_SUBTYPES], "foot_subtype": [f"{f} feet" for f in FOOT_SUBTYPES],
             "palette": [f"{p} robot" for p in PALETTE_NAMES], "label": list(CLASS_NAMES)}  # fmt: skip
    if class_by not in names:
        raise ValueError(f"datasets.{name}.class_by: '{class_by}' is not one of {sorted(names)}")
    if split not in SPLITS:
        raise ValueError(f"datasets.{name}.split: unknown split '{split}' ({', '.join(SPLITS)})")
    data = load_data(data_config(data_spec), cache_dir)
    rows = data.indices(split)
    labels = data.y[rows] if class_by == "label" else data.meta[rows, META_INDEX[class_by]]
    return ICLDataset(name, names[class_by], np.asarray(labels, np.int64), lambda i: np.asarray(data.x[rows[i]]),
                      {"kind": "robot", "class_by": class_by, "split": split, "data": data_spec})  # fmt: skip


def sudoku_boards(per_class: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``per_class`` boards of each of :data:`SUDOKU_CLASSES` (``int8 [4*per_class,9,9]``, labels),
    interleaved; each label verified by the exact checker."""
    from synthetic.sudoku.checker import check_board
    from synthetic.sudoku.dataset import valid_boards

    rng = np.random.default_rng(seed)
    boards = valid_boards(4 * per_class, seed=seed, n_mip_seeds=max(1, per_class // 500 + 1)).copy()
    labels = np.arange(len(boards)) % 4
    n = len(boards)
    band = rng.integers(3, size=n)
    i, j = rng.choice(3, size=(n, 2), replace=True).T
    j = np.where(i == j, (i + 1) % 3, j)
    line = 3 * band + rng.integers(3, size=n)  # the row (or column) whose two cells are swapped
    box = 3 * rng.integers(3, size=n)  # inside which stack (or band)
    ar = np.arange(n)
    flat = boards.reshape(n, 81)
    a, b = box + i, box + j  # two positions inside one box-row / box-column
    # class 1: two cells of one row, same box (their two columns break); class 2: of one column (two rows break)
    swap = ar[(labels == 1) | (labels == 2)]
    in_row = (labels == 1)[swap]
    c1 = np.where(in_row, line[swap] * 9 + a[swap], a[swap] * 9 + line[swap])
    c2 = np.where(in_row, line[swap] * 9 + b[swap], b[swap] * 9 + line[swap])
    flat[swap, c1], flat[swap, c2] = flat[swap, c2], flat[swap, c1].copy()
    # class 3: two whole rows from different bands (only boxes break)
    r1 = 3 * band + i
    r2 = 3 * ((band + 1 + rng.integers(2, size=n)) % 3) + j
    three = ar[labels == 3]
    top = boards[three, r1[three]].copy()
    boards[three, r1[three]] = boards[three, r2[three]]
    boards[three, r2[three]] = top
    c = check_board(boards)
    rows_ok, cols_ok, boxes_ok = c[:, :9].all(1), c[:, 9:18].all(1), c[:, 18:].all(1)
    truth = np.select([c.all(1), rows_ok & boxes_ok, cols_ok & boxes_ok, rows_ok & cols_ok], [0, 1, 2, 3], -1)
    keep = truth == labels  # a swap of two equal digits cannot happen; a row swap that keeps boxes valid can
    return boards[keep], labels[keep].astype(np.int64)


def _sudoku(name: str, spec: dict[str, Any]) -> ICLDataset:
    from synthetic.sudoku.render import render_boards

    per_class = int(spec.pop("per_class", 40))
    seed = int(spec.pop("seed", 0))
    render = {"cell_size": 28, "style": "printed", **spec}
    boards, labels = sudoku_boards(per_class, seed)
    seeds = np.random.default_rng(seed + 1).integers(0, 2**62, size=len(boards))
    try:
        render_boards(boards[:1], seeds=seeds[:1], glyph_seed=seed, **render)
    except TypeError as err:
        raise ValueError(f"datasets.{name}: bad render option ({err})") from None
    return ICLDataset(name, list(SUDOKU_CLASSES), labels,
                      lambda i: render_boards(boards[i : i + 1], seeds=seeds[i : i + 1], glyph_seed=seed, **render)[0],
                      {"kind": "sudoku", "per_class": per_class, "seed": seed, "render": render})  # fmt: skip


def _imagefolder(name: str, spec: dict[str, Any]) -> ICLDataset:
    from torchvision.datasets import ImageFolder

    root = spec.get("root")
    if not root or not Path(root).is_dir():
        raise ValueError(f"datasets.{name}.root: '{root}' is not a directory (an image folder: root/<class>/<image>)")
    try:
        ds = ImageFolder(str(root))
    except (FileNotFoundError, RuntimeError) as err:
        raise ValueError(f"datasets.{name}: {root}: {err}") from None
    return ICLDataset(name, list(ds.classes), np.asarray(ds.targets, np.int64), lambda i: ds[i][0].convert("RGB"),
                      {"kind": "imagefolder", "root": str(Path(root).resolve()), "n": len(ds)})  # fmt: skip


def _torchvision(name: str, spec: dict[str, Any]) -> ICLDataset:
    import torchvision.datasets as tvd

    cls_name, root = spec.get("name"), spec.get("root")
    factory = getattr(tvd, str(cls_name), None)
    if factory is None:
        raise ValueError(f"datasets.{name}.name: torchvision has no dataset '{cls_name}'")
    kwargs = {k: v for k, v in spec.items() if k not in ("name", "root", "kind")}
    import inspect

    offline = {"download": False} if "download" in inspect.signature(factory).parameters else {}
    try:
        ds = factory(root=str(root), **offline, **kwargs)
    except (RuntimeError, FileNotFoundError, TypeError) as err:  # not on disk: torchvision says "Dataset not found"
        raise ValueError(f"datasets.{name}: {cls_name} at '{root}' is not usable offline ({str(err).splitlines()[0]})") from None
    targets = getattr(ds, "targets", None)
    if targets is None:
        targets = [ds[i][1] for i in range(len(ds))]
    classes = list(getattr(ds, "classes", [str(c) for c in sorted(set(int(t) for t in targets))]))
    return ICLDataset(name, classes, np.asarray(targets, np.int64), lambda i: ds[i][0],
                      {"kind": "torchvision", "name": cls_name, "root": str(root), **kwargs, "n": len(ds)})  # fmt: skip
