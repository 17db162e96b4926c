"""What a chat backend returns (:class:`Reply`) and how a request fails (:class:`ChatError`): the
common currency of the OpenAI-compatible and the local backends, the cache and the accounting."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

#: How a request can fail. ``http``: a status code (retried for 408/409/429/5xx); ``timeout`` and
#: ``transport``: no reply (retried); ``malformed``: a reply that is not a chat completion (not
#: retried: a server that answers garbage answers it again).
ERROR_KINDS = ("http", "timeout", "transport", "malformed")


@dataclass
class Reply:
    """One chat completion: the text, the reasoning text when the endpoint returns it
    (``reasoning`` / ``reasoning_content``), token counts, and whether it came from the cache."""

    text: str
    model: str
    reasoning: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    latency_s: float = 0.0
    cached: bool = False

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("cached")
        return out

    @classmethod
    def from_json(cls, entry: dict[str, Any]) -> Reply:
        keep = {k: entry[k] for k in ("text", "model", "reasoning", "prompt_tokens", "completion_tokens", "finish_reason", "latency_s") if k in entry}
        return cls(**keep, cached=True)


class ChatError(RuntimeError):
    """A request that failed (after its retries): ``kind`` in :data:`ERROR_KINDS`, the HTTP
    ``status`` if any, the server's ``retry_after`` header if any. ``str()`` is one line."""

    def __init__(self, kind: str, message: str, status: int | None = None, retry_after: str | None = None, attempts: int = 1):
        if kind not in ERROR_KINDS:
            raise ValueError(f"unknown chat error kind {kind!r}")
        self.kind = kind
        self.status = status
        self.retry_after = retry_after
        self.attempts = attempts
        super().__init__(" ".join(str(message).split())[:300])

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "status": self.status, "message": str(self), "attempts": self.attempts}
