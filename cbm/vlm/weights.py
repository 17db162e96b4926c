"""A fingerprint of a local model directory's contents, for the reply cache key.

The cache must not serve a model's replies for other weights in the same directory (a fine-tuned
model re-saved over the old one has the same names, sizes and safetensors headers), so the
fingerprint hashes the *contents* of the directory's top-level files (weights, configs, tokenizer,
chat template). Hashing gigabytes on every start would be slow, so each file's digest is
remembered by its identity on disk (size, mtime, ctime, inode): ctime changes on any write or
replacement and cannot be set back by a user, so a rewritten file is always hashed again. The
memo is a JSON file in the reply cache, sealed with its digest (:mod:`cbm.vlm.sealed`; a corrupt
or edited one is ignored).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from cbm.core.atomic import write_json_atomic
from cbm.vlm.sealed import canonical, read_json, seal, unseal

#: Bump when what the fingerprint covers changes.
FINGERPRINT_VERSION = 1
CHUNK_BYTES = 1 << 22


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            h.update(chunk)
    return h.hexdigest()


def _load_memo(path: Path | None) -> dict[str, list]:
    """The memo's ``{file name: [size, mtime, ctime, inode, device, digest]}``; ``{}`` when there is
    none or it is unreadable, edited (its digest) or of another shape."""
    if path is None or not path.exists():
        return {}
    try:
        body = unseal(read_json(path))
    except ValueError:
        return {}
    files = body.get("files") if body is not None else None
    return files if isinstance(files, dict) else {}


def model_files(directory: Path) -> list[Path]:
    """The files a model is loaded from: the directory's top-level regular files (symlinks
    followed, as in a Hugging Face cache snapshot), hidden ones excepted, by name."""
    return sorted(p for p in directory.iterdir() if not p.name.startswith(".") and p.is_file())


def fingerprint(directory: str | Path, memo_dir: str | Path | None = None) -> str:
    """SHA-256 over (name, size, content SHA-256) of :func:`model_files`; ``memo_dir`` (the reply
    cache) remembers file digests across runs so unchanged weights are not re-read."""
    root = Path(directory).expanduser().resolve()
    memo_path = None
    if memo_dir is not None:
        memo_path = Path(memo_dir).expanduser() / "fingerprints" / f"{hashlib.sha256(str(root).encode()).hexdigest()[:32]}.json"
    memo = _load_memo(memo_path)
    files: dict[str, list] = {}
    for p in model_files(root):
        st = os.stat(p)
        ident = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]
        known = memo.get(p.name)
        digest = known[-1] if isinstance(known, list) and known[:-1] == ident and isinstance(known[-1], str) else _file_digest(p)
        files[p.name] = [*ident, digest]
    if memo_path is not None and files != memo:
        try:
            write_json_atomic(memo_path, seal({"files": files}))
        except OSError:
            pass  # a memo that cannot be written costs a re-hash next time, nothing else
    summary = [[name, v[0], v[-1]] for name, v in sorted(files.items())]
    return hashlib.sha256(canonical({"v": FINGERPRINT_VERSION, "files": summary}).encode()).hexdigest()
