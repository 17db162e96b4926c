"""Image editors for EDCT counterfactuals: exact synthetic re-renders, hosted and local models.

``make_editor(kind, **kwargs)`` builds one by name (:data:`EDITOR_KINDS`); every editor has
``edit(item, instruction) -> EditResult``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from cbm.core.validation import check_kwargs
from cbm.vlm.editors.base import (
    ITEM_KINDS,
    EditError,
    EditInstruction,
    EditItem,
    Editor,
    EditResult,
    edit_prompt,
)
from cbm.vlm.editors.diffusers_editor import DiffusersEditor, DiffusersInpaintEditor, MissingDependencyError
from cbm.vlm.editors.hosted import HostedImageEditor
from cbm.vlm.editors.synthetic import (
    ROBOT_PARTS,
    RobotEditor,
    SudokuEditor,
    parse_cell,
    resolve_robot_part,
    robot_items,
    sudoku_items,
)

#: ``make_editor`` kinds and the classes they build.
EDITOR_KINDS: dict[str, Callable[..., Editor]] = {
    "synthetic_robot": RobotEditor,
    "synthetic_sudoku": SudokuEditor,
    "hosted": HostedImageEditor,
    "diffusers": DiffusersEditor,
    "diffusers_inpaint": DiffusersInpaintEditor,
}


def check_editor(kind: str, settings: Mapping[str, Any], where: str = "editor") -> None:
    """A config's editor settings (all but ``kind``), checked before anything is built: the
    synthetic editors take only ``strict``; hosted and diffusers check theirs (names, types,
    endpoint and key, model directory)."""
    if kind.startswith("synthetic"):
        check_kwargs(RobotEditor, settings, where, skip=("cfg",))
    elif kind == "hosted":
        HostedImageEditor.check_settings(settings, where)
    elif kind in ("diffusers", "diffusers_inpaint"):
        (DiffusersEditor if kind == "diffusers" else DiffusersInpaintEditor).check_settings(settings, where)


def make_editor(kind: str, **kwargs: Any) -> Editor:
    """The editor of ``kind`` (a key of :data:`EDITOR_KINDS`) built with ``kwargs``."""
    if kind not in EDITOR_KINDS:
        raise ValueError(f"unknown editor kind {kind!r}; expected one of {sorted(EDITOR_KINDS)}")
    return EDITOR_KINDS[kind](**kwargs)


__all__ = [
    "EDITOR_KINDS",
    "ITEM_KINDS",
    "ROBOT_PARTS",
    "DiffusersEditor",
    "DiffusersInpaintEditor",
    "EditError",
    "EditInstruction",
    "EditItem",
    "EditResult",
    "Editor",
    "check_editor",
    "HostedImageEditor",
    "MissingDependencyError",
    "RobotEditor",
    "SudokuEditor",
    "edit_prompt",
    "make_editor",
    "parse_cell",
    "resolve_robot_part",
    "robot_items",
    "sudoku_items",
]
