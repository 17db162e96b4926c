"""Images read from files or servers by the VLM commands, with a pixel limit checked before decoding.

A decompression bomb is a small PNG whose header promises gigapixels; decoding it fills memory.
:func:`load_image` reads the header only, refuses an image over ``max_pixels`` (width x height)
with one line, and only then decodes, turning any decoder failure (truncated, corrupt, not an
image) into a ``ValueError`` naming the source. PIL refuses above :data:`PIL_CEILING` by itself.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import IO

from PIL import Image

#: Largest image PIL decodes at all (twice its ``MAX_IMAGE_PIXELS``, its ``DecompressionBombError``).
PIL_CEILING = 2 * int(Image.MAX_IMAGE_PIXELS or 89_478_485)


def check_pixels(size: tuple[int, int], max_pixels: int, what: str) -> None:
    """``ValueError`` when a ``(width, height)`` image has more than ``max_pixels`` pixels."""
    w, h = size
    if w * h > max_pixels:
        raise ValueError(f"{what}: {w}x{h} image has {w * h:,} pixels, more than max_image_pixels={max_pixels:,} (refused undecoded)")


def check_image_file(path: str | Path, max_pixels: int, what: str) -> None:
    """Read only the header of the image file ``path``: ``ValueError`` (one line) when it is not a
    readable image or is over ``max_pixels``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            with Image.open(path) as im:
                size = im.size
        except Image.DecompressionBombError:
            raise ValueError(f"{what}: image larger than PIL's limit of {PIL_CEILING:,} pixels (refused undecoded)") from None
        except OSError as err:
            raise ValueError(f"{what}: not a readable image ({err.strerror or err})") from None
    check_pixels(size, max_pixels, what)


def load_image(source: str | Path | bytes | IO[bytes], max_pixels: int, what: str) -> Image.Image:
    """The RGB image in a file, bytes or a binary stream; one-line ``ValueError`` for one too large
    (checked from the header, before decoding), unreadable, truncated or not an image."""
    src = io.BytesIO(source) if isinstance(source, bytes) else source
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            im = Image.open(src)  # reads the header only
        except Image.DecompressionBombError:
            raise ValueError(f"{what}: image larger than PIL's limit of {PIL_CEILING:,} pixels (refused undecoded)") from None
        except OSError as err:  # a missing / unreadable file, or PIL's "cannot identify image file"
            raise ValueError(f"{what}: cannot read the image ({err.strerror or err})") from None
        with im:
            check_pixels(im.size, max_pixels, what)
            try:
                return im.convert("RGB")  # decodes
            except Exception as err:  # noqa: BLE001 - a decoder on untrusted bytes may raise anything (OSError, SyntaxError, struct.error)
                raise ValueError(f"{what}: cannot decode the image ({type(err).__name__}: {err})") from None
