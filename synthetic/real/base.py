"""What every real dataset's config and loader share: where the data lie, the common checks, the
memory footprint, and the cache keyed by the label files' bytes (never by where they lie)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from synthetic.base import SyntheticData
from synthetic.cache import cached_arrays
from synthetic.real.features import FeaturesConfig, with_features
from synthetic.real.layout import LayoutError

#: Bytes a row takes besides its image (labels, concepts, meta).
ROW_OVERHEAD = 2048


@dataclass
class RealData:
    """The fields and checks every real dataset's config shares (each adds ``name``, its own knobs and
    ``split_sizes``)."""

    #: Where the dataset lies as published (see each dataset's ``root``).
    root: str = ""
    #: Side of the square images (px): the shorter side resized to it, the centre cropped.
    image_size: int = 64
    #: Share of the training images set aside for ``cbm-automate``'s calibration (seeded).
    calib_fraction: float = 0.0
    #: Seed of the split draws.
    seed: int = 0
    modality: str = "image"
    #: What the models read: the images, or a pretrained encoder's cached embeddings (``kind: precompute``).
    features: FeaturesConfig = field(default_factory=FeaturesConfig)

    #: What ``data.root`` must hold, for the refusal when it is empty.
    ROOT_HOLDS: ClassVar[str] = ""

    def check_common(self) -> None:
        """The checks every real dataset's ``__post_init__`` runs."""
        from cbm.core.validation import integer, number, one_of

        one_of("data.name", self.name, (type(self).name,))
        if not str(self.root):
            raise ValueError(f"data.root: {self.ROOT_HOLDS} is required (nothing is downloaded; see docs/guides/real-data.md)")
        integer("data.image_size", self.image_size, 8, 1024)
        number("data.calib_fraction", self.calib_fraction, 0.0, 0.9)
        one_of("data.modality", self.modality, ("image",))

    @property
    def root_dir(self) -> Path:
        """``data.root``, which must be a folder."""
        root = Path(self.root).expanduser()
        if not root.is_dir():
            raise LayoutError(f"{self.name}: data.root {root} is not a folder")
        return root

    def footprint(self, storage: str = "memory") -> dict[str, Any]:
        """Bytes the images and labels take in memory (:mod:`synthetic.resources`)."""
        n = sum(self.split_sizes.values())
        return {"rows": n, "unit": "images", "form": f"{self.image_size} px", "memory": n * (ROW_OVERHEAD + 3 * self.image_size**2),
                "disk": 0, "disk_possible": False, "knobs": ["image_size"]}  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: Bumped when a reader's output changes for the same files (2: AwA2's groups, CelebA's composite task),
#: so a cache an older reader wrote is not served.
CACHE_FORMAT = 2


def intervention_groups(groups: dict[str, Iterable[str]], concepts: Iterable[str]) -> dict[str, list[str]]:
    """``groups`` (name -> concept names) over ``concepts``, in their order: a group with none of them is
    dropped, a concept in no group is a group of its own (``info['intervention_groups']``)."""
    of = {a: g for g, members in groups.items() for a in members}
    out: dict[str, list[str]] = {}
    for a in concepts:
        out.setdefault(of.get(a, a), []).append(a)
    return out


def files_hash(paths: Iterable[Path]) -> str:
    """Hash of the files' bytes, in order."""
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:16]


def load_real(cfg: Any, cache_dir: str | Path | None, storage: str, files: Iterable[Path], generate: Callable[[], SyntheticData],
              images: Iterable[Path] = ()) -> SyntheticData:  # fmt: skip
    """``generate()`` through the on-disk cache, keyed by the config (not ``root``), ``files``' bytes and
    the ``images``' names and sizes (a replaced or broken image is never served from another copy's
    cache; reading every image's bytes would cost as much as decoding them): moving the dataset keeps
    its cache, changing a file makes a new one; then the feature cache."""
    if storage != "memory":
        raise ValueError(f"data={cfg.name} reads its images into memory (data_storage=memory), got '{storage}'")
    names = hashlib.sha256("\n".join(f"{p.name} {p.stat().st_size if p.is_file() else -1}" for p in images).encode()).hexdigest()[:16]
    key = {**{k: v for k, v in asdict(cfg).items() if k not in ("root", "features")}, "files": files_hash(files), "listing": names,
           "format": CACHE_FORMAT}  # fmt: skip
    arrays = cached_arrays(key, lambda: generate().to_arrays(), cache_dir, prefix=cfg.name, required=SyntheticData.ARRAY_KEYS)
    return with_features(SyntheticData.from_arrays(arrays), cfg.features, key, cache_dir, cfg.image_size)
