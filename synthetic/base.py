"""The ``(x, c, y)`` data contract shared by every generator.

A generator is a pure function ``config -> SyntheticData``: the same config and
seed give byte-identical arrays. Arrays live in numpy so they can be cached and
exported; :mod:`synthetic.datamodule` turns them into dict batches of tensors.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

#: Integer codes of the ``split`` array.
SPLITS: dict[str, int] = {"train": 0, "val": 1, "calib": 2, "test": 3}


@dataclass
class SyntheticData:
    """All splits of one generated dataset.

    Attributes
    ----------
    x : images ``uint8 [N,H,W,3]``, tabular ``float32 [N,d]`` or token ids ``int64 [N,L]``.
    c : ``float32 [N,m]`` concept labels as annotated (possibly noisy / misspecified).
    c_true : ``float32 [N,m_true]`` the generator's true causal concepts.
    y : ``int64 [N]`` class labels.
    split : ``int8 [N]`` split codes, see :data:`SPLITS`.
    meta : ``int64 [N,k]`` generator attributes, enough to re-render a sample.
    concept_names, true_concept_names, class_names, meta_names : column names.
    modality : ``"image"``, ``"tabular"`` or ``"text"``.
    extra : further named arrays with first dim ``N`` (e.g. Sudoku ``board``).
    info : JSON-serialisable description (vocabulary, generator version...).
    """

    x: np.ndarray
    c: np.ndarray
    c_true: np.ndarray
    y: np.ndarray
    split: np.ndarray
    meta: np.ndarray
    concept_names: list[str]
    true_concept_names: list[str]
    class_names: list[str]
    meta_names: list[str]
    modality: str
    extra: dict[str, np.ndarray] = field(default_factory=dict)
    info: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.y)
        for name in ("x", "c", "c_true", "split", "meta", *self.extra):
            arr = getattr(self, name) if name in ("x", "c", "c_true", "split", "meta") else self.extra[name]
            if len(arr) != n:
                raise ValueError(f"SyntheticData: '{name}' has {len(arr)} rows, expected {n}")
        if self.c.shape[1] != len(self.concept_names):
            raise ValueError("SyntheticData: c columns do not match concept_names")
        if self.c_true.shape[1] != len(self.true_concept_names):
            raise ValueError("SyntheticData: c_true columns do not match true_concept_names")

    @property
    def n_concepts(self) -> int:
        return self.c.shape[1]

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    def indices(self, split: str) -> np.ndarray:
        """Row indices of one split (``train``, ``val``, ``calib`` or ``test``)."""
        if split not in SPLITS:
            raise ValueError(f"unknown split '{split}', expected one of {sorted(SPLITS)}")
        return np.flatnonzero(self.split == SPLITS[split])

    # ----------------------------------------------------------------- I/O
    #: Arrays every :meth:`to_arrays` file holds (``extra__*`` ones come on top).
    ARRAY_KEYS = (
        "x", "c", "c_true", "y", "split", "meta", "concept_names", "true_concept_names", "class_names",
        "meta_names", "modality", "info",
    )  # fmt: skip

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Flat dict of arrays, the format of cache files and ``cbm-data export``."""
        arrays = {
            "x": self.x,
            "c": self.c,
            "c_true": self.c_true,
            "y": self.y,
            "split": self.split,
            "meta": self.meta,
            "concept_names": np.array(self.concept_names),
            "true_concept_names": np.array(self.true_concept_names),
            "class_names": np.array(self.class_names),
            "meta_names": np.array(self.meta_names),
            "modality": np.array(self.modality),
            "info": np.array(json.dumps(self.info, sort_keys=True)),
        }
        for k, v in self.extra.items():
            arrays[f"extra__{k}"] = v
        return arrays

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> SyntheticData:
        """Inverse of :meth:`to_arrays` (an ``x`` with a shape, e.g. memory-mapped or rendered per
        batch, is kept as it is)."""
        extra = {k[len("extra__"):]: np.asarray(v) for k, v in arrays.items() if k.startswith("extra__")}
        x = arrays["x"]
        return cls(
            x=x if hasattr(x, "shape") and hasattr(x, "__getitem__") else np.asarray(x),
            c=np.asarray(arrays["c"]),
            c_true=np.asarray(arrays["c_true"]),
            y=np.asarray(arrays["y"]),
            split=np.asarray(arrays["split"]),
            meta=np.asarray(arrays["meta"]),
            concept_names=[str(s) for s in arrays["concept_names"]],
            true_concept_names=[str(s) for s in arrays["true_concept_names"]],
            class_names=[str(s) for s in arrays["class_names"]],
            meta_names=[str(s) for s in arrays["meta_names"]],
            modality=str(arrays["modality"]),
            extra=extra,
            info=json.loads(str(arrays["info"])),
        )

    def save(self, path: str | Path) -> None:
        """Write an uncompressed ``.npz`` atomically (temp file + rename)."""
        from cbm.core.atomic import save_npz_atomic

        save_npz_atomic(path, self.to_arrays())

    @classmethod
    def load(cls, path: str | Path) -> SyntheticData:
        with np.load(Path(path), allow_pickle=False) as f:
            return cls.from_arrays({k: f[k] for k in f.files})


def split_codes(sizes: dict[str, int], rng: np.random.Generator | None = None) -> np.ndarray:
    """Split-code array laid out as consecutive blocks train|val|calib|test.

    Generators draw samples i.i.d., so consecutive blocks are already a random split;
    ``rng`` is accepted for generators whose samples are ordered and need shuffling.
    """
    codes = np.concatenate([np.full(sizes.get(name, 0), code, dtype=np.int8) for name, code in SPLITS.items()])
    if rng is not None:
        rng.shuffle(codes)
    return codes
