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

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cbm.core.validation import check_value
from cbm.vlm.images import MAX_IMAGE_PIXELS

SUDOKU_CLASSES = ("valid", "two columns broken", "two rows broken", "boxes broken")
DATASET_KINDS = ("robot", "sudoku", "imagefolder", "torchvision")
#: Most boards per class of the built-in Sudoku dataset.
MAX_SUDOKU_PER_CLASS = 5000
#: The image files an image folder lists (torchvision's ImageFolder extensions).
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


@dataclass
class ICLDataset:
    name: str
    class_names: list[str]
    labels: np.ndarray  # int64 [N], index into class_names
    image: Callable[[int], Any]  # item -> uint8 array or PIL image
    fingerprint: dict[str, Any]  # what the episodes were made from (saved beside them)
    on_disk: bool = False  # images decoded from files: each one an episode uses is decoded once up front

    def __len__(self) -> int:
        return len(self.labels)

    def check_images(self, indices: Any) -> None:
        """Decode each item in ``indices`` once (files: so a corrupt or oversized one stops the run
        with one line before any request, not halfway through)."""
        if self.on_disk:
            for i in sorted({int(i) for i in indices}):
                self.image(i)


def make_dataset(name: str, spec: dict[str, Any], cache_dir: str | None = None, max_pixels: int = MAX_IMAGE_PIXELS) -> ICLDataset:
    """The dataset ``spec`` describes (``kind`` one of :data:`DATASET_KINDS`); images read from
    files larger than ``max_pixels`` are refused."""
    spec = dict(spec)
    kind = spec.pop("kind", name)
    if kind == "robot":
        return _robot(name, spec, cache_dir)
    if kind == "sudoku":
        return _sudoku(name, spec)
    if kind == "imagefolder":
        return _imagefolder(name, spec, max_pixels)
    if kind == "torchvision":
        return _torchvision(name, spec, max_pixels)
    raise ValueError(f"datasets.{name}.kind: unknown kind '{kind}' (choose from: {', '.join(DATASET_KINDS)})")


def _need(name: str, spec: dict[str, Any], key: str, tp: type, what: str | None = None, default: Any = None) -> Any:
    """``spec[key]`` (or ``default``), removed from ``spec``, when of type ``tp``
    (:func:`cbm.core.validation.check_value`: a bool is not an int); else one line."""
    return check_value(spec.pop(key, default), tp, f"datasets.{name}.{key}", what)


def _robot(name: str, spec: dict[str, Any], cache_dir: str | None) -> ICLDataset:
    from synthetic.base import SPLITS
    from synthetic.registry import data_config, load_data
    from synthetic.robot.attributes import FOOT_SUBTYPES, HAND_SUBTYPES, META_INDEX, PALETTE_NAMES
    from synthetic.robot.generator import CLASS_NAMES

    class_by = _need(name, spec, "class_by", str, default="hand_subtype")
    split = _need(name, spec, "split", str, default="test")
    data_spec = {**_need(name, spec, "data", dict, "a mapping of robot data settings", {}), "name": "robot"}
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
    from synthetic.sudoku.config import SudokuConfig
    from synthetic.sudoku.render import render_boards

    per_class = _need(name, spec, "per_class", int, default=40)
    seed = _need(name, spec, "seed", int, default=0)
    if not 1 <= per_class <= MAX_SUDOKU_PER_CLASS:
        raise ValueError(f"datasets.{name}.per_class: must lie in [1, {MAX_SUDOKU_PER_CLASS}], got {per_class}")
    if not 0 <= seed < 2**32:
        raise ValueError(f"datasets.{name}.seed: must lie in [0, 2**32), got {seed}")
    options = ("cell_size", "style", "glyph_variants", "pencil_prob", "pencil_max", "blur", "noise")
    unknown = sorted(str(k) for k in spec if k not in options)
    if unknown:
        raise ValueError(f"datasets.{name}: unknown keys {unknown} (kind, per_class, seed, {', '.join(options)})")
    render = {"cell_size": 28, "style": "printed", **spec}
    try:
        SudokuConfig(**render)  # the render options' types and ranges
    except (TypeError, ValueError) as err:
        raise ValueError(f"datasets.{name}: bad render option ({err})") from None
    boards, labels = sudoku_boards(per_class, seed)
    seeds = np.random.default_rng(seed + 1).integers(0, 2**62, size=len(boards))
    return ICLDataset(name, list(SUDOKU_CLASSES), labels,
                      lambda i: render_boards(boards[i : i + 1], seeds=seeds[i : i + 1], glyph_seed=seed, **render)[0],
                      {"kind": "sudoku", "per_class": per_class, "seed": seed, "render": render})  # fmt: skip


