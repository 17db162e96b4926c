"""CelebA (Liu et al. 2015), read from its published files: 40 face attributes, one the task.

``data.root`` holds ``img_align_celeba/`` (``000001.jpg`` ...), ``list_attr_celeba.txt`` (a count, the 40
attribute names, then one line per image: its file and 40 values of -1 / 1) and
``list_eval_partition.txt`` (each file and 0 / 1 / 2: train / valid / test); torchvision's layout, the
same under a ``celeba/`` folder, is found too. As pytorch-concepts reads it, one attribute is the task
(``task``, ``Attractive`` by default) and the 39 others are the concepts, on the official split.
``max_images`` keeps that many images of each split (seeded) for a CPU-sized run.

``groups`` gathers attributes that one answer reveals together (``cbm-intervene groups=true``); the
default (conf/data/celeba.yaml) is ours, by face region, since CelebA publishes none: hair colour, hair
style, facial hair, eyes, mouth, nose, face, accessories and overall. An attribute in no group is a
group of its own.

``task: composite`` is the CEM paper's CelebA task instead: the attributes are ranked by how balanced
they are over the whole file (``|share - 0.5|``, ties by their order), the first ``composite.concepts``
are the concepts and the next ``composite.hidden`` are hidden (in the label, not given: an incomplete
concept set); the label is the binary number those attributes spell (concepts then hidden, each
sorted by column; ``composite.width`` attributes per bit, a bit set when any of them is), renumbered
over the codes that occur. CEM also keeps a random 1 image in 12 of the file and splits those at
random 70 / 10 / 20: ``subsample: 12`` and ``split: random`` (``val_fraction`` / ``test_fraction``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from synthetic.base import SPLITS, SyntheticData
from synthetic.real.base import RealData, intervention_groups, load_real
from synthetic.real.layout import LayoutError, load_image, need_file

FILES = ("list_attr_celeba.txt", "list_eval_partition.txt")
PARTITION = {0: "train", 1: "val", 2: "test"}


#: ``data.task`` naming the CEM paper's composite task rather than one attribute.
COMPOSITE = "composite"


@dataclass
class CompositeTask:
    """``data.composite``: the CEM paper's CelebA task (``task: composite``; see the module docstring)."""

    #: The most balanced attributes given as concepts (CEM: 6).
    concepts: int = 6
    #: The next most balanced, in the label but not given (CEM: 2).
    hidden: int = 2
    #: Attributes per bit of the label (CEM's ``label_binary_width``: 1).
    width: int = 1


@dataclass
class CelebAConfig(RealData):
    """``data=celeba``: CelebA from ``root`` (see the module docstring)."""

    name: str = "celeba"
    #: The folder holding ``img_align_celeba/`` and the attribute files (or torchvision's ``celeba/`` above it).
    root: str = ""
    #: The attribute that is the label (pytorch-concepts: ``Attractive``), the other 39 the concepts; or
    #: ``composite``, the CEM paper's task (``composite``).
    task: str = "Attractive"
    composite: CompositeTask = field(default_factory=CompositeTask)
    #: Attribute groups revealed whole by ``cbm-intervene groups=true`` (name -> attributes).
    groups: dict[str, list[str]] = field(default_factory=dict)
    #: Keep a random 1 image in this many of the file (seeded; CEM: 12), before the split.
    subsample: int = 1
    #: ``official`` (``list_eval_partition.txt``) or ``random`` (seeded, ``val_fraction`` / ``test_fraction``: CEM's).
    split: str = "official"
    val_fraction: float = 0.1
    test_fraction: float = 0.2
    #: Images kept per split (seeded); ``null``: all 202,599.
    max_images: int | None = None

    ROOT_HOLDS: ClassVar[str] = "the folder holding img_align_celeba/"

    def __post_init__(self) -> None:
        from cbm.core.validation import integer, number, one_of

        self.check_common()
        integer("data.subsample", self.subsample, 1)
        one_of("data.split", self.split, ("official", "random"))
        number("data.val_fraction", self.val_fraction, 0.0, 0.9)
        number("data.test_fraction", self.test_fraction, 0.0, 0.9)
        if self.val_fraction + self.test_fraction >= 1.0:
            raise ValueError(f"data.val_fraction + data.test_fraction must be < 1, got {self.val_fraction} + {self.test_fraction}")
        if self.max_images is not None:
            integer("data.max_images", self.max_images, 1)
        integer("data.composite.concepts", self.composite.concepts, 1, 39)
        integer("data.composite.hidden", self.composite.hidden, 0, 39)
        integer("data.composite.width", self.composite.width, 1, 40)
        self.groups = {str(g): [str(a) for a in members] for g, members in dict(self.groups).items()}
        seen: dict[str, str] = {}
        for g, members in self.groups.items():
            if not members:
                raise ValueError(f"data.groups.{g}: a group needs at least one attribute")
            for a in members:
                if a in seen:
                    raise ValueError(f"data.groups: '{a}' is in two groups ({seen[a]}, {g})")
                seen[a] = g
        if self.composite.concepts + self.composite.hidden > 40:
            raise ValueError(f"data.composite: concepts + hidden must be at most CelebA's 40 attributes, got "
                             f"{self.composite.concepts} + {self.composite.hidden}")  # fmt: skip

    @property
    def base(self) -> Path:
        root = self.root_dir
        return root / "celeba" if not (root / FILES[0]).is_file() and (root / "celeba" / FILES[0]).is_file() else root

    @property
    def split_sizes(self) -> dict[str, int]:
        split = _index(self)["split"]
        return {name: int((split == code).sum()) for name, code in SPLITS.items()}


