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
    ``status`` if any, the server's ``retry_after`` header if any; ``refused``: a ``transport``
    error where the connection itself was refused (nothing listens at the endpoint). ``str()`` is
    one line."""

    def __init__(self, kind: str, message: str, status: int | None = None, retry_after: str | None = None, attempts: int = 1,
                 refused: bool = False):  # fmt: skip
        if kind not in ERROR_KINDS:
            raise ValueError(f"unknown chat error kind {kind!r}")
        self.kind = kind
        self.status = status
        self.retry_after = retry_after
        self.attempts = attempts
        self.refused = refused
        super().__init__(" ".join(str(message).split())[:300])

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "status": self.status, "message": str(self), "attempts": self.attempts}


class EndpointUnreachable(ConnectionError):
    """The endpoint refused the connection before it ever answered this client: a wrong
    ``base_url`` or a server that is not running, i.e. bad input, not a failed request. A
    :class:`ConnectionError` (an ``OSError``: one line and exit code 2 in every command), not a
    :class:`ChatError`: a run stops at once instead of recording the same failure per request."""

    def __init__(self, url: str, attempts: int):
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        proxy = env_proxy(url)
        where, hint = (f" through the proxy {proxy}", "the proxy refused it; is it running?") if proxy else \
            ("", "no server listens there; is it running, and is the URL right?")
        super().__init__(f"client.base_url: cannot connect to {url}{where}: connection refused{tries} ({hint})")
        self.url = url
        self.attempts = attempts


def env_proxy(url: str) -> str | None:
    """The proxy the environment routes ``url`` through (``HTTP_PROXY`` / ``HTTPS_PROXY`` / ``ALL_PROXY``
    unless ``NO_PROXY`` names the host), as the HTTP client reads it; ``None``: a direct connection."""
    import urllib.request
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass_environment(parts.hostname or "", proxies):
        return None
    return proxy


def connection_refused(err: BaseException | None) -> bool:
    """Whether ``err`` or an error it was raised from is a refused connection (``ECONNREFUSED``)."""
    import errno

    seen = 0
    while err is not None and seen < 16:
        if isinstance(err, ConnectionRefusedError) or getattr(err, "errno", None) == errno.ECONNREFUSED:
            return True
        if "Connection refused" in str(err) or f"[Errno {errno.ECONNREFUSED}]" in str(err):
            return True
        err, seen = err.__cause__ or err.__context__, seen + 1
    return False
