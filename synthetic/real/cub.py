"""CUB-200-2011 (Wah et al. 2011) as concept bottleneck models read it (Koh et al. 2020).

``data.root`` holds the dataset as Caltech ships it (``CUB_200_2011.tgz`` unpacked): a folder
``CUB_200_2011/`` with ``images.txt``, ``image_class_labels.txt``, ``train_test_split.txt``,
``classes.txt``, ``attributes/image_attribute_labels.txt`` and ``images/``, and the 312 attribute
names in ``attributes.txt`` (beside ``CUB_200_2011/`` in the archive, or inside it). ``root`` may be
the folder holding ``CUB_200_2011/`` or that folder itself.

Concepts (``concepts``):

- ``koh112`` (Koh et al.'s CBM, the default): each class's attribute labels by majority vote over
  its training images (a "not visible" absent answer, certainty 1, does not vote; a tie, no votes
  included, is present), every image labelled with its class's votes, on the paper's 112 attributes
  (:data:`KOH_112`; Koh et al.'s validation draw was unseeded, so the votes are recomputed on ours);
- ``voted``: the same votes, keeping the attributes present in at least ``min_class_count`` classes
  (the rule that chose the 112);
- ``instance``: all 312 attributes as annotated on each image.

Splits: the official test images are the test split; ``val_fraction`` of the official training
images (drawn with ``seed``) the validation split, as Koh et al. draw 20%; ``calib_fraction`` of them
a calibration split for ``cbm-automate`` (0 by default: the paper has none).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from synthetic.base import SPLITS, SyntheticData
from synthetic.real.base import RealData, load_real
from synthetic.real.layout import LayoutError, id_table, load_image, named_rows, need_file, read_columns

NAME = "CUB-200-2011"
#: The files every CUB reader needs, relative to the ``CUB_200_2011`` folder.
FILES = ("images.txt", "image_class_labels.txt", "train_test_split.txt", "classes.txt", "attributes/image_attribute_labels.txt")
CONCEPT_MODES = ("koh112", "voted", "instance")
#: The 112 attributes of Koh et al. (2020), 1-based ``attribute_id`` of ``attributes.txt`` (their
#: ``generate_new_data.py``; the same list as CEM's and pytorch-concepts' ``SELECTED_CONCEPTS``, 0-based there).
KOH_112 = (
    2, 5, 7, 8, 11, 15, 16, 21, 22, 24, 26, 30, 31, 36, 37, 39, 41, 45, 46, 51, 52, 54, 55, 57, 58, 60, 64, 65, 70, 71, 73, 76,
    81, 85, 91, 92, 94, 100, 102, 107, 111, 112, 117, 118, 120, 126, 127, 132, 133, 135, 146, 150, 152, 153, 154, 158, 159,
    164, 165, 169, 173, 179, 180, 182, 184, 188, 189, 194, 195, 197, 199, 203, 204, 209, 210, 212, 213, 214, 219, 221, 222,
    226, 236, 237, 239, 240, 241, 243, 244, 245, 250, 254, 255, 260, 261, 263, 269, 275, 278, 284, 290, 293, 294, 295, 299,
    300, 305, 306, 309, 310, 311, 312,
)  # fmt: skip
#: Attributes in ``attributes.txt`` of the published dataset.
N_ATTRIBUTES = 312
#: ``certainty_id`` of an answer the annotator could not see (``attributes/certainties.txt``: 1 not visible).
NOT_VISIBLE = 1


@dataclass
class CUBConfig(RealData):
    """``data=cub``: CUB-200-2011 from ``root`` (see the module docstring)."""

    name: str = "cub"
    #: The folder holding ``CUB_200_2011/`` (or that folder itself).
    root: str = ""
    #: ``koh112`` (Koh et al.'s 112 attributes, class-level votes), ``voted`` (the votes, attributes of
    #: ``min_class_count`` classes) or ``instance`` (the 312 as annotated).
    concepts: str = "koh112"
    #: ``voted``: keep attributes present in at least this many classes (10 in Koh et al.: 112 attributes).
    min_class_count: int = 10
    #: The images of the first this many classes (``classes.txt`` order): ``null`` for all 200, 25 for
    #: concept-benchmark 0.4.1's CUB-25.
    classes: int | None = None
    #: Share of the official training images drawn for validation (Koh et al.: 0.2).
    val_fraction: float = 0.2
    #: Seed of the validation / calibration draw.
    seed: int = 0

    ROOT_HOLDS: ClassVar[str] = "the folder holding CUB_200_2011/"

    def __post_init__(self) -> None:
        from cbm.core.validation import integer, number, one_of

        self.check_common()
        one_of("data.concepts", self.concepts, CONCEPT_MODES)
        integer("data.min_class_count", self.min_class_count, 1, 200)
        if self.classes is not None:
            integer("data.classes", self.classes, 2, 200)
        number("data.val_fraction", self.val_fraction, 0.0, 0.9)
        if self.val_fraction + self.calib_fraction >= 1.0:
            raise ValueError(f"data.val_fraction + data.calib_fraction must be < 1, got {self.val_fraction} + {self.calib_fraction}")

    # ---------------------------------------------------------------- layout
    @property
    def base(self) -> Path:
        """The ``CUB_200_2011`` folder (``root`` itself when it holds ``images.txt``)."""
        root = self.root_dir
        return root if (root / "images.txt").is_file() else root / "CUB_200_2011"

    def attribute_names_file(self) -> Path:
        """``attributes.txt``: beside ``CUB_200_2011/`` (the archive) or inside it."""
        for p in (self.base.parent / "attributes.txt", self.base / "attributes.txt", self.base / "attributes" / "attributes.txt"):
            if p.is_file():
                return p
        raise LayoutError(f"cub: missing attributes.txt (the 312 attribute names) beside or inside {self.base}")

    @property
    def split_sizes(self) -> dict[str, int]:
        """Images per split (reads ``train_test_split.txt``, checking the layout on the way)."""
        ix = _index(self)
        return {k: int(v.sum()) for k, v in _split_masks(self, ix["is_train"], ix["label"]).items()}


def _index(cfg: CUBConfig) -> dict[str, Any]:
    """The id files, checked: image paths, classes, official split."""
    base = cfg.base
    paths = {f: need_file(base, f, "cub") for f in FILES}
    _, images = named_rows(paths["images.txt"], "cub")
    n = len(images)
    _, classes = named_rows(paths["classes.txt"], "cub")
    label = id_table(paths["image_class_labels.txt"], "cub", n, "class")
    if label.min() < 1 or label.max() > len(classes):
        raise LayoutError(f"cub: {paths['image_class_labels.txt']}: class ids must be 1..{len(classes)} (classes.txt)")
    if cfg.classes is not None and cfg.classes > len(classes):
        raise LayoutError(f"cub: data.classes={cfg.classes} but {paths['classes.txt']} has {len(classes)} classes")
    is_train = id_table(paths["train_test_split.txt"], "cub", n, "split")
    if not np.isin(is_train, (0, 1)).all():
        raise LayoutError(f"cub: {paths['train_test_split.txt']}: is_training_image must be 0 or 1")
    return {"base": base, "paths": paths, "images": images, "classes": classes, "label": label - 1, "is_train": is_train.astype(bool)}


def _split_masks(cfg: CUBConfig, is_train: np.ndarray, label: np.ndarray) -> dict[str, np.ndarray]:
    """Boolean masks of the splits: the official test images, and a seeded draw of the training ones
    (the images of the first ``classes`` classes)."""
    inside = label < (cfg.classes or len(is_train))
    train_ids = np.flatnonzero(is_train & inside)
    order = np.random.default_rng(cfg.seed).permutation(train_ids)
    n_val, n_cal = int(cfg.val_fraction * len(order)), int(cfg.calib_fraction * len(order))
    out = {name: np.zeros(len(is_train), dtype=bool) for name in SPLITS}
    out["val"][order[:n_val]] = True
    out["calib"][order[n_val : n_val + n_cal]] = True
    out["train"][order[n_val + n_cal :]] = True
    out["test"][~is_train & inside] = True
    return out


def _attributes(path: Path, n_images: int, n_attr: int) -> tuple[np.ndarray, np.ndarray]:
    """``image_attribute_labels.txt``: ``<image_id> <attribute_id> <is_present> <certainty_id> <time>``
    (a few published lines carry an extra field, ignored) -> present and certainty ``[n_images, n_attr]``."""
    rows = np.array(read_columns(path, "cub", 4, (int, int, int, int)), dtype=np.int64)
    img, att, present, cert = rows.T
    bad = (img < 1) | (img > n_images) | (att < 1) | (att > n_attr) | ~np.isin(present, (0, 1))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise LayoutError(f"cub: {path}: row {i + 1} ({' '.join(map(str, rows[i]))}) is outside {n_images} images x {n_attr} attributes")
    out_p = np.zeros((n_images, n_attr), dtype=np.int8)
    out_c = np.zeros((n_images, n_attr), dtype=np.int8)
    out_p[img - 1, att - 1] = present
    out_c[img - 1, att - 1] = cert
    return out_p, out_c


def class_votes(present: np.ndarray, certainty: np.ndarray, label: np.ndarray, n_classes: int) -> np.ndarray:
    """Koh et al.'s class-level attribute labels ``int8 [n_classes, n_attr]``: per class the majority of
    its images' answers, an absent answer marked not visible not voting, a tie (no votes included) present.

    >>> p = np.array([[1, 0], [0, 0], [0, 1]]); c = np.array([[3, 1], [3, 1], [3, 3]])
    >>> class_votes(p, c, np.array([0, 0, 1]), 2).tolist()
    [[1, 1], [0, 1]]
    """
    votes = ~((present == 0) & (certainty == NOT_VISIBLE))
    yes = np.zeros((n_classes, present.shape[1]), dtype=np.int64)
    no = np.zeros_like(yes)
    np.add.at(yes, label, (votes & (present == 1)).astype(np.int64))
    np.add.at(no, label, (votes & (present == 0)).astype(np.int64))
    return (yes >= no).astype(np.int8)


def generate(cfg: CUBConfig) -> SyntheticData:
    """Read the dataset (every image opened and resized: one line naming any that does not open)."""
    ix = _index(cfg)
    _, attr_names = named_rows(cfg.attribute_names_file(), "cub")
    n = len(ix["images"])
    present, certainty = _attributes(ix["paths"]["attributes/image_attribute_labels.txt"], n, len(attr_names))
    masks = _split_masks(cfg, ix["is_train"], ix["label"])
    label = ix["label"]
    if cfg.concepts in ("koh112", "voted"):
        voted = class_votes(present[masks["train"]], certainty[masks["train"]], label[masks["train"]], len(ix["classes"]))
        keep = np.flatnonzero(voted.sum(0) >= cfg.min_class_count)
        if cfg.concepts == "koh112":
            if len(attr_names) != N_ATTRIBUTES:
                raise LayoutError(f"cub: data.concepts=koh112 names attributes of the published {N_ATTRIBUTES}; "
                                  f"{cfg.attribute_names_file()} has {len(attr_names)} (use data.concepts=voted)")  # fmt: skip
            keep = np.array(KOH_112) - 1
        if not len(keep):
            raise LayoutError(f"cub: no attribute is present in {cfg.min_class_count} classes of the training images (data.min_class_count)")
        c = voted[:, keep][label].astype(np.float32)
    else:
        keep = np.arange(len(attr_names))
        c = present.astype(np.float32)
    split = np.full(n, -1, dtype=np.int8)
    for name, m in masks.items():
        split[m] = SPLITS[name]
    rows = np.flatnonzero(split >= 0)  # the images of the classes kept
    x = np.empty((len(rows), cfg.image_size, cfg.image_size, 3), dtype=np.uint8)
    image_dir = ix["base"] / "images"
    for i, r in enumerate(rows):
        x[i] = load_image(image_dir / ix["images"][r], cfg.image_size, "cub")
    names = [attr_names[j] for j in keep]
    groups: dict[str, list[str]] = {}
    for nm in names:
        groups.setdefault(nm.split("::")[0], []).append(nm)
    return SyntheticData(
        x=x, c=c[rows], c_true=c[rows].copy(), y=label[rows].astype(np.int64), split=split[rows],
        meta=np.stack([rows + 1, label[rows] + 1], axis=1).astype(np.int64),
        concept_names=names, true_concept_names=names, class_names=list(ix["classes"])[: cfg.classes], meta_names=["image_id", "class_id"],
        modality="image",
        info={"source": NAME, "concepts": cfg.concepts, "attribute_ids": [int(j) + 1 for j in keep], "intervention_groups": groups},
    )  # fmt: skip


def load(cfg: CUBConfig, cache_dir: str | Path | None = None, storage: str = "memory") -> SyntheticData:
    """:func:`generate` through the cache (:func:`synthetic.real.base.load_real`)."""
    ix = _index(cfg)
    return load_real(cfg, cache_dir, storage, [*ix["paths"].values(), cfg.attribute_names_file()], lambda: generate(cfg),
                     images=[ix["base"] / "images" / rel for rel in ix["images"]])  # fmt: skip
