"""The editor contract of EDCT (explanation-driven counterfactual testing).

EDCT asks a model for an answer and an explanation, turns each cited visual concept into an
edit instruction (the *edit chain*: what to keep, what to change, how, under which
constraints), applies it with an :class:`Editor` and re-queries the model on the edited image.
Editors differ in how much they know about their edit: the synthetic ones re-render from the
generator's attributes and report the exact changed-pixel mask; hosted and diffusion editors
report none (``mask=None``), so the locality check must estimate it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
from PIL import Image

#: What an :class:`EditItem` holds: a synthetic robot, a synthetic Sudoku board, or any image.
ItemKind = Literal["robot", "sudoku", "image"]
ITEM_KINDS: tuple[str, ...] = ("robot", "sudoku", "image")


class EditError(RuntimeError):
    """An editor could not produce an edit (e.g. the hosted service answered with an error)."""


@dataclass(frozen=True)
class EditInstruction:
    """One step of the EDCT edit chain.

    Attributes
    ----------
    concept : the visual concept the explanation cited (``"feet"``, ``"row 4 column 7"``).
    keep : what must stay as it is.
    change : what to change.
    how : how to change it.
    constraints : further constraints (style, lighting, no other object changes...).
    target : the desired new value, for editors that understand structured targets
        (``"pointy"``, ``"closed"``, ``"7"``); ``None`` lets the editor choose.
    """

    concept: str
    keep: str = ""
    change: str = ""
    how: str = ""
    constraints: str = ""
    target: str | None = None


@dataclass
class EditItem:
    """The thing being edited: an RGB image plus, for synthetic items, what generated it.

    ``meta`` is a numpy attribute row or a dict (see the synthetic editors for the keys they
    read); ``kind`` tells editors which generator it came from.
    """

    image: Image.Image
    meta: dict[str, Any] | np.ndarray | None = None
    kind: ItemKind = "image"

    def __post_init__(self) -> None:
        if self.kind not in ITEM_KINDS:
            raise ValueError(f"EditItem.kind must be one of {list(ITEM_KINDS)}, got {self.kind!r}")
        if not isinstance(self.image, Image.Image):
            raise TypeError(f"EditItem.image must be a PIL image, got {type(self.image).__name__}")

    @property
    def array(self) -> np.ndarray:
        """The image as ``uint8 [H, W, 3]``."""
        return np.asarray(self.image.convert("RGB"))


@dataclass
class EditResult:
    """An edited image and what the editor knows about the edit.

    Attributes
    ----------
    image : the edited image (RGB).
    mask : ``bool [H, W]``, the exact changed-pixel region when the editor knows it, else ``None``.
    description : one human-readable sentence about the edit.
    changed : what changed, e.g. ``{"attribute": "foot_subtype", "from": "spike", "to": "diamond"}``.
    meta : the edited item's ``meta`` (synthetic editors), so the counterfactual can be edited
        again or its ground truth recomputed; ``None`` otherwise.
    """

    image: Image.Image
    mask: np.ndarray | None
    description: str
    changed: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] | np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.image.mode != "RGB":
            self.image = self.image.convert("RGB")
        if self.mask is not None:
            mask = np.asarray(self.mask)
            size = (self.image.height, self.image.width)
            if mask.dtype != np.bool_ or mask.shape != size:
                raise ValueError(f"EditResult.mask must be bool {list(size)}, got {mask.dtype} {list(mask.shape)}")
            self.mask = mask


@runtime_checkable
class Editor(Protocol):
    """Anything that applies an :class:`EditInstruction` to an :class:`EditItem`."""

    def edit(self, item: EditItem, instruction: EditInstruction) -> EditResult: ...


def edit_prompt(instruction: EditInstruction) -> str:
    """The instruction as a text prompt for a free-form image editor: one line per non-empty field."""
    lines = [f"Edit the {instruction.concept} in this image." if instruction.concept else "Edit this image."]
    for label, value in (
        ("Keep", instruction.keep),
        ("Change", instruction.change),
        ("How", instruction.how),
        ("Constraints", instruction.constraints),
        ("Target", instruction.target),
    ):
        if value:
            lines.append(f"{label}: {value.strip()}")
    return "\n".join(lines)


#: Edit types of the paper's verification rule: an addition's region is found on the edited image,
#: a change's or a removal's on the original.
EDIT_TYPES = ("addition", "change", "removal")
_ADD = re.compile(r"\b(add|adds|adding|insert|inserting|place|put|draw a new|introduce)\b", re.IGNORECASE)
_REMOVE = re.compile(r"\b(remove|removes|removing|delete|deleting|erase|erasing|take away|get rid of)\b", re.IGNORECASE)


def edit_type(instruction: EditInstruction) -> str:
    """``addition``, ``removal`` or ``change``: what the instruction's ``change`` (else ``how``) says
    it does, by its verb ("add a hat", "remove the ball"); anything else is a change."""
    for text in (instruction.change, instruction.how):
        if _REMOVE.search(text or ""):
            return "removal"
        if _ADD.search(text or ""):
            return "addition"
    return "change"
