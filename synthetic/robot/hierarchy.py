"""The structure of a robot concept set, derived from its definitions (not declared by hand).

Every concept is an expression over the body attributes, and the body attributes span a finite space
(2^7 binary features x 6 hand x 10 foot sub-types = 7,680 bodies). So each implication between
concepts can be read off exactly: ``A = a  =>  B = v`` holds when every body with ``A = a`` has
``B = v`` (and some body has ``A = a``). That covers concept-benchmark 0.4.1's hierarchy
(``concept_benchmark/robots/hierarchy.py``) without its naming conventions:

- refines / implies: ``foot_block = 1 => foot_pointy = 0`` (a sub-type reveals flat / pointy);
- siblings (at most one active in a group): ``foot_block = 1 => foot_dome = 0``;
- parents: ``foot_pointy = 0 => foot_diamond = 0``;

and holds for a user's own concept set too. Tautologies (a concept that is constant) are left out.

>>> imps = implications("human")
>>> ("foot_block", 1, "foot_dome", 0) in imps and ("foot_block", 0, "foot_dome", 0) not in imps
True
"""

from __future__ import annotations

import itertools
from functools import lru_cache

import numpy as np

from synthetic.robot.attributes import BODY_CARDINALITY, BODY_NAMES, body_table
from synthetic.robot.concepts import ConceptSet, concept_set_path, load_concept_set

#: ``(source, its value, target, the value it implies)``.
Implication = tuple[str, int, str, int]


def body_space() -> np.ndarray:
    """``int64 [7680, 9]``: every combination of the body attributes (columns :data:`BODY_NAMES`)."""
    grids = [range(BODY_CARDINALITY[name]) for name in BODY_NAMES]
    return np.array(list(itertools.product(*grids)), dtype=np.int64)


def derive(concepts: ConceptSet) -> list[Implication]:
    """Every implication ``A = a => B = v`` between two concepts of the set (module doc), in the order
    of the set's concepts; concepts constant over the body space, and continuous ones, imply and are
    implied by nothing (a categorical concept's values are 0/1 columns: they exclude each other)."""
    c = concepts.evaluate(body_table(body_space())).astype(bool)  # [bodies, m]
    names = concepts.names
    binary = [j for j, n in enumerate(names) if n not in set(concepts.continuous)]
    varying = [j for j in binary if c[:, j].any() and not c[:, j].all()]
    out: list[Implication] = []
    for a in varying:
        for a_val in (1, 0):
            rows = c[:, a] == bool(a_val)
            for b in varying:
                if b == a:
                    continue
                seen = c[rows, b]
                if seen.all() or not seen.any():
                    out.append((names[a], a_val, names[b], int(seen[0])))
    return out


def implications(concept_set: str) -> list[Implication]:
    """:func:`derive` of a built-in set or a concept-set file (cached per file and version)."""
    path = concept_set_path(concept_set)
    return list(_cached(str(path.resolve()), path.stat().st_mtime_ns, concept_set))


@lru_cache(maxsize=16)
def _cached(path: str, _mtime: int, name: str) -> tuple[Implication, ...]:
    return tuple(derive(load_concept_set(name)))
