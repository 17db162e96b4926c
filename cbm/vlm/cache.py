"""A disk cache of chat replies keyed by (endpoint, model, messages, params): a rerun of a sweep costs no
requests, and an interrupted run resumes where it stopped (every reply is on disk the moment it
arrives). Entries are JSON files written atomically (``cbm.core.atomic``), sharded by the first
two hex digits of the key, each sealed with its digest (:mod:`cbm.vlm.sealed`): an entry that is
unreadable, edited since it was written, or not of the shape its reader needs (a reply, a list of
finite scores) is a miss, logged once as a warning, and is overwritten by the next reply.
The endpoint (a hosted server's normalised URL, a local model's weights fingerprint) is part of
the key: one server's or one set of weights' replies are never served for another."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cbm.core.atomic import write_json_atomic
from cbm.core.validation import conforms
from cbm.vlm.reply import Reply
from cbm.vlm.sealed import read_json, seal, unseal

log = logging.getLogger("cbm.vlm")

#: Bump when the meaning of a cached entry changes: old entries then stop matching. 3: entries are
#: sealed (the unsealed entries of version 2 are never looked up, so never warned about).
CACHE_VERSION = 3
#: The fields of a cached reply (:meth:`Reply.to_json`) and their types.
REPLY_SCHEMA = {"text": str, "model": str, "?reasoning": (str, None), "?prompt_tokens": int, "?completion_tokens": int,
                "?finish_reason": (str, None), "?latency_s": float}  # fmt: skip


def cache_key(model: str, messages: list[dict[str, Any]], params: dict[str, Any], endpoint: str = "") -> str:
    """SHA-256 of the canonical JSON of the request (keys sorted, no whitespace): the same request
    gives the same key across processes and machines; any change in endpoint, model, messages
    (images included, as their data URLs) or parameters gives another."""
    blob = json.dumps(
        {"v": CACHE_VERSION, "endpoint": endpoint, "model": model, "messages": messages, "params": params},
        sort_keys=True, separators=(",", ":"), ensure_ascii=False,
    )  # fmt: skip
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _reply_problem(entry: dict[str, Any]) -> str:
    return "" if conforms(entry.get("reply"), REPLY_SCHEMA) else "its 'reply' is not a reply's fields of their types"


class ReplyCache:
    """``get(key) -> entry | None`` and ``put(key, entry)`` over ``root/<k[:2]>/<k>.json``; counts
    hits and misses. :meth:`get_reply` and :meth:`get_scores` also check the entry's shape."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.hits = 0
        self.misses = 0
        self._warned: set[Path] = set()

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def _read(self, key: str) -> tuple[dict[str, Any] | None, str]:
        """``(entry, "")``, ``(None, "")`` when there is none, or ``(None, why it is unusable)``."""
        p = self.path(key)
        if not p.exists():
            return None, ""
        try:
            entry = unseal(read_json(p))
        except ValueError as err:  # unreadable, not JSON, a directory...: a miss, not a crash
            return None, str(err).removeprefix(f"{p}: ")
        if entry is None:
            return None, "changed since it was written (its digest does not match)"
        return (entry, "") if entry.get("key") == key else (None, "written for another request")

    def _lookup(self, key: str, problem: Callable[[dict[str, Any]], str] | None = None) -> dict[str, Any] | None:
        entry, why = self._read(key)
        if entry is not None and problem is not None:
            why = problem(entry)
            entry = None if why else entry
        if entry is None:
            self.misses += 1
            path = self.path(key)
            if why and path not in self._warned:  # once per entry, however often it is asked for
                self._warned.add(path)
                log.warning("reply cache: ignoring entry %s (%s); it is requested again", path, why)
            return None
        self.hits += 1
        return entry

    def get(self, key: str) -> dict[str, Any] | None:
        """The entry under ``key``, or ``None``: absent, unreadable, edited since it was written
        (its digest), or written for another key."""
        return self._lookup(key)

    def get_reply(self, key: str) -> Reply | None:
        """The cached :class:`Reply` (``cached=True``), or ``None`` (also for an entry whose
        ``reply`` is not a reply's fields of their types)."""
        entry = self._lookup(key, _reply_problem)
        return None if entry is None else Reply.from_json(entry["reply"])

    def get_scores(self, key: str, n: int) -> list[float] | None:
        """The ``n`` cached option scores (finite numbers), or ``None``."""

        def problem(entry: dict[str, Any]) -> str:
            ok = conforms(entry.get("scores"), [float]) and len(entry["scores"]) == n
            return "" if ok else f"its 'scores' are not {n} finite numbers"

        entry = self._lookup(key, problem)
        return None if entry is None else [float(v) for v in entry["scores"]]

    def put(self, key: str, entry: dict[str, Any]) -> Path:
        """Write ``entry`` sealed (its digest added), atomically; creates the shard directory."""
        return write_json_atomic(self.path(key), seal({**entry, "key": key}))
