"""Retry decisions and waits: statuses, exponential backoff within a cap, Retry-After honoured."""

import random
from datetime import datetime, timezone

import pytest

from cbm.vlm.retry import RetryPolicy, parse_retry_after


def test_which_failures_are_retried():
    p = RetryPolicy(max_retries=2)
    assert p.should_retry(0, 429) and p.should_retry(0, 503) and p.should_retry(1, None)  # None: transport error
    assert not p.should_retry(0, 400) and not p.should_retry(0, 401) and not p.should_retry(0, 404)
    assert not p.should_retry(2, 429)  # out of retries


def test_backoff_doubles_with_jitter_and_is_capped():
    p = RetryPolicy(base_s=1.0, max_wait_s=10.0)
    rng = random.Random(0)
    waits = [p.wait_s(a, rng=rng) for a in range(6)]
    for a, w in enumerate(waits[:4]):
        assert 0.5 * 2**a <= w <= 2**a
    assert 8.0 <= waits[4] <= 10.0  # 16 x jitter in [8, 16], capped at 10
    assert waits[5] == 10.0  # 32 x jitter >= 16: always the cap
    assert RetryPolicy(base_s=0.0).wait_s(3) == 0.0


def test_retry_after_seconds_and_http_dates():
    now = datetime(2026, 12, 1, 0, 0, 0, tzinfo=timezone.utc)
    assert parse_retry_after("7", now) == 7.0
    assert parse_retry_after("Tue, 01 Dec 2026 00:00:30 GMT", now) == 30.0
    assert parse_retry_after("Mon, 30 Nov 2026 23:00:00 GMT", now) == 0.0  # in the past: now
    assert parse_retry_after("soon", now) is None and parse_retry_after(None) is None and parse_retry_after(" ") is None
    p = RetryPolicy(max_wait_s=20.0)
    assert p.wait_s(0, "7", now=now) == 7.0
    assert p.wait_s(0, "3600", now=now) == 20.0  # honoured up to the cap


def test_bad_policy_values():
    with pytest.raises(ValueError, match="must be >= 0"):
        RetryPolicy(max_retries=-1)
