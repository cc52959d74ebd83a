"""The rate-limited log line: one line per interval, counting what it held back."""

from __future__ import annotations

import time

import pytest

from skiff_broker.rate_limited_log import RateLimitedLog


def test_the_rate_limited_log_counts_what_it_held_back(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    limited = RateLimitedLog(interval=3600)
    assert limited.line("first") == "first"
    assert limited.line("second") is None
    assert limited.line("third") is None
    clock[0] += 3600  # the interval has passed
    assert limited.line("fourth") == "fourth (2 more like it not logged since the last)"


def test_each_allowed_line_counts_the_events_since_the_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    limited = RateLimitedLog(interval=60)
    assert limited.due() == 1
    assert [limited.due() for _ in range(3)] == [None, None, None]
    clock[0] += 60  # the interval has passed
    assert limited.due() == 4