def _imagefolder(name: str, spec: dict[str, Any], max_pixels: int) -> ICLDataset:
    """``root/<class>/.../<image>``, classes and files in sorted order (as torchvision's
    ImageFolder lists them, without importing it); every file's header is read up front, so a
    file that is not an image or is over ``max_pixels`` is refused before any episode is drawn."""
    from cbm.vlm.images import check_image_file, load_image

    root = _need(name, spec, "root", str, "a directory (root/<class>/<image>)")
    if spec:
        raise ValueError(f"datasets.{name}: unknown keys {sorted(spec)} (kind, root)")
    if not Path(root).is_dir():
        raise ValueError(f"datasets.{name}.root: '{root}' is not a directory (an image folder: root/<class>/<image>)")
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))
    files: list[str] = []
    targets: list[int] = []
    for c, cls in enumerate(classes):
        for dirpath, _, names in sorted(os.walk(Path(root) / cls)):
            for f in sorted(names):
                if f.lower().endswith(IMAGE_EXTENSIONS):
                    files.append(os.path.join(dirpath, f))
                    targets.append(c)
    if not files:
        raise ValueError(f"datasets.{name}.root: no image files under '{root}' (root/<class>/<image>: {', '.join(IMAGE_EXTENSIONS)})")
    for f in files:
        check_image_file(f, max_pixels, f"datasets.{name}: {f}")
    return ICLDataset(name, classes, np.asarray(targets, np.int64), lambda i: load_image(files[i], max_pixels, f"datasets.{name}: {files[i]}"),
                      {"kind": "imagefolder", "root": str(Path(root).resolve()), "n": len(files)}, on_disk=True)  # fmt: skip


def _torchvision(name: str, spec: dict[str, Any], max_pixels: int) -> ICLDataset:
    """A dataset class of ``torchvision.datasets`` (``name``) on disk at ``root``, never downloaded.
    ``name`` must be a class deriving from ``torch.utils.data.Dataset``
    (:func:`cbm.core.targets.resolve`): nothing else of the module (functions, submodules) is
    ever called with the user's keyword arguments."""
    import inspect

    import torch.utils.data

    from cbm.core.targets import resolve

    cls_name = _need(name, spec, "name", str, "a torchvision dataset class name (e.g. MNIST, CIFAR10)")
    root = _need(name, spec, "root", str, "a directory")
    factory = resolve(cls_name, f"datasets.{name}.name", kinds=(torch.utils.data.Dataset,), module="torchvision.datasets",
                      need="a dataset class (such as MNIST, CIFAR10, ImageFolder)")  # fmt: skip
    if "download" in spec or "loader" in spec:
        key = "download" if "download" in spec else "loader"
        raise ValueError(f"datasets.{name}.{key}: set by the study (download=False: read from disk only; loader: size-checked)")
    kwargs = dict(spec)
    params = inspect.signature(factory).parameters
    offline = {"download": False} if "download" in params else {}
    if "loader" in params:  # folder datasets: each file's size checked before it is decoded
        from cbm.vlm.images import load_image

        offline["loader"] = lambda path: load_image(path, max_pixels, f"datasets.{name}: {path}")
    try:
        ds = factory(root=str(root), **offline, **kwargs)
        targets = getattr(ds, "targets", None)
        if targets is None:
            targets = [ds[i][1] for i in range(len(ds))]
        targets = np.asarray(targets, np.int64)
        classes = list(getattr(ds, "classes", None) or [str(c) for c in sorted(set(targets.tolist()))])
    except Exception as err:  # noqa: BLE001 - a third-party class on the user's files: any failure means "not usable"
        line = (str(err).splitlines() or [type(err).__name__])[0]
        raise ValueError(f"datasets.{name}: {cls_name} at '{root}' is not usable offline ({line})") from None
    if targets.ndim != 1 or len(targets) == 0 or targets.min() < 0 or targets.max() >= len(classes):
        raise ValueError(f"datasets.{name}: {cls_name} at '{root}' has no usable integer class targets")

    def image(i: int) -> Any:
        from PIL import Image

        from cbm.vlm.images import check_pixels

        try:
            img = ds[i][0]
        except ValueError:  # already one line (the size-checked loader)
            raise
        except Exception as err:  # noqa: BLE001 - the class decodes the user's files
            raise ValueError(f"datasets.{name}: item {i}: cannot load the image ({type(err).__name__}: {err})") from None
        if isinstance(img, Image.Image):
            check_pixels(img.size, max_pixels, f"datasets.{name}: item {i}")
        return img

    return ICLDataset(name, [str(c) for c in classes], targets, image,
                      {"kind": "torchvision", "name": cls_name, "root": str(root), **kwargs, "n": len(targets)}, on_disk=True)  # fmt: skip
