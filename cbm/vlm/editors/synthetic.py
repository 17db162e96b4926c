"""Exact counterfactual editors for the synthetic datasets: change one attribute, re-render.

The robot and Sudoku generators are pure functions of their attributes and rendering settings,
so an edit is exact: change one attribute of the item's ``meta``, re-render both versions with
the dataset's own settings and the changed-pixel mask is known to the pixel. EDCT uses these to
test whether a model's cited concept really drives its answer, with no editing artefacts.

Robots (:class:`RobotEditor`): the editable concepts are the nine body parts that carry an
attribute (:data:`ROBOT_PARTS`); the item's ``meta`` is its attribute row (columns
``synthetic.robot.attributes.META_NAMES``) or a dict ``{"row": ..., "noise": ...}`` as built by
:func:`robot_items`. Pixel noise: the generator adds Gaussian noise after blurring, one random
stream per split; :func:`robot_items` regenerates each item's own noise and the editor adds it
to both the original and the edited render, so the unedited row re-renders byte-identically and
pixels outside the mask stay identical. The mask is computed on the noise-free renders (the
pixels whose rendered value changed).

Sudoku (:class:`SudokuEditor`): the editable concepts are the 81 cells, named
``"row 4 column 7"``, ``"row 4, col 7"``, ``"r4c7"``, ``"cell r4c7"`` or ``"cell_r4c7"`` (1-based);
the item's ``meta`` is a dataset meta row (81 digits, render seed, ...) or a dict
``{"board": [9,9], "render_seed": int}`` as built by :func:`sudoku_items`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

from cbm.vlm.editors.base import EditInstruction, EditItem, EditResult
from synthetic.base import SPLITS, SyntheticData
from synthetic.robot import generator as robot_generator
from synthetic.robot.attributes import FOOT_SUBTYPES, HAND_SUBTYPES, META_INDEX, META_NAMES, N_FOOT, N_HAND
from synthetic.robot.config import RobotConfig
from synthetic.robot.renderer import LAYERS, PART_NAMES, render
from synthetic.sudoku import dataset as sudoku_dataset
from synthetic.sudoku.config import SudokuConfig
from synthetic.sudoku.render import cell_box, render_boards

__all__ = [
    "ROBOT_PARTS",
    "RobotEditor",
    "SudokuEditor",
    "parse_cell",
    "resolve_robot_part",
    "robot_items",
    "sudoku_items",
]

# --------------------------------------------------------------------------- robot vocabulary
#: Editable robot part -> its ``meta`` attribute (every renderer layer that has one).
ROBOT_PARTS: dict[str, str] = {layer.part: layer.attr for layer in LAYERS if layer.attr}
#: Parts drawn without an attribute (always the same shape): named in error messages.
FIXED_PARTS: list[str] = [p for p in PART_NAMES if p not in ROBOT_PARTS]

#: Words that name each editable part in a concept (after lower-casing, ``_``/``-`` -> space).
_PART_WORDS: dict[str, set[str]] = {
    "head": {"head"},
    "body": {"body", "torso"},
    "knees": {"knee", "knees"},
    "elbows": {"elbow", "elbows"},
    "antennae": {"antenna", "antennae", "antennas"},
    "ears": {"ear", "ears"},
    "mouth": {"mouth"},
    "hands": {"hand", "hands"},
    "feet": {"foot", "feet"},
}
#: Human-readable value names of each attribute (index = attribute value).
VALUE_NAMES: dict[str, list[str]] = {
    "head_round": ["square", "round"],
    "body_round": ["square", "round"],
    "knees": ["absent", "present"],
    "elbows": ["absent", "present"],
    "antennae": ["absent", "present"],
    "ears_triangle": ["square", "triangular"],
    "mouth_closed": ["open", "closed"],
    "hand_subtype": list(HAND_SUBTYPES),
    "foot_subtype": list(FOOT_SUBTYPES),
}
#: Extra target words of binary attributes -> value.
_BINARY_SYNONYMS: dict[str, int] = {
    "0": 0, "1": 1, "false": 0, "true": 1, "no": 0, "yes": 1, "none": 0, "without": 0, "with": 1,
    "triangle": 1, "circular": 1, "rectangular": 0, "box": 0, "shut": 1,
}  # fmt: skip
#: Sub-type groups: attribute -> (group names, group size); group ``g`` is values ``g*size .. g*size+size-1``.
_GROUPS: dict[str, tuple[tuple[str, str], int]] = {
    "hand_subtype": (("round", "edgy"), N_HAND // 2),
    "foot_subtype": (("flat", "pointy"), N_FOOT // 2),
}
#: Rows of pixel noise drawn at a time when regenerating a split's noise stream.
NOISE_CHUNK_ROWS = 256


def _words(text: str) -> list[str]:
    return re.sub(r"[_\-]+", " ", text.lower()).split()


def resolve_robot_part(concept: str) -> str:
    """The editable part a concept names (``"feet"``, ``"foot_pointy"``, ``"Head shape"`` -> ``"head"``).

    Raises ``ValueError`` naming the editable parts when no part or more than one is named.
    """
    words = set(_words(concept))
    found = sorted(part for part, names in _PART_WORDS.items() if words & names)
    if len(found) == 1:
        return found[0]
    valid = ", ".join(ROBOT_PARTS)
    if found:
        raise ValueError(f"robot concept {concept!r} names several parts {found}; edit one of: {valid}")
    raise ValueError(
        f"unknown robot concept {concept!r}; editable parts: {valid} "
        f"(also their attribute names, e.g. 'foot_subtype', 'mouth_closed'); "
        f"drawn without an attribute, not editable: {', '.join(FIXED_PARTS)}"
    )


def _value_name(attr: str, value: int) -> str:
    return VALUE_NAMES[attr][int(value)]


def _target_value(attr: str, current: int, target: str | None, concept: str) -> int:
    """The new value of ``attr``: the parsed ``target``, else a deterministic default.

    Defaults: binary attributes flip; sub-types flip their group (flat <-> pointy feet, round <->
    edgy hands: same position in the other group) when the concept names a group word, else move
    to the next sub-type (cyclically).
    """
    names = VALUE_NAMES[attr]
    n = len(names)
    group = _GROUPS.get(attr)
    if target is None:
        if n == 2:
            return 1 - current
        if group and set(_words(concept)) & set(group[0]):
            return (current + group[1]) % n
        return (current + 1) % n
    key = " ".join(_words(str(target)))
    if key in names:
        value = names.index(key)
    elif key.isdigit() and int(key) < n:
        value = int(key)
    elif n == 2 and key in _BINARY_SYNONYMS:
        value = _BINARY_SYNONYMS[key]
    elif group and key in group[0]:
        g, size = group[0].index(key), group[1]
        if current // size == g:
            raise ValueError(f"{attr} is already {key} ({names[current]}); an edit must change it")
        value = g * size + current % size
    else:
        accepted = names + ([f"0..{n - 1}"] if n > 2 else ["0", "1"]) + (list(group[0]) if group else [])
        raise ValueError(f"target {target!r} is not a value of {attr}; accepted: {accepted}")
    if value == current:
        raise ValueError(f"target {target!r} equals the current value of {attr} ({names[current]}); nothing to edit")
    return value


# --------------------------------------------------------------------------- robot editor
def _robot_config(cfg: RobotConfig | Mapping[str, Any] | None) -> RobotConfig:
    cfg = RobotConfig() if cfg is None else cfg if isinstance(cfg, RobotConfig) else RobotConfig.from_dict(cfg)
    if cfg.modality != "image":
        raise ValueError(f"robot editing needs modality 'image', got {cfg.modality!r}")
    return cfg


def _with_noise(clean: np.ndarray, noise: np.ndarray | None) -> np.ndarray:
    """The generator's noise step: ``clip(rint(x + noise))`` as ``uint8`` (``noise=None``: ``x``)."""
    if noise is None:
        return clean
    return np.clip(np.rint(clean + noise), 0, 255).astype(np.uint8)


