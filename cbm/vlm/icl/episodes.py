"""N-way K-shot episodes: generated once from a seed, saved as JSON, reused by every model and
condition.

The grid is every ``n_way`` x ``k_shot`` with ``reps_times_n // n_way`` repetitions (Reps * N =
12: 6 two-way, 4 three-way and 3 four-way episodes per K, 26 in all for K in {1, 5}). Each
episode draws its N classes, K support items per class and ``queries`` query items per episode
(Q = 1: one query, of one of the N classes); support and query never share an item. Class
labels are shown to the model as numeric ids (``1..N`` in a random order) unless
``anonymise=False``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from synthetic.atomic import write_json_atomic

#: Bump when episodes for the same settings change.
EPISODES_VERSION = 1


@dataclass(frozen=True)
class Shot:
    """One image of an episode: its ``index`` in the dataset, its true ``cls`` and the ``label`` shown."""

    index: int
    cls: str
    label: str


@dataclass(frozen=True)
class Episode:
    dataset: str
    n_way: int
    k_shot: int
    rep: int
    classes: tuple[str, ...]  # the N true class names, in label order
    labels: tuple[str, ...]  # what the prompt calls them (ids, or the names)
    support: tuple[Shot, ...]
    query: tuple[Shot, ...]

    @property
    def id(self) -> str:
        return f"{self.dataset}-n{self.n_way}-k{self.k_shot}-r{self.rep}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Episode:
        shots = lambda xs: tuple(Shot(int(s["index"]), str(s["cls"]), str(s["label"])) for s in xs)  # noqa: E731
        return cls(str(d["dataset"]), int(d["n_way"]), int(d["k_shot"]), int(d["rep"]), tuple(d["classes"]), tuple(d["labels"]),
                   shots(d["support"]), shots(d["query"]))  # fmt: skip


@dataclass
class EpisodeGrid:
    n_ways: list[int] = field(default_factory=lambda: [2, 3, 4])
    k_shots: list[int] = field(default_factory=lambda: [1, 5])
    reps_times_n: int = 12
    queries: int = 1
    seed: int = 42
    anonymise: bool = True

    def __post_init__(self) -> None:
        if not self.n_ways or any(n < 2 for n in self.n_ways):
            raise ValueError(f"episodes.n_ways: each N must be >= 2, got {self.n_ways}")
        if not self.k_shots or any(k < 1 for k in self.k_shots):
            raise ValueError(f"episodes.k_shots: each K must be >= 1, got {self.k_shots}")
        bad = [n for n in self.n_ways if self.reps_times_n % n]
        if bad:
            raise ValueError(f"episodes.reps_times_n={self.reps_times_n} is not a multiple of N={bad}")
        if self.queries < 1:
            raise ValueError(f"episodes.queries: must be >= 1, got {self.queries}")

    def cells(self) -> list[tuple[int, int, int]]:
        """``(N, K, repetitions)`` of every grid cell."""
        return [(n, k, self.reps_times_n // n) for k in self.k_shots for n in self.n_ways]

    @property
    def n_episodes(self) -> int:
        return sum(r for _, _, r in self.cells())

    def need_per_class(self) -> int:
        """Items a class must have: the largest K plus the queries."""
        return max(self.k_shots) + self.queries


def make_episodes(dataset: str, labels: np.ndarray, class_names: Sequence[str], grid: EpisodeGrid) -> list[Episode]:
    """Every episode of ``grid`` over a dataset whose item ``i`` has class ``labels[i]`` (an index
    into ``class_names``). Deterministic in ``(grid.seed, dataset)``; raises one line when the
    dataset has too few classes or items per class."""
    labels = np.asarray(labels, dtype=np.int64)
    counts = np.bincount(labels, minlength=len(class_names))
    usable = np.flatnonzero(counts >= grid.need_per_class())
    if len(usable) < max(grid.n_ways):
        raise ValueError(
            f"dataset '{dataset}': {len(usable)} classes have >= {grid.need_per_class()} items (K + queries), "
            f"the grid needs {max(grid.n_ways)} (n_ways={grid.n_ways})"
        )
    by_class = {int(c): np.flatnonzero(labels == c) for c in usable}
    rng = np.random.default_rng(np.random.SeedSequence([grid.seed, _stable_hash(dataset)]))
    out = []
    for n, k, reps in grid.cells():
        for rep in range(reps):
            chosen = rng.choice(usable, size=n, replace=False)
            ids = [str(i + 1) for i in rng.permutation(n)] if grid.anonymise else [class_names[c] for c in chosen]
            support, pools = [], {}
            for c, label in zip(chosen, ids):
                pool = rng.permutation(by_class[int(c)])
                pools[int(c)] = pool[k:]
                support += [Shot(int(i), class_names[c], label) for i in pool[:k]]
            order = rng.permutation(len(support))  # shots interleaved, not grouped by class
            support = [support[i] for i in order]
            q_cls = rng.choice(n, size=grid.queries)
            query = []
            for j, qi in enumerate(q_cls):
                c = int(chosen[qi])
                query.append(Shot(int(pools[c][j]), class_names[c], ids[qi]))
            out.append(Episode(dataset, n, k, rep, tuple(class_names[c] for c in chosen), tuple(ids), tuple(support), tuple(query)))
    return out


def _stable_hash(text: str) -> int:
    import hashlib

    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")


def save_episodes(path: str | Path, episodes: list[Episode], grid: EpisodeGrid, fingerprint: dict[str, Any]) -> None:
    """JSON (atomic): the grid, what the dataset was, and every episode."""
    write_json_atomic(Path(path), {"version": EPISODES_VERSION, "grid": asdict(grid), "dataset": fingerprint,
                                   "episodes": [e.to_json() for e in episodes]})  # fmt: skip


def load_episodes(path: str | Path, grid: EpisodeGrid, fingerprint: dict[str, Any]) -> list[Episode] | None:
    """The saved episodes when they were made for the same grid and dataset; ``None`` when there
    are none; one clear error when the file is unreadable or was made for other settings."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        d = json.loads(path.read_text())
        eps = [Episode.from_json(e) for e in d["episodes"]]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not an episodes file ({type(err).__name__}: {err})") from None
    if d.get("version") != EPISODES_VERSION or d.get("grid") != asdict(grid) or d.get("dataset") != fingerprint:
        raise ValueError(f"{path}: episodes made for other settings (grid or dataset differ); delete it or use another output_dir")
    return eps
