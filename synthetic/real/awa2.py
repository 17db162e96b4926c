"""Animals with Attributes 2 (Xian et al. 2018), read from its published ``Animals_with_Attributes2/``.

``data.root`` holds ``classes.txt`` and ``predicates.txt`` (``<id>\\t<name>``, 1-based, the id may be
padded), ``predicate-matrix-binary.txt`` (50 rows x 85 0/1 values, rows in ``classes.txt`` order) and
``JPEGImages/<class>/<class>_NNNNN.jpg``. Every image carries its class's 85 binary attributes (the
dataset annotates classes, not images) and its class as the label, as pytorch-concepts reads it; the
split is drawn at random (``val_fraction`` / ``test_fraction``, seeded: 10% / 20% there), since the
published train / test classes are a zero-shot split. ``per_class`` keeps that many images of each class
(seeded) for a CPU-sized run.

The 85 predicates fall into the 28 groups of the dataset's attribute taxonomy (:data:`GROUPS`: colour,
fur pattern, size, ..., as pytorch-concepts groups them), which ``cbm-intervene groups=true`` reveals
whole; a predicate the taxonomy does not name is a group of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from synthetic.base import SPLITS, SyntheticData
from synthetic.real.base import RealData, intervention_groups, load_real
from synthetic.real.layout import LayoutError, load_image, need_file, read_columns

FILES = ("classes.txt", "predicates.txt", "predicate-matrix-binary.txt")
#: AwA2's attribute taxonomy: group -> its predicates (``predicates.txt`` names), 28 groups over all 85.
GROUPS: dict[str, tuple[str, ...]] = {
    "color": ("black", "white", "blue", "brown", "gray", "orange", "red", "yellow"),
    "fur_pattern": ("patches", "spots", "stripes", "furry", "hairless", "toughskin"),
    "size": ("big", "small", "bulbous", "lean"),
    "limb_shape": ("flippers", "hands", "hooves", "pads", "paws", "longleg", "longneck"),
    "tail": ("tail",),
    "teeth_type": ("chewteeth", "meatteeth", "buckteeth", "strainteeth"),
    "horns": ("horns",),
    "claws": ("claws",),
    "tusks": ("tusks",),
    "smelly": ("smelly",),
    "transport_mechanism": ("flys", "hops", "swims", "tunnels", "walks"),
    "speed": ("fast", "slow"),
    "strength": ("strong", "weak"),
    "muscle": ("muscle",),
    "movement": ("bipedal", "quadrapedal"),
    "active": ("active", "inactive"),
    "nocturnal": ("nocturnal",),
    "hibernate": ("hibernate",),
    "agility": ("agility",),
    "diet": ("fish", "meat", "plankton", "vegetation", "insects"),
    "feeding_type": ("forager", "grazer", "hunter", "scavenger", "skimmer", "stalker"),
    "general_location": ("newworld", "oldworld", "arctic"),
    "biome": ("coastal", "desert", "bush", "plains", "forest", "fields", "jungle", "mountains", "ocean", "ground", "water", "tree",
              "cave"),
    "fierceness": ("fierce", "timid"),
    "smart": ("smart",),
    "social_mode": ("group", "solitary"),
    "nestspot": ("nestspot",),
    "domestic": ("domestic",),
}  # fmt: skip


def taxonomy_groups(predicates: list[str]) -> dict[str, list[str]]:
    """The taxonomy's groups over ``predicates`` (in their order), each unnamed predicate its own group."""
    return intervention_groups(GROUPS, predicates)


@dataclass
class AwA2Config(RealData):
    """``data=awa2``: AwA2 from ``root`` (see the module docstring)."""

    name: str = "awa2"
    #: The ``Animals_with_Attributes2`` folder.
    root: str = ""
    #: Images kept per class (seeded); ``null``: all 37,322.
    per_class: int | None = None
    val_fraction: float = 0.1
    test_fraction: float = 0.2
    #: The split draw (pytorch-concepts: 42).
    seed: int = 42

    ROOT_HOLDS: ClassVar[str] = "the Animals_with_Attributes2 folder"

    def __post_init__(self) -> None:
        from cbm.core.validation import integer, number

        self.check_common()
        if self.per_class is not None:
            integer("data.per_class", self.per_class, 1)
        number("data.val_fraction", self.val_fraction, 0.0, 0.9)
        number("data.test_fraction", self.test_fraction, 0.0, 0.9)
        if self.val_fraction + self.test_fraction + self.calib_fraction >= 1.0:
            raise ValueError("data.val_fraction + data.test_fraction + data.calib_fraction must be < 1, got "
                             f"{self.val_fraction} + {self.test_fraction} + {self.calib_fraction}")  # fmt: skip

    @property
    def split_sizes(self) -> dict[str, int]:
        """Images per split (lists ``JPEGImages/``, checking the layout on the way)."""
        split = _index(self)["split"]
        return {name: int((split == code).sum()) for name, code in SPLITS.items()}


