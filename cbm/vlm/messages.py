"""Chat messages in the OpenAI content-part format, images as base64 PNG data URLs (lossless, so
a cached request's key depends on the exact pixels)."""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np
from PIL import Image

DATA_URL_PREFIX = "data:image/png;base64,"


def to_pil(image: Any) -> Image.Image:
    """A PIL image from a PIL image, an ``[H,W]`` / ``[H,W,C]`` uint8 array, or a ``[C,H,W]`` float
    tensor / array in [0, 1] (the datasets' layout); anything else is one clear error."""
    if isinstance(image, Image.Image):
        return image
    arr = image.detach().cpu().numpy() if hasattr(image, "detach") else np.asarray(image)
    if arr.ndim == 3 and arr.shape[0] in (1, 3) and arr.shape[-1] not in (1, 3):  # [C,H,W] -> [H,W,C]
        arr = np.moveaxis(arr, 0, -1)
    if arr.dtype != np.uint8:
        if not np.issubdtype(arr.dtype, np.floating):
            raise ValueError(f"image: expected uint8 or float pixels, got {arr.dtype}")
        if arr.size and (np.nanmin(arr) < 0.0 or np.nanmax(arr) > 1.0):
            raise ValueError("image: float pixels must lie in [0, 1]")
        arr = np.rint(arr * 255.0).astype(np.uint8)
    if arr.ndim == 3 and arr.shape[-1] == 1:
        arr = arr[..., 0]
    if arr.ndim not in (2, 3) or (arr.ndim == 3 and arr.shape[-1] != 3):
        raise ValueError(f"image: expected [H,W], [H,W,3] or [3,H,W], got shape {tuple(arr.shape)}")
    return Image.fromarray(arr)


def image_part(image: Any) -> dict[str, Any]:
    """An ``image_url`` content part holding ``image`` as a PNG data URL."""
    buf = io.BytesIO()
    to_pil(image).save(buf, format="PNG")
    url = DATA_URL_PREFIX + base64.b64encode(buf.getvalue()).decode("ascii")
    return {"type": "image_url", "image_url": {"url": url}}


def decode_image_part(part: dict[str, Any]) -> Image.Image:
    """The image of an ``image_url`` part written by :func:`image_part` (for local backends and tests)."""
    url = part["image_url"]["url"]
    if not url.startswith(DATA_URL_PREFIX):
        raise ValueError("image part: only PNG data URLs can be decoded locally")
    return Image.open(io.BytesIO(base64.b64decode(url[len(DATA_URL_PREFIX) :]))).copy()


def user_message(text: str, images: list[Any] | tuple[Any, ...] = ()) -> dict[str, Any]:
    """One user turn: the images first, then the text (the order most VLM chat templates expect)."""
    return {"role": "user", "content": [*(image_part(im) for im in images), {"type": "text", "text": text}]}


#: Most characters of the problem a re-ask names (a reply's parse errors can be long).
REASK_PROBLEM_CHARS = 300


def reask_turns(msgs: list[dict[str, Any]], reply: str, template: str, problem: str) -> list[dict[str, Any]]:
    """The one re-ask of the VLM wing (EDCT and ICL): ``msgs`` continued by the unreadable ``reply``
    and a user turn, ``template`` formatted with ``problem`` (cut to :data:`REASK_PROBLEM_CHARS`;
    empty: "no usable value"), in the same conversation."""
    problem = problem[:REASK_PROBLEM_CHARS] or "no usable value"
    return [*msgs, {"role": "assistant", "content": reply}, user_message(template.format(problem=problem))]

