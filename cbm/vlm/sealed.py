"""Digests of the JSON files the VLM commands write and read back (ICL episodes, ICL trial records,
EDCT item records), so an edit made between two runs is noticed instead of trusted.

A sealed file is the JSON object plus one more key, :data:`DIGEST_KEY`, the sha256 of the
object's canonical JSON (sorted keys, no spaces, numpy scalars as floats: the form
``synthetic.atomic.write_json_atomic`` writes). The digest is not a signature: it catches
changes, not a forger who recomputes it, so every reader also validates the structure.

>>> sealed = seal({"a": 1})
>>> unseal(sealed) == {"a": 1}, unseal({**sealed, "a": 2})
(True, None)
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

#: The key holding the digest in a sealed file.
DIGEST_KEY = "sha256"
#: A file the commands wrote is never this large; a larger one is refused unread.
MAX_JSON_BYTES = 256 * 2**20


def canonical(obj: Any) -> str:
    """``obj`` as canonical JSON text (what the digest is taken of)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=float, ensure_ascii=True)


def digest(obj: Any) -> str:
    return hashlib.sha256(canonical(obj).encode("ascii")).hexdigest()


def seal(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with its digest added under :data:`DIGEST_KEY`."""
    clean = {k: v for k, v in body.items() if k != DIGEST_KEY}
    return {**clean, DIGEST_KEY: digest(clean)}


def unseal(obj: Any) -> dict[str, Any] | None:
    """The body of a sealed object, or ``None`` when it is not an object, has no digest or its
    digest does not match (the file changed since it was written)."""
    if not isinstance(obj, dict) or not isinstance(obj.get(DIGEST_KEY), str):
        return None
    body = {k: v for k, v in obj.items() if k != DIGEST_KEY}
    return body if digest(body) == obj[DIGEST_KEY] else None


def read_json(path: str | Path) -> Any:
    """The JSON in ``path``; ``ValueError`` with one line saying why it cannot be read (missing,
    not a regular file, unreadable, too large, not UTF-8, not JSON, nested too deep)."""
    p = Path(path)
    try:
        if p.exists() and not p.is_file():  # a directory, a device (/dev/zero never ends), a pipe
            raise ValueError(f"{p}: not a regular file")
        if p.stat().st_size > MAX_JSON_BYTES:
            raise ValueError(f"{p}: larger than {MAX_JSON_BYTES >> 20} MiB")
        return json.loads(p.read_text(encoding="utf-8"))
    except OSError as err:
        raise ValueError(f"{p}: cannot read ({err.strerror or type(err).__name__})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{p}: not UTF-8 text") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{p}: not JSON (line {err.lineno}: {err.msg})") from None
    except RecursionError:
        raise ValueError(f"{p}: JSON nested too deeply") from None