def _names(path: Path) -> list[str]:
    """``<id>\\t<name>`` lines with ids 1..n in order."""
    rows = read_columns(path, "awa2", 2, (int, str))
    ids = [r[0] for r in rows]
    if ids != list(range(1, len(rows) + 1)):
        raise LayoutError(f"awa2: {path}: ids must run 1..{len(rows)} in order")
    return [str(r[1]) for r in rows]


def _index(cfg: AwA2Config) -> dict[str, Any]:
    """The class and predicate lists, the class-attribute matrix and the images, checked; the split."""
    base = cfg.root_dir
    paths = {f: need_file(base, f, "awa2") for f in FILES}
    classes, predicates = _names(paths["classes.txt"]), _names(paths["predicates.txt"])
    rows = read_columns(paths["predicate-matrix-binary.txt"], "awa2", len(predicates), [int] * len(predicates))
    matrix = np.array(rows, dtype=np.int64)
    if matrix.shape != (len(classes), len(predicates)) or not np.isin(matrix, (0, 1)).all():
        raise LayoutError(f"awa2: {paths['predicate-matrix-binary.txt']}: expected {len(classes)} rows of {len(predicates)} 0/1 values "
                          f"(classes.txt x predicates.txt), got {matrix.shape[0]} rows")  # fmt: skip
    images, label = [], []
    rng = np.random.default_rng(cfg.seed)
    for k, cls in enumerate(classes):
        folder = base / "JPEGImages" / cls
        if not folder.is_dir():
            raise LayoutError(f"awa2: missing {folder} (the images of class '{cls}' of classes.txt)")
        files = sorted(p.name for p in folder.iterdir() if p.suffix.lower() == ".jpg")
        if cfg.per_class is not None and len(files) > cfg.per_class:
            files = sorted(rng.choice(files, cfg.per_class, replace=False).tolist())
        images += [f"{cls}/{f}" for f in files]
        label += [k] * len(files)
    n = len(images)
    order = np.random.default_rng(cfg.seed).permutation(n)
    n_val, n_test, n_cal = (int(f * n) for f in (cfg.val_fraction, cfg.test_fraction, cfg.calib_fraction))
    split = np.full(n, SPLITS["train"], dtype=np.int8)
    split[order[:n_test]] = SPLITS["test"]
    split[order[n_test : n_test + n_val]] = SPLITS["val"]
    split[order[n_test + n_val : n_test + n_val + n_cal]] = SPLITS["calib"]
    return {"base": base, "paths": paths, "classes": classes, "predicates": predicates, "matrix": matrix, "images": images,
            "label": np.array(label, dtype=np.int64), "split": split}  # fmt: skip


def generate(cfg: AwA2Config) -> SyntheticData:
    ix = _index(cfg)
    x = np.stack([load_image(ix["base"] / "JPEGImages" / rel, cfg.image_size, "awa2") for rel in ix["images"]])
    c = ix["matrix"][ix["label"]].astype(np.float32)
    meta = np.stack([ix["label"] + 1, np.arange(len(ix["label"]))], axis=1).astype(np.int64)
    return SyntheticData(x=x, c=c, c_true=c.copy(), y=ix["label"], split=ix["split"], meta=meta,
                         concept_names=ix["predicates"], true_concept_names=ix["predicates"], class_names=ix["classes"],
                         meta_names=["class_id", "image_index"], modality="image",
                         info={"source": "Animals with Attributes 2", "intervention_groups": taxonomy_groups(ix["predicates"])})  # fmt: skip


def load(cfg: AwA2Config, cache_dir: str | Path | None = None, storage: str = "memory") -> SyntheticData:
    """:func:`generate` through the cache (:func:`synthetic.real.base.load_real`)."""
    ix = _index(cfg)
    return load_real(cfg, cache_dir, storage, list(ix["paths"].values()), lambda: generate(cfg),
                     images=[ix["base"] / "JPEGImages" / rel for rel in ix["images"]])  # fmt: skip
