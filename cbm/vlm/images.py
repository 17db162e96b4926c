"""Images read from files or servers by the VLM commands, with a pixel limit checked before decoding.

A decompression bomb is a small PNG whose header promises gigapixels; decoding it fills memory.
:func:`load_image` reads the header only, refuses an image over ``max_pixels`` (width x height)
with one line, and only then decodes, turning any decoder failure (truncated, corrupt, not an
image) into a ``ValueError`` naming the source. Every command's ``max_image_pixels`` defaults to
:data:`MAX_IMAGE_PIXELS` and lies in ``[1, PIL_CEILING]`` (:func:`check_pixel_limit`), so PIL's
own bomb check (``PIL.Image.MAX_IMAGE_PIXELS``, never changed here) never refuses an image the
setting allows; an image PIL refuses at the header is still reported with its size.
"""

from __future__ import annotations

import io
import threading
import warnings
from pathlib import Path
from typing import IO

from PIL import Image

#: Default largest image (width x height) the VLM commands read from files or receive from a
#: service (``max_image_pixels`` of ``cbm-icl``, ``cbm-edct``, ``cbm-finetune``, the hosted editor).
MAX_IMAGE_PIXELS = 50_000_000
#: Largest image PIL decodes at all (twice its ``MAX_IMAGE_PIXELS``, its ``DecompressionBombError``).
PIL_CEILING = 2 * int(Image.MAX_IMAGE_PIXELS or 89_478_485)
#: Held while PIL's bomb check is suspended to read the size of an image it refused (headers only).
_PIL_LIMIT_LOCK = threading.Lock()


class ImageError(ValueError):
    """An image that cannot be used: ``str()`` is ``"<what>: <reason>"``, one line."""

    def __init__(self, what: str, reason: str):
        self.what, self.reason = what, reason
        super().__init__(f"{what}: {reason}")


class PixelLimitError(ImageError):
    """An image over the pixel limit (refused from its header, never decoded)."""


def check_pixel_limit(value: object, where: str = "max_image_pixels") -> int:
    """A ``max_image_pixels`` setting: an integer in ``[1, PIL_CEILING]``, else one line."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= PIL_CEILING:
        raise ValueError(f"{where}: must lie in [1, {PIL_CEILING}] (PIL's own limit), got {value!r}")
    return value


def check_pixels(size: tuple[int, int], max_pixels: int, what: str) -> None:
    """:class:`PixelLimitError` when a ``(width, height)`` image has more than ``max_pixels`` pixels."""
    w, h = size
    if w * h > max_pixels:
        raise PixelLimitError(what, f"{w}x{h} image has {w * h:,} pixels, more than max_image_pixels={max_pixels:,} (refused undecoded)")


def _refused_size(source: str | Path | IO[bytes]) -> tuple[int, int] | None:
    """The header size of an image PIL's bomb check refused, read with the check suspended under a
    lock (so that two readers cannot interleave the restore and leave it off); never decodes."""
    with _PIL_LIMIT_LOCK:
        old = Image.MAX_IMAGE_PIXELS
        Image.MAX_IMAGE_PIXELS = None
        try:
            if not isinstance(source, str | Path):
                source.seek(0)
            with Image.open(source) as im:
                return im.size
        except Exception:  # noqa: BLE001 - only the size for the message; the refusal stands anyway
            return None
        finally:
            Image.MAX_IMAGE_PIXELS = old


def _open(source: str | Path | IO[bytes], max_pixels: int, what: str) -> Image.Image:
    """The image opened from its header (not decoded), checked against ``max_pixels``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            im = Image.open(source)  # reads the header only
        except Image.DecompressionBombError:
            size = _refused_size(source)
            if size is not None:
                check_pixels(size, max_pixels, what)
            raise ImageError(what, f"image larger than PIL's limit of {PIL_CEILING:,} pixels (refused undecoded)") from None
        except OSError as err:  # a missing / unreadable file, or PIL's "cannot identify image file"
            raise ImageError(what, f"cannot read the image ({err.strerror or err})") from None
    try:
        check_pixels(im.size, max_pixels, what)
    except PixelLimitError:
        im.close()
        raise
    return im


def check_image_file(path: str | Path, max_pixels: int, what: str) -> tuple[int, int]:
    """Read only the header of the image file ``path``: its ``(width, height)``, or
    :class:`ImageError` (one line) when it is not a readable image or is over ``max_pixels``."""
    with _open(path, max_pixels, what) as im:
        return im.size


def load_image(source: str | Path | bytes | IO[bytes], max_pixels: int, what: str) -> Image.Image:
    """The RGB image in a file, bytes or a binary stream; one-line :class:`ImageError` for one too
    large (checked from the header, before decoding), unreadable, truncated or not an image."""
    src = io.BytesIO(source) if isinstance(source, bytes) else source
    with _open(src, max_pixels, what) as im, warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            return im.convert("RGB")  # decodes
        except Exception as err:  # noqa: BLE001 - a decoder on untrusted bytes may raise anything (OSError, SyntaxError, struct.error)
            raise ImageError(what, f"cannot decode the image ({type(err).__name__}: {err})") from None
