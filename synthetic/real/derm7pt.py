"""Derm7pt (Kawahara et al. 2019): dermoscopic images with the seven-point checklist, read from its
``release_v0`` layout.

``data.root`` holds ``meta/meta.csv`` (one row per case: ``diagnosis``, the seven criteria, the image
paths ``clinic`` and ``derm``, ...), the official split ``meta/{train,valid,test}_indexes.csv`` (a
column ``indexes``: 0-based rows of ``meta.csv``) and ``images/``. The dermoscopic image (``derm``) is
read.

Concepts (``concepts``):

- ``v04`` (concept-benchmark 0.4.1's): seven bits, each the value of a criterion that points to
  melanoma (an atypical pigment network, irregular streaks, irregular pigmentation, any regression
  structure, irregular dots and globules, a blue-whitish veil, dotted or linear irregular vessels);
- ``categorical``: the seven criteria as categorical concepts, one column per value
  (``<criterion>_<value>``, exactly one holding per case), which CBM, CEM and ProbCBM read as one
  softmax each and an intervention reveals whole.

Task (``task``): ``v04``, melanoma (any diagnosis naming it) against nevus (any naming it), other cases
left out; or ``diagnosis5``, the five groups of the dataset's own code (basal cell carcinoma, nevus,
melanoma, miscellaneous, seborrheic keratosis).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from synthetic.base import SPLITS, SyntheticData
from synthetic.real.base import RealData, load_real
from synthetic.real.layout import LayoutError, load_image, need_file

#: The seven criteria and every value ``meta.csv`` holds for each (the dataset's own code lists them).
CRITERIA: dict[str, tuple[str, ...]] = {
    "pigment_network": ("absent", "typical", "atypical"),
    "streaks": ("absent", "regular", "irregular"),
    "pigmentation": ("absent", "diffuse regular", "localized regular", "diffuse irregular", "localized irregular"),
    "regression_structures": ("absent", "blue areas", "white areas", "combinations"),
    "dots_and_globules": ("absent", "regular", "irregular"),
    "blue_whitish_veil": ("absent", "present"),
    "vascular_structures": ("absent", "arborizing", "comma", "hairpin", "within regression", "wreath", "dotted", "linear irregular"),
}
#: concept-benchmark 0.4.1's melanoma-indicating bit of each criterion (``_encode_derm7pt_concept``).
V04_BITS = {
    "pigment_network": lambda v: v == "atypical",
    "streaks": lambda v: v == "irregular",
    "pigmentation": lambda v: "irregular" in v,
    "regression_structures": lambda v: v != "absent",
    "dots_and_globules": lambda v: v == "irregular",
    "blue_whitish_veil": lambda v: v == "present",
    "vascular_structures": lambda v: v in ("dotted", "linear irregular"),
}
DIAGNOSIS5 = ("basal cell carcinoma", "nevus", "melanoma", "miscellaneous", "seborrheic keratosis")
SPLIT_FILES = {"train": "meta/train_indexes.csv", "val": "meta/valid_indexes.csv", "test": "meta/test_indexes.csv"}


def diagnosis5(d: str) -> int:
    """The dataset's five diagnosis groups: every nevus one class, every melanoma one, the rare ones miscellaneous."""
    d = d.lower()
    if "melanoma" in d:
        return 2
    if "nevus" in d:
        return 1
    if d == "basal cell carcinoma":
        return 0
    if d == "seborrheic keratosis":
        return 4
    return 3


@dataclass
class Derm7ptConfig(RealData):
    """``data=derm7pt``: Derm7pt from ``root`` (see the module docstring)."""

    name: str = "derm7pt"
    #: The ``release_v0`` folder (holding ``meta/`` and ``images/``).
    root: str = ""
    #: ``v04`` (seven melanoma-indicating bits) or ``categorical`` (the criteria with all their values).
    concepts: str = "v04"
    #: ``v04`` (melanoma vs nevus) or ``diagnosis5``.
    task: str = "v04"

    ROOT_HOLDS: ClassVar[str] = "the Derm7pt release_v0 folder"

    def __post_init__(self) -> None:
        from cbm.core.validation import one_of

        self.check_common()
        one_of("data.concepts", self.concepts, ("v04", "categorical"))
        one_of("data.task", self.task, ("v04", "diagnosis5"))

    @property
    def split_sizes(self) -> dict[str, int]:
        """Cases per split (reads and checks ``meta/``)."""
        return {k: int(v.sum()) for k, v in _table(self)["masks"].items()}


