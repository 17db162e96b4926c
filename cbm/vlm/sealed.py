"""Digests of the JSON files the VLM commands write and read back (ICL episodes, ICL trial records,
EDCT item records), so an edit made between two runs is noticed instead of trusted.

A sealed file is the JSON object plus one more key, :data:`DIGEST_KEY`, the sha256 of the
object's canonical JSON (sorted keys, no spaces, numpy scalars as floats: the form
``cbm.core.atomic.write_json_atomic`` writes). The digest is not a signature: it catches
changes, not a forger who recomputes it, so every reader also validates the structure.

A record also says what produced it (:func:`client_identity`: the endpoint, model and sampling
parameters of a chat client; :func:`digest` of the prompts), so a rerun with other settings does
not take an old reply for the new model's answer.

>>> sealed = seal({"a": 1})
>>> unseal(sealed) == {"a": 1}, unseal({**sealed, "a": 2})
(True, None)
>>> open_sealed({"a": 1})
(None, 'written by an older version (no digest)')
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


#: Why :func:`open_sealed` returns no body: a JSON object without a digest (written before digests
#: existed), and one whose digest does not match (edited since it was written) or not an object.
OLDER = "written by an older version (no digest)"
CHANGED = "changed since it was written"


def open_sealed(obj: Any) -> tuple[dict[str, Any] | None, str]:
    """``(body, "")``, or ``(None, why)`` with ``why`` :data:`OLDER` (an object without a digest)
    or :data:`CHANGED` (the digest does not match, or not an object)."""
    if isinstance(obj, dict) and DIGEST_KEY not in obj:
        return None, OLDER
    body = unseal(obj)
    return (body, "") if body is not None else (None, CHANGED)


def client_identity(client: Any) -> dict[str, Any]:
    """Who answers a :class:`~cbm.vlm.client.ChatClient`'s requests, as a record keeps it: its
    endpoint (the normalised URL or local weights fingerprint of the reply cache's key), model,
    sampling parameters and system prompt. Two clients with the same identity send the same
    request for the same messages."""
    cfg = client.cfg
    return {"backend": cfg.backend, "endpoint": client.endpoint, "model": cfg.model, "params": cfg.params(), "system": cfg.system}


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
