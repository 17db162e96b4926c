"""Per-run accounting of a chat client: requests sent, cache hits, retries, failures by kind,
tokens and cost (from per-million-token prices), time spent waiting on the endpoint. Thread-safe:
a client's concurrent requests add to one record."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from cbm.vlm.reply import Reply

PER_MTOK = 1e6


@dataclass
class Usage:
    price_in_per_mtok: float = 0.0
    price_out_per_mtok: float = 0.0
    requests: int = 0
    cache_hits: int = 0
    retries: int = 0
    failures: Counter = field(default_factory=Counter)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add_reply(self, reply: Reply) -> None:
        with self._lock:
            if reply.cached:
                self.cache_hits += 1
                return
            self.requests += 1
            self.prompt_tokens += reply.prompt_tokens
            self.completion_tokens += reply.completion_tokens
            self.latency_s += reply.latency_s

    def add_retry(self) -> None:
        with self._lock:
            self.retries += 1

    def add_failure(self, kind: str) -> None:
        with self._lock:
            self.failures[kind] += 1

    @property
    def cost_usd(self) -> float:
        """Cost of the requests sent in this run (cache hits are free)."""
        return (self.prompt_tokens * self.price_in_per_mtok + self.completion_tokens * self.price_out_per_mtok) / PER_MTOK

    def to_json(self) -> dict[str, Any]:
        with self._lock:
            return {
                "requests": self.requests, "cache_hits": self.cache_hits, "retries": self.retries,
                "failures": dict(self.failures), "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "cost_usd": round(self.cost_usd, 6),
                "latency_s": round(self.latency_s, 3),
            }  # fmt: skip

    def summary(self) -> str:
        """One line for the console."""
        j = self.to_json()
        failed = sum(j["failures"].values())
        return (f"{j['requests']} requests ({j['cache_hits']} cached, {j['retries']} retries, {failed} failed), "
                f"{j['prompt_tokens']:,} + {j['completion_tokens']:,} tokens, ${j['cost_usd']:.4f}")  # fmt: skip
