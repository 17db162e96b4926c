"""N-way K-shot episodes: generated once from a seed, saved as JSON, reused by every model and
condition.

The grid is every ``n_way`` x ``k_shot`` with ``reps_times_n // n_way`` repetitions (Reps * N =
12: 6 two-way, 4 three-way and 3 four-way episodes per K, 26 in all for K in {1, 5}). Each
episode draws its N classes, K support items per class and ``queries`` query items per episode
(Q = 1: one query, of one of the N classes); support and query never share an item. Class
labels are shown to the model as the class names, as the paper does, or as numeric ids (``1..N``
in a random order) with ``anonymise=True``. The grid, ``anonymise`` included, is saved in the
episodes file: a file drawn with another value is refused in one line (delete it to redraw)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cbm.core.atomic import write_json_atomic
from cbm.core.validation import check_fields, conforms
from cbm.vlm.sealed import read_json, seal, unseal

if TYPE_CHECKING:
    from cbm.vlm.icl.datasets import ICLDataset

#: Bump when episodes for the same settings change (2: files carry a sha256).
EPISODES_VERSION = 2
#: Most episodes a grid may have per dataset, and most queries per episode.
MAX_EPISODES = 10_000
MAX_QUERIES = 100
#: What one shot and one episode look like in an episodes file.
SHOT_SCHEMA = {"index": int, "cls": str, "label": str}
EPISODE_SCHEMA = {"dataset": str, "n_way": int, "k_shot": int, "rep": int, "classes": [str], "labels": [str],
                  "support": [SHOT_SCHEMA], "query": [SHOT_SCHEMA]}  # fmt: skip


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
    #: Numbers of classes N per episode (distinct, each >= 2); the grid is every N x K.
    n_ways: list[int] = field(default_factory=lambda: [2, 3, 4])
    #: Numbers of labelled support shots K per class (distinct, each >= 1).
    k_shots: list[int] = field(default_factory=lambda: [1, 5])
    reps_times_n: int = 12
    #: Query items per episode, each of one of its N classes, never a support item.
    queries: int = 1
    seed: int = 42
    anonymise: bool = False  # True: numeric ids 1..N instead of the class names

    def __post_init__(self) -> None:
        check_fields(self, "episodes.")
        if not self.n_ways or any(n < 2 for n in self.n_ways) or len(set(self.n_ways)) < len(self.n_ways):
            raise ValueError(f"episodes.n_ways: distinct N, each >= 2, got {self.n_ways}")
        if not self.k_shots or any(k < 1 for k in self.k_shots) or len(set(self.k_shots)) < len(self.k_shots):
            raise ValueError(f"episodes.k_shots: distinct K, each >= 1, got {self.k_shots}")
        if self.reps_times_n < max(self.n_ways):
            raise ValueError(f"episodes.reps_times_n: must be >= the largest N ({max(self.n_ways)}: one episode per cell), got {self.reps_times_n}")
        bad = [n for n in self.n_ways if self.reps_times_n % n]
        if bad:
            raise ValueError(f"episodes.reps_times_n={self.reps_times_n} is not a multiple of N={bad}")
        if not 1 <= self.queries <= MAX_QUERIES:
            raise ValueError(f"episodes.queries: must lie in [1, {MAX_QUERIES}], got {self.queries}")
        if not 0 <= self.seed < 2**32:
            raise ValueError(f"episodes.seed: must lie in [0, 2**32), got {self.seed}")
        if self.n_episodes > MAX_EPISODES:
            raise ValueError(f"episodes: the grid has {self.n_episodes} episodes per dataset, more than {MAX_EPISODES}")

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
    """JSON (atomic, sealed with its sha256): the grid, what the dataset was, and every episode."""
    write_json_atomic(Path(path), seal({"version": EPISODES_VERSION, "grid": asdict(grid), "dataset": fingerprint,
                                        "episodes": [e.to_json() for e in episodes]}))  # fmt: skip


def load_episodes(path: str | Path, grid: EpisodeGrid, ds: ICLDataset) -> list[Episode] | None:
    """The saved episodes of dataset ``ds`` when they were made for the same grid and dataset;
    ``None`` when there are none.

    The file is the study's design, shared by every model and condition (and by runs pointed at
    one ``episodes_dir``): a changed file would silently change what is compared, so any problem
    is refused with one line (never redrawn behind the user's back): unreadable; edited since it
    was drawn (the sha256 does not match); made for other settings; or, even with a recomputed
    sha256, not a valid draw of this grid over this dataset (:func:`check_episodes`)."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        raw = read_json(path)
    except ValueError as err:
        raise ValueError(f"{err}: not an episodes file; delete it to redraw") from None
    d = unseal(raw)
    if d is None:
        raise ValueError(f"{path}: episodes file changed since it was drawn (no matching sha256); delete it to redraw")
    if d.get("version") != EPISODES_VERSION or d.get("grid") != asdict(grid) or d.get("dataset") != ds.fingerprint:
        raise ValueError(f"{path}: episodes made for other settings (grid or dataset differ); delete it or use another output_dir")
    try:
        return check_episodes(d.get("episodes"), grid, ds)
    except ValueError as err:
        raise ValueError(f"{path}: {err}; delete it to redraw") from None


def check_episodes(items: Any, grid: EpisodeGrid, ds: ICLDataset) -> list[Episode]:
    """The episodes of a file's ``episodes`` list, checked against ``grid`` and the dataset: every
    cell's repetitions present once; N distinct classes of the dataset, shown under distinct labels
    (``1..N`` when anonymised, else the names); K support shots per class and ``queries`` query
    shots, each a dataset index in range whose true class and shown label agree with the episode;
    support and query disjoint. ``ValueError`` naming the first problem."""
    if not isinstance(items, list):
        raise ValueError("'episodes' is not a list")
    want = {(n, k, r) for n, k, reps in grid.cells() for r in range(reps)}
    seen: set[tuple[int, int, int]] = set()
    out = []
    for j, e in enumerate(items):
        if not conforms(e, EPISODE_SCHEMA):
            raise ValueError(f"episode {j}: not an episode (fields {', '.join(EPISODE_SCHEMA)} of the right types)")
        ep = Episode.from_json(e)
        key = (ep.n_way, ep.k_shot, ep.rep)
        if ep.dataset != ds.name or key not in want or key in seen:
            raise ValueError(f"episode {j} ({ep.id}): not a {'repeated' if key in seen else 'cell'} of this grid and dataset")
        seen.add(key)
        _check_episode(ep, grid, ds)
        out.append(ep)
    if want - seen:
        missing = sorted(want - seen)
        raise ValueError(f"{len(missing)} episode(s) missing, e.g. n{missing[0][0]}-k{missing[0][1]}-r{missing[0][2]}")
    return out


def _check_episode(ep: Episode, grid: EpisodeGrid, ds: ICLDataset) -> None:
    n, names = ep.n_way, ds.class_names
    bad = lambda why: ValueError(f"episode {ep.id}: {why}")  # noqa: E731
    if len(ep.classes) != n or len(set(ep.classes)) != n or not set(ep.classes) <= set(names):
        raise bad(f"classes {list(ep.classes)} are not {n} distinct classes of the dataset")
    shown = [str(i) for i in range(1, n + 1)] if grid.anonymise else list(ep.classes)
    if len(ep.labels) != n or sorted(ep.labels) != sorted(shown) or (not grid.anonymise and list(ep.labels) != shown):
        raise bad(f"labels {list(ep.labels)} are not {'a permutation of 1..N' if grid.anonymise else 'the class names'}")
    if len(ep.support) != n * ep.k_shot or len(ep.query) != grid.queries:
        raise bad(f"{len(ep.support)} support and {len(ep.query)} query shots, expected {n * ep.k_shot} and {grid.queries}")
    label_of = dict(zip(ep.classes, ep.labels))
    for role, shots in (("support", ep.support), ("query", ep.query)):
        for s in shots:
            if not 0 <= s.index < len(ds):
                raise bad(f"{role} index {s.index} is outside the dataset (0..{len(ds) - 1})")
            if s.cls != names[int(ds.labels[s.index])] or s.cls not in label_of or s.label != label_of[s.cls]:
                raise bad(f"{role} item {s.index}: class {s.cls!r} / label {s.label!r} do not match the dataset and the episode")
    per_class = Counter(s.cls for s in ep.support)
    if any(per_class[c] != ep.k_shot for c in ep.classes):
        raise bad(f"support has {dict(per_class)} shots per class, expected {ep.k_shot} each")
    indices = [s.index for s in (*ep.support, *ep.query)]
    if len(set(indices)) != len(indices):
        raise bad("an item is used twice (support and query must be disjoint)")
