"""Text modality: templated robot descriptions with synonyms, tokenised to word ids.

A description reads like ``a red robot with a round head , a boxy torso , no
knees , elbow joints , antennae , pointed ears , an open mouth , angular star
hands and spiky fork feet .`` Every feature is one clause; each clause value has
one or more synonymous phrasings chosen uniformly per sample, and with
``shuffle`` the clause order is permuted per sample. Words map to ids through the
fixed vocabulary :data:`VOCAB` (``0`` = padding); all arrays are right-padded to
the fixed length :data:`MAX_LEN`. Everything is vectorised (no loop per sample).
"""

from __future__ import annotations

import numpy as np

from synthetic.robot.attributes import (
    FOOT_SUBTYPES,
    HAND_SUBTYPES,
    N_FOOT,
    N_HAND,
    PALETTE_NAMES,
    attribute_table,
)

ROUND = ["round", "circular"]
SQUARE = ["square", "boxy"]

#: clause name -> (attribute, {value: [phrasing, ...]}) ; phrasings are space-separated words
CLAUSES: dict[str, tuple[str, dict[int, list[str]]]] = {
    "head": ("head_round", {0: [f"a {w} head" for w in SQUARE], 1: [f"a {w} head" for w in ROUND]}),
    "body": ("body_round", {0: [f"a {w} {n}" for w in SQUARE for n in ("body", "torso")],
                            1: [f"a {w} {n}" for w in ROUND for n in ("body", "torso")]}),
    "knees": ("knees", {0: ["no knees", "straight legs"], 1: ["knees", "knee joints"]}),
    "elbows": ("elbows", {0: ["no elbows", "straight arms"], 1: ["elbows", "elbow joints"]}),
    "antennae": ("antennae", {0: ["no antennae"], 1: ["antennae", "two antennas"]}),
    "ears": ("ears_triangle", {0: ["square ears", "blocky ears"], 1: ["triangular ears", "pointed ears"]}),
    "mouth": ("mouth_closed", {0: ["an open mouth", "a gaping mouth"], 1: ["a closed mouth", "a shut mouth"]}),
    "hands": ("hand_subtype", {
        k: [f"{w} {HAND_SUBTYPES[k]} hands" for w in (["round", "rounded"] if k < N_HAND // 2 else ["edgy", "angular"])]
        for k in range(N_HAND)
    }),
    "feet": ("foot_subtype", {
        k: [f"{w} {FOOT_SUBTYPES[k]} feet" for w in (["flat", "level"] if k < N_FOOT // 2 else ["pointy", "spiky"])]
        for k in range(N_FOOT)
    }),
}
PREFIX = "a {colour} robot with"


def _build_vocab() -> list[str]:
    words = set(PREFIX.replace("{colour}", "").split()) | set(PALETTE_NAMES) | {",", "and", "."}
    for _, table in CLAUSES.values():
        for phrasings in table.values():
            for p in phrasings:
                words |= set(p.split())
    return ["<pad>", *sorted(words)]


#: Word vocabulary; the id of a word is its index, 0 is padding.
VOCAB: list[str] = _build_vocab()
WORD_ID: dict[str, int] = {w: i for i, w in enumerate(VOCAB)}
_CLAUSE_LEN = max(len(p.split()) for _, t in CLAUSES.values() for ps in t.values() for p in ps)
#: Length of every token sequence.
MAX_LEN: int = len(PREFIX.split()) + sum(
    max(len(p.split()) for ps in t.values() for p in ps) + 1 for _, t in CLAUSES.values()
)


def _clause_table(table: dict[int, list[str]]) -> tuple[np.ndarray, np.ndarray]:
    """``ids [V, S, _CLAUSE_LEN]`` (padded) and number of phrasings per value ``[V]``."""
    n_val = max(table) + 1
    n_syn = max(len(p) for p in table.values())
    ids = np.zeros((n_val, n_syn, _CLAUSE_LEN), dtype=np.int64)
    counts = np.zeros(n_val, dtype=np.int64)
    for v, phrasings in table.items():
        counts[v] = len(phrasings)
        for j, p in enumerate(phrasings):
            toks = [WORD_ID[w] for w in p.split()]
            ids[v, j, : len(toks)] = toks
    return ids, counts


_TABLES = {name: _clause_table(table) for name, (_, table) in CLAUSES.items()}


def tokenize(meta: np.ndarray, rng: np.random.Generator, shuffle: bool = True) -> np.ndarray:
    """Token ids ``int64 [N, MAX_LEN]`` of one random description per ``meta`` row."""
    t = attribute_table(meta)
    n = len(meta)
    k = len(CLAUSES)
    syn_u = rng.random((n, k))
    order_u = rng.random((n, k))
    blocks = np.zeros((n, k, _CLAUSE_LEN + 1), dtype=np.int64)
    for j, (name, (attr, _)) in enumerate(CLAUSES.items()):
        ids, counts = _TABLES[name]
        v = t[attr]
        syn = np.minimum((syn_u[:, j] * counts[v]).astype(np.int64), counts[v] - 1)
        blocks[:, j, :_CLAUSE_LEN] = ids[v, syn]
    if shuffle:
        perm = np.argsort(order_u, axis=1, kind="stable")
        blocks = blocks[np.arange(n)[:, None], perm]
    blocks[:, : k - 2, _CLAUSE_LEN] = WORD_ID[","]
    blocks[:, k - 2, _CLAUSE_LEN] = WORD_ID["and"]
    blocks[:, k - 1, _CLAUSE_LEN] = WORD_ID["."]
    prefix_words = PREFIX.split()
    prefix = np.zeros((n, len(prefix_words)), dtype=np.int64)
    for i, w in enumerate(prefix_words):
        if w == "{colour}":
            prefix[:, i] = np.array([WORD_ID[c] for c in PALETTE_NAMES])[t["palette"]]
        else:
            prefix[:, i] = WORD_ID[w]
    full = np.concatenate([prefix, blocks.reshape(n, k * (_CLAUSE_LEN + 1))], axis=1)
    order = np.argsort(full == 0, axis=1, kind="stable")  # left-justify, keep word order
    return np.ascontiguousarray(np.take_along_axis(full, order, axis=1)[:, :MAX_LEN])


def decode(ids: np.ndarray, vocab: list[str] | None = None) -> list[str]:
    """Token ids ``[N, L]`` back to strings (padding dropped)."""
    vocab = VOCAB if vocab is None else vocab
    return [" ".join(vocab[i] for i in row if i != 0) for row in np.atleast_2d(ids)]