def _index(cfg: CelebAConfig) -> dict[str, Any]:
    """The attribute table and the partition, checked; the images kept and their splits."""
    base = cfg.base
    paths = {f: need_file(base, f, "celeba") for f in FILES}
    with open(paths["list_attr_celeba.txt"], encoding="utf-8", errors="replace") as f:
        lines = [ln.split() for ln in f if ln.strip()]
    if len(lines) < 3 or not lines[0][0].isdigit():
        raise LayoutError(f"celeba: {paths['list_attr_celeba.txt']}: expected a count, the attribute names, then one line per image")
    names, rows = lines[1], lines[2:]
    if int(lines[0][0]) != len(rows):
        raise LayoutError(f"celeba: {paths['list_attr_celeba.txt']}: says {lines[0][0]} images, lists {len(rows)}")
    if cfg.task not in (*names, COMPOSITE):
        raise LayoutError(f"celeba: data.task={cfg.task!r} is neither '{COMPOSITE}' nor an attribute of {paths['list_attr_celeba.txt']} ({names})")
    unknown = sorted({a for members in cfg.groups.values() for a in members} - set(names))
    if unknown:
        raise LayoutError(f"celeba: data.groups names {unknown}, not attributes of {paths['list_attr_celeba.txt']}")
    if cfg.task == COMPOSITE and cfg.composite.concepts + cfg.composite.hidden > len(names):
        raise LayoutError(f"celeba: data.composite asks for {cfg.composite.concepts} + {cfg.composite.hidden} attributes, "
                          f"{paths['list_attr_celeba.txt']} has {len(names)}")  # fmt: skip
    try:
        values = np.array([[int(v) for v in r[1:]] for r in rows], dtype=np.int64)
    except ValueError:
        raise LayoutError(f"celeba: {paths['list_attr_celeba.txt']}: attribute values must be -1 or 1") from None
    if values.shape[1:] != (len(names),) or not np.isin(values, (-1, 1)).all():
        raise LayoutError(f"celeba: {paths['list_attr_celeba.txt']}: each line needs a file and {len(names)} values of -1 or 1")
    files = [r[0] for r in rows]
    part = {}
    with open(paths["list_eval_partition.txt"], encoding="utf-8", errors="replace") as f:
        for i, ln in enumerate(f, 1):
            fields = ln.split()
            if not fields:
                continue
            if len(fields) < 2 or fields[1] not in ("0", "1", "2"):
                raise LayoutError(f"celeba: {paths['list_eval_partition.txt']} line {i}: expected '<file> 0|1|2', got {ln.strip()[:60]!r}")
            part[fields[0]] = int(fields[1])
    missing = [f for f in files if f not in part]
    if missing:
        raise LayoutError(f"celeba: {paths['list_eval_partition.txt']}: no split for {missing[0]} ({len(missing)} images)")
    split = np.array([SPLITS[PARTITION[part[f]]] for f in files], dtype=np.int8)
    rng = np.random.default_rng(cfg.seed)
    kept = np.sort(rng.choice(len(files), len(files) // cfg.subsample, replace=False)) if cfg.subsample > 1 else np.arange(len(files))
    if cfg.split == "random":
        order = rng.permutation(kept)
        n_test, n_val = int(cfg.test_fraction * len(kept)), int(cfg.val_fraction * len(kept))
        split[kept] = SPLITS["train"]
        split[order[:n_test]] = SPLITS["test"]
        split[order[n_test : n_test + n_val]] = SPLITS["val"]
    dropped = np.ones(len(files), dtype=bool)
    dropped[kept] = False
    split[dropped] = -1
    if cfg.max_images is not None:
        for code in np.unique(split[split >= 0]):
            rows_of = np.flatnonzero(split == code)
            if len(rows_of) > cfg.max_images:
                split[rng.choice(rows_of, len(rows_of) - cfg.max_images, replace=False)] = -1
    if cfg.calib_fraction:
        train = np.flatnonzero(split == SPLITS["train"])
        split[np.random.default_rng(cfg.seed).permutation(train)[: int(cfg.calib_fraction * len(train))]] = SPLITS["calib"]
    return {"base": base, "paths": paths, "names": names, "values": (values + 1) // 2, "files": files, "split": split}


def composite_task(values: np.ndarray, task: CompositeTask) -> dict[str, Any]:
    """The CEM paper's task over ``values [N, 40]`` (0/1, every image of the file): the concept and hidden
    columns, each image's class and the classes' codes (the binary strings, most significant bit first)."""
    order = np.argsort(np.abs(values.mean(0) - 0.5), kind="stable")
    shown = sorted(order[: task.concepts].tolist())
    hidden = sorted(order[task.concepts : task.concepts + task.hidden].tolist())
    spelled = values[:, shown + hidden]
    bits = np.stack([spelled[:, i : i + task.width].any(1) for i in range(0, spelled.shape[1], task.width)], axis=1)
    code = bits.astype(np.int64) @ (1 << np.arange(bits.shape[1] - 1, -1, -1))
    codes, label = np.unique(code, return_inverse=True)
    return {"concepts": shown, "hidden": hidden, "label": label.astype(np.int64),
            "class_names": [format(int(v), f"0{bits.shape[1]}b") for v in codes]}  # fmt: skip


def generate(cfg: CelebAConfig) -> SyntheticData:
    ix = _index(cfg)
    rows = np.flatnonzero(ix["split"] >= 0)
    names = ix["names"]
    if cfg.task == COMPOSITE:
        task = composite_task(ix["values"], cfg.composite)
        keep, y, class_names = task["concepts"], task["label"][rows], task["class_names"]
        info = {"source": "CelebA", "task": COMPOSITE, "concepts": [names[j] for j in keep], "hidden": [names[j] for j in task["hidden"]]}
    else:
        t = names.index(cfg.task)
        keep = [j for j in range(len(names)) if j != t]
        y, class_names, info = ix["values"][rows, t], [f"not {cfg.task}", cfg.task], {"source": "CelebA", "task": cfg.task}
    c = ix["values"][rows][:, keep].astype(np.float32)
    x = np.stack([load_image(ix["base"] / "img_align_celeba" / ix["files"][r], cfg.image_size, "celeba") for r in rows])
    kept = [names[j] for j in keep]
    info["intervention_groups"] = intervention_groups(cfg.groups, kept)
    return SyntheticData(x=x, c=c, c_true=c.copy(), y=y.astype(np.int64), split=ix["split"][rows],
                         meta=(rows + 1)[:, None].astype(np.int64), concept_names=kept, true_concept_names=kept,
                         class_names=class_names, meta_names=["image_number"], modality="image", info=info)  # fmt: skip


def load(cfg: CelebAConfig, cache_dir: str | Path | None = None, storage: str = "memory") -> SyntheticData:
    """:func:`generate` through the cache (:func:`synthetic.real.base.load_real`)."""
    ix = _index(cfg)
    return load_real(cfg, cache_dir, storage, list(ix["paths"].values()), lambda: generate(cfg),
                     images=[ix["base"] / "img_align_celeba" / f for f in ix["files"]])  # fmt: skip
