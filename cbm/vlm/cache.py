"""A disk cache of chat replies keyed by (endpoint, model, messages, params): a rerun of a sweep costs no
requests, and an interrupted run resumes where it stopped (every reply is on disk the moment it
arrives). Entries are JSON files written atomically (``synthetic.atomic``), sharded by the first
two hex digits of the key; an unreadable entry is a miss (and is overwritten by the next reply).
The endpoint (a hosted server's normalised URL, a local model's weights fingerprint) is part of
the key: one server's or one set of weights' replies are never served for another."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from synthetic.atomic import write_json_atomic

log = logging.getLogger("cbm.vlm")

#: Bump when the meaning of a cached entry changes: old entries then stop matching.
CACHE_VERSION = 2


def cache_key(model: str, messages: list[dict[str, Any]], params: dict[str, Any], endpoint: str = "") -> str:
    """SHA-256 of the canonical JSON of the request (keys sorted, no whitespace): the same request
    gives the same key across processes and machines; any change in endpoint, model, messages
    (images included, as their data URLs) or parameters gives another."""
    blob = json.dumps(
        {"v": CACHE_VERSION, "endpoint": endpoint, "model": model, "messages": messages, "params": params},
        sort_keys=True, separators=(",", ":"), ensure_ascii=False,
    )  # fmt: skip
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ReplyCache:
    """``get(key) -> entry | None`` and ``put(key, entry)`` over ``root/<k[:2]>/<k>.json``; counts hits and misses."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.hits = 0
        self.misses = 0

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        p = self.path(key)
        try:
            entry = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            entry = None
        except (OSError, ValueError) as err:  # a corrupt entry is a miss, not a crash
            log.warning("reply cache: ignoring unreadable entry %s (%s)", p, err)
            entry = None
        if not isinstance(entry, dict) or entry.get("key") != key:
            self.misses += 1
            return None
        self.hits += 1
        return entry

    def put(self, key: str, entry: dict[str, Any]) -> Path:
        return write_json_atomic(self.path(key), {**entry, "key": key})  # creates the shard directory