class RobotEditor:
    """Exact robot editor: change one part attribute, re-render with the dataset's settings.

    Parameters
    ----------
    cfg : the dataset's :class:`~synthetic.robot.config.RobotConfig` (or a mapping of its fields);
        its rendering settings (image size, blur, occlusion, visibility, pixel noise) are used.
    strict : check that the unedited re-render equals ``item.image`` byte for byte (a wrong
        config or a resized image would otherwise give a wrong mask).

    Notes
    -----
    An occluded or invisible part edits to an empty mask (the render does not change); the
    result records ``changed["visible"] = False``.
    """

    #: Its masks are the true changed pixels (EDCT records the verifier's verdict instead of gating on it).
    exact = True

    def __init__(self, cfg: RobotConfig | Mapping[str, Any] | None = None, *, strict: bool = True):
        self.cfg = _robot_config(cfg)
        self.strict = strict

    def render_clean(self, rows: np.ndarray) -> np.ndarray:
        """Noise-free renders ``uint8 [N, H, W, 3]`` of attribute rows with the dataset's settings."""
        c = self.cfg
        return render(rows, c.image_size, blur=c.blur, occlude=c.occlude, visibility=c.visibility)

    def render_item(self, meta: dict[str, Any] | np.ndarray) -> np.ndarray:
        """The dataset's image ``uint8 [H, W, 3]`` of one item's ``meta`` (noise included)."""
        row, noise = self._unpack(meta)
        return _with_noise(self.render_clean(row[None])[0], noise)

    def _unpack(self, meta: dict[str, Any] | np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
        if isinstance(meta, Mapping):
            if "row" not in meta:
                raise ValueError("robot item meta dict needs a 'row' (attribute row, columns META_NAMES)")
            row, noise = meta["row"], meta.get("noise")
        elif meta is None:
            raise ValueError("a robot item needs meta: its attribute row (columns META_NAMES) or robot_items()")
        else:
            row, noise = meta, None
        row = np.asarray(row, dtype=np.int64)
        if row.shape != (len(META_NAMES),):
            raise ValueError(f"robot meta row must have {len(META_NAMES)} values (columns {META_NAMES}), got {row.shape}")
        if noise is None and self.cfg.pixel_noise > 0 and self.strict:
            raise ValueError("the config adds pixel noise but the item carries none: build items with robot_items()")
        return row, None if noise is None else np.asarray(noise, dtype=np.float64)

    def edit(self, item: EditItem, instruction: EditInstruction) -> EditResult:
        """Change the attribute of the part ``instruction.concept`` names (to ``instruction.target``
        if given) and re-render; ``mask`` = pixels whose noise-free render changed."""
        if item.kind != "robot":
            raise ValueError(f"RobotEditor edits robot items, got kind {item.kind!r}")
        row, noise = self._unpack(item.meta)
        part = resolve_robot_part(instruction.concept)
        attr = ROBOT_PARTS[part]
        col = META_INDEX[attr]
        old = int(row[col])
        new = _target_value(attr, old, instruction.target, instruction.concept)
        rows = np.stack([row, row])
        rows[1, col] = new
        clean = self.render_clean(rows)
        before, after = _with_noise(clean, noise)
        if self.strict and not np.array_equal(before, item.array):
            raise ValueError(
                "the item's image is not the re-render of its meta under this editor's config "
                "(pass the dataset's RobotConfig, or strict=False)"
            )
        mask = (clean[0] != clean[1]).any(axis=-1)
        changed = {
            "part": part, "attribute": attr, "from": _value_name(attr, old), "to": _value_name(attr, new),
            "from_value": old, "to_value": new, "visible": bool(mask.any()),
        }  # fmt: skip
        description = f"robot {part}: {attr} {changed['from']} -> {changed['to']} (exact re-render)"
        new_meta = dict(item.meta) if isinstance(item.meta, Mapping) else {}
        new_meta.update(row=rows[1].copy(), noise=noise)
        return EditResult(Image.fromarray(after), mask, description, changed, meta=new_meta)


def _split_rows(data: SyntheticData, split: str, indices: Sequence[int] | np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """``(positions in the split, dataset rows)`` of the requested items."""
    rows = data.indices(split)
    pos = np.arange(len(rows)) if indices is None else np.asarray(indices, dtype=np.int64).reshape(-1)
    if len(pos) and (pos.min() < 0 or pos.max() >= len(rows)):
        raise IndexError(f"indices must be positions in split '{split}' (0..{len(rows) - 1}), got {pos.tolist()}")
    return pos, rows[pos]


def robot_split_noise(cfg: RobotConfig, split: str, positions: np.ndarray) -> np.ndarray:
    """The generator's pixel noise ``float64 [n, H, W, 3]`` of rows ``positions`` of ``split``.

    The generator draws one normal array per split (rows in order) from its own stream; drawing
    it again in chunks of :data:`NOISE_CHUNK_ROWS` rows gives the same values (the stream is
    consumed value by value), so memory stays bounded whatever the split size.
    """
    positions = np.asarray(positions, dtype=np.int64)
    shape = (cfg.image_size, cfg.image_size, 3)
    out = np.zeros((len(positions), *shape))
    rng = robot_generator._rng(cfg, "pixels", SPLITS[split])  # the generator's own stream
    stop = int(positions.max()) + 1 if len(positions) else 0
    for start in range(0, stop, NOISE_CHUNK_ROWS):
        block = rng.normal(0.0, cfg.pixel_noise, (min(NOISE_CHUNK_ROWS, stop - start), *shape))
        sel = np.flatnonzero((positions >= start) & (positions < start + len(block)))
        out[sel] = block[positions[sel] - start]
    return out


def robot_items(
    cfg: RobotConfig | Mapping[str, Any],
    split: str = "test",
    indices: Sequence[int] | np.ndarray | None = None,
    *,
    cache_dir: str | None = None,
    data: SyntheticData | None = None,
) -> list[EditItem]:
    """Edit items of a robot dataset's ``split`` (``indices``: positions in the split; default all).

    ``data`` (the generated dataset of ``cfg``) skips loading. Each item's ``meta`` is a dict:
    ``row`` (attribute row), ``noise`` (its pixel noise or ``None``), ``split``, ``position``,
    ``index`` (row of the dataset), ``y`` and ``c_true`` (name -> value) for ground truth.
    """
    cfg = _robot_config(cfg)
    data = robot_generator.load(cfg, cache_dir) if data is None else data
    pos, rows = _split_rows(data, split, indices)
    noise = robot_split_noise(cfg, split, pos) if cfg.pixel_noise > 0 else None
    items = []
    for i, (p, r) in enumerate(zip(pos, rows)):
        meta = {
            "row": data.meta[r].astype(np.int64), "noise": None if noise is None else noise[i], "split": split,
            "position": int(p), "index": int(r), "y": int(data.y[r]),
            "c_true": dict(zip(data.true_concept_names, data.c_true[r].tolist())),
        }  # fmt: skip
        items.append(EditItem(Image.fromarray(data.x[r]), meta, "robot"))
    return items


# --------------------------------------------------------------------------- sudoku editor
_N = 9
#: Digit written for an empty cell (the renderer draws nothing).
EMPTY = 0
_CELL = re.compile(r"^(?:cell\s*)?r(?:ow)?\s*(\d+)\s*,?\s*c(?:ol(?:umn)?)?\s*(\d+)$")
_EMPTY_WORDS = {"empty", "blank", "none"}


def parse_cell(concept: str) -> tuple[int, int]:
    """1-based ``(row, column)`` of a cell concept (``"row 4 column 7"``, ``"r4c7"``, ``"cell_r4c7"``)."""
    text = " ".join(_words(concept))
    m = _CELL.match(text)
    if not m or not all(1 <= int(g) <= _N for g in m.groups()):
        raise ValueError(
            f"Sudoku concept {concept!r} is not a cell; expected 'row R column C', 'row R, col C', "
            f"'rRcC', 'cell rRcC' or 'cell_rRcC' with R, C in 1..{_N}"
        )
    return int(m.group(1)), int(m.group(2))


@dataclass(frozen=True)
class _Board:
    board: np.ndarray  # int64 [9, 9]
    seed: int
    split: str = "test"  # picks the glyph bank the board was drawn from


def _sudoku_config(cfg: SudokuConfig | Mapping[str, Any] | None) -> SudokuConfig:
    cfg = SudokuConfig() if cfg is None else cfg if isinstance(cfg, SudokuConfig) else SudokuConfig.from_dict(dict(cfg))
    if cfg.modality != "image":
        raise ValueError(f"Sudoku editing needs modality 'image', got {cfg.modality!r}")
    return cfg


class SudokuEditor:
    """Exact Sudoku editor: write another digit into one cell and re-render the board.

    ``instruction.target`` is the new digit (``"1"``..``"9"``, or ``"empty"``/``"0"``); without it
    the digit moves to the next one (9 -> 1, empty -> 1). ``mask`` = pixels whose render changed
    without pixel noise (inside the cell's box unless the config blurs); ``strict`` as in
    :class:`RobotEditor`.
    """

    exact = True

    def __init__(self, cfg: SudokuConfig | Mapping[str, Any] | None = None, *, strict: bool = True):
        self.cfg = _sudoku_config(cfg)
        self.strict = strict

    def render(self, boards: np.ndarray, seeds: np.ndarray, *, noise: bool = True, split: str = "test") -> np.ndarray:
        """Boards ``[N, 9, 9]`` of one ``split`` (its glyph bank) rendered with the dataset's settings
        ``uint8 [N, S, S, 3]``."""
        c = self.cfg
        return render_boards(
            boards, cell_size=c.cell_size, style=c.style, seeds=seeds, pencil_prob=c.pencil_prob,
            pencil_max=c.pencil_max, blur=c.blur, noise=c.noise if noise else 0.0, glyph_seed=c.seed,
            glyph_part=sudoku_dataset.glyph_part(c, split), glyph_variants=c.glyph_variants,
        )  # fmt: skip

    @staticmethod
    def _unpack(meta: dict[str, Any] | np.ndarray | None) -> _Board:
        if isinstance(meta, Mapping):
            if "board" not in meta or "render_seed" not in meta:
                raise ValueError("Sudoku item meta dict needs 'board' [9,9] and 'render_seed'")
            board, seed, split = meta["board"], meta["render_seed"], str(meta.get("split", "test"))
        elif meta is not None and np.asarray(meta).ndim == 1 and len(meta) > _N * _N:
            board, seed, split = np.asarray(meta)[: _N * _N], np.asarray(meta)[_N * _N], "test"  # a bare meta row: a test board
        else:
            raise ValueError("a Sudoku item needs meta: a dataset meta row (81 digits, render_seed, ...) or sudoku_items()")
        board = np.asarray(board, dtype=np.int64).reshape(_N, _N)
        if split not in SPLITS:
            raise ValueError(f"Sudoku item meta: unknown split {split!r}, expected one of {sorted(SPLITS)}")
        return _Board(board, int(seed), split)

    def edit(self, item: EditItem, instruction: EditInstruction) -> EditResult:
        """Write ``instruction.target`` (or the next digit) into the cell ``instruction.concept`` names."""
        if item.kind != "sudoku":
            raise ValueError(f"SudokuEditor edits Sudoku items, got kind {item.kind!r}")
        b = self._unpack(item.meta)
        r, c = parse_cell(instruction.concept)
        old = int(b.board[r - 1, c - 1])
        new = self._target(old, instruction.target)
        boards = np.stack([b.board, b.board])
        boards[1, r - 1, c - 1] = new
        seeds = np.full(2, b.seed, dtype=np.int64)
        final = self.render(boards, seeds, split=b.split)
        if self.strict and not np.array_equal(final[0], item.array):
            raise ValueError(
                "the item's image is not the re-render of its board under this editor's config "
                "(pass the dataset's SudokuConfig, or strict=False)"
            )
        clean = final if self.cfg.noise <= 0 else self.render(boards, seeds, noise=False, split=b.split)
        mask = (clean[0] != clean[1]).any(axis=-1)
        box = (r - 1) // 3 * 3 + (c - 1) // 3 + 1
        changed = {
            "attribute": f"cell_r{r}c{c}", "row": r, "col": c, "from": old, "to": new,
            "checks": [f"row{r}", f"col{c}", f"box{box}"], "cell_box": cell_box(r - 1, c - 1, self.cfg.cell_size),
        }  # fmt: skip
        description = f"Sudoku cell r{r}c{c}: {old or 'empty'} -> {new or 'empty'} (exact re-render)"
        new_meta = dict(item.meta) if isinstance(item.meta, Mapping) else {}
        new_meta.update(board=boards[1].copy(), render_seed=b.seed)
        return EditResult(Image.fromarray(final[1]), mask, description, changed, meta=new_meta)

    @staticmethod
    def _target(old: int, target: str | None) -> int:
        if target is None:
            return old % _N + 1
        key = str(target).strip().lower()
        new = EMPTY if key in _EMPTY_WORDS else int(key) if key.isdigit() else -1
        if not EMPTY <= new <= _N:
            raise ValueError(f"Sudoku target {target!r} must be a digit 1..{_N} or 'empty'")
        if new == old:
            raise ValueError(f"target {target!r} equals the cell's current digit; nothing to edit")
        return new


def sudoku_items(
    cfg: SudokuConfig | Mapping[str, Any],
    split: str = "test",
    indices: Sequence[int] | np.ndarray | None = None,
    *,
    cache_dir: str | None = None,
    data: SyntheticData | None = None,
) -> list[EditItem]:
    """Edit items of a Sudoku dataset's ``split`` (``indices``: positions in the split; default all).

    Each item's ``meta`` is a dict: ``board`` (``int64 [9,9]``), ``render_seed``, ``split``,
    ``position``, ``index``, ``y`` and ``c_true`` (check name -> value).
    """
    cfg = _sudoku_config(cfg)
    if cfg.block_size != 3:
        raise ValueError(f"the Sudoku editor edits 9x9 boards; data.block_size={cfg.block_size} (4x4 boards) is not supported here")
    data = sudoku_dataset.load(cfg, cache_dir) if data is None else data
    pos, rows = _split_rows(data, split, indices)
    items = []
    for p, r in zip(pos, rows):
        meta = {
            "board": data.meta[r, : _N * _N].reshape(_N, _N).astype(np.int64), "render_seed": int(data.meta[r, _N * _N]),
            "split": split, "position": int(p), "index": int(r), "y": int(data.y[r]),
            "c_true": dict(zip(data.true_concept_names, data.c_true[r].tolist())),
        }  # fmt: skip
        items.append(EditItem(Image.fromarray(data.x[r]), meta, "sudoku"))
    return items