def _read_meta(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        reader = csv.DictReader(f)
        need = ["diagnosis", "derm", *CRITERIA]
        missing = [c for c in need if c not in (reader.fieldnames or [])]
        if missing:
            raise LayoutError(f"derm7pt: {path}: missing column(s) {missing} (have {reader.fieldnames})")
        rows = list(reader)
    if not rows:
        raise LayoutError(f"derm7pt: {path} has no cases")
    for i, r in enumerate(rows, 2):
        for c, values in CRITERIA.items():
            if r[c] not in values:
                raise LayoutError(f"derm7pt: {path} line {i}: {c} is {r[c]!r}, not one of {list(values)}")
    return rows


def _read_indexes(path: Path, n: int) -> np.ndarray:
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        reader = csv.DictReader(f)
        if "indexes" not in (reader.fieldnames or []):
            raise LayoutError(f"derm7pt: {path}: expected a column 'indexes' (have {reader.fieldnames})")
        try:
            idx = np.array([int(r["indexes"]) for r in reader], dtype=np.int64)
        except (TypeError, ValueError):
            raise LayoutError(f"derm7pt: {path}: 'indexes' must be row numbers of meta.csv") from None
    bad = idx[(idx < 0) | (idx >= n)]
    if len(bad):
        raise LayoutError(f"derm7pt: {path}: index {int(bad[0])} is not a row of meta.csv (0..{n - 1})")
    return idx


def _table(cfg: Derm7ptConfig) -> dict[str, Any]:
    """meta.csv and the split files, checked; the cases the task keeps and their split masks."""
    base = cfg.root_dir
    meta = need_file(base, "meta/meta.csv", "derm7pt")
    rows = _read_meta(meta)
    n = len(rows)
    split = np.full(n, -1, dtype=np.int8)
    for name, rel in SPLIT_FILES.items():
        idx = _read_indexes(need_file(base, rel, "derm7pt"), n)
        if (split[idx] >= 0).any():
            raise LayoutError(f"derm7pt: {base / rel}: row {int(idx[split[idx] >= 0][0])} is in two split files")
        split[idx] = SPLITS[name]
    diag = [r["diagnosis"].lower() for r in rows]
    if cfg.task == "v04":
        y = np.array([1 if "melanoma" in d else 0 if "nevus" in d else -1 for d in diag], dtype=np.int64)
    else:
        y = np.array([diagnosis5(d) for d in diag], dtype=np.int64)
    keep = (y >= 0) & (split >= 0)
    train = np.flatnonzero(keep & (split == SPLITS["train"]))
    n_cal = int(cfg.calib_fraction * len(train))
    calib = np.random.default_rng(cfg.seed).permutation(train)[:n_cal]
    split[calib] = SPLITS["calib"]
    masks = {name: keep & (split == code) for name, code in SPLITS.items()}
    return {"base": base, "meta": meta, "rows": rows, "y": y, "keep": keep, "split": split, "masks": masks,
            "files": [meta, *(base / rel for rel in SPLIT_FILES.values())]}  # fmt: skip


def concept_table(rows: list[dict[str, str]], kind: str) -> tuple[np.ndarray, list[str], dict[str, list[str]]]:
    """``(c, names, groups)``: 0.4.1's seven bits, or one column per criterion value with the groups."""
    if kind == "v04":
        c = np.array([[float(V04_BITS[k](r[k])) for k in CRITERIA] for r in rows], dtype=np.float32).reshape(len(rows), len(CRITERIA))
        return c, list(CRITERIA), {}
    names, groups, cols = [], {}, []
    for k, values in CRITERIA.items():
        group = [f"{k}_{v.replace(' ', '_')}" for v in values]
        names += group
        groups[k] = group
        cols += [np.array([r[k] == v for r in rows], dtype=np.float32) for v in values]
    return np.stack(cols, axis=1), names, groups


def generate(cfg: Derm7ptConfig) -> SyntheticData:
    t = _table(cfg)
    rows = [r for r, k in zip(t["rows"], t["keep"]) if k]
    idx = np.flatnonzero(t["keep"])
    c, names, groups = concept_table(rows, cfg.concepts)
    x = np.stack([load_image(t["base"] / "images" / r["derm"], cfg.image_size, "derm7pt") for r in rows])
    classes = ["nevus", "melanoma"] if cfg.task == "v04" else list(DIAGNOSIS5)
    info: dict[str, Any] = {"source": "Derm7pt release_v0", "concepts": cfg.concepts, "task": cfg.task}
    if groups:
        info["concept_types"] = {"groups": groups, "continuous": []}
    return SyntheticData(x=x, c=c, c_true=c.copy(), y=t["y"][idx], split=t["split"][idx], meta=idx[:, None].astype(np.int64),
                         concept_names=names, true_concept_names=names, class_names=classes, meta_names=["meta_row"],
                         modality="image", info=info)  # fmt: skip


def load(cfg: Derm7ptConfig, cache_dir: str | Path | None = None, storage: str = "memory") -> SyntheticData:
    """:func:`generate` through the cache (:func:`synthetic.real.base.load_real`)."""
    t = _table(cfg)
    return load_real(cfg, cache_dir, storage, t["files"], lambda: generate(cfg), images=[t["base"] / "images" / r["derm"] for r in t["rows"]])
