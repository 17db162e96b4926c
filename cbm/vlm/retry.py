"""When to retry a chat request and how long to wait: 429 and 5xx (and transport errors) are
retried with exponential backoff, a server's ``Retry-After`` (seconds or an HTTP date) taking
precedence within a cap; other 4xx are the caller's mistake and are not retried."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime

#: Status codes worth another try: rate limited, timeouts and server-side failures.
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    """``max_retries`` further attempts after the first; waits ``base_s * 2**attempt`` (full jitter
    in ``[0.5, 1]`` of it), never more than ``max_wait_s``; a ``Retry-After`` is honoured up to ``max_wait_s``."""

    max_retries: int = 5
    base_s: float = 1.0
    max_wait_s: float = 60.0

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.base_s < 0 or self.max_wait_s < 0:
            raise ValueError("max_retries, base_s and max_wait_s must be >= 0")

    def should_retry(self, attempt: int, status: int | None) -> bool:
        """Retry after failed attempt ``attempt`` (0-based)? ``status=None``: a transport error or timeout."""
        return attempt < self.max_retries and (status is None or status in RETRY_STATUSES)

    def wait_s(self, attempt: int, retry_after: str | None = None, rng: random.Random | None = None, now: datetime | None = None) -> float:
        """Seconds to sleep before attempt ``attempt + 1``."""
        hinted = parse_retry_after(retry_after, now)
        if hinted is not None:
            return min(hinted, self.max_wait_s)
        jitter = 0.5 + 0.5 * (rng or random).random()
        return min(self.base_s * 2**attempt * jitter, self.max_wait_s)


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """A ``Retry-After`` header as seconds from ``now`` (>= 0), or ``None`` when absent or unreadable."""
    if value is None or not str(value).strip():
        return None
    text = str(value).strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - (now or datetime.now(timezone.utc))).total_seconds())
