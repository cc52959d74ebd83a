"""Waiting for something that happens asynchronously: one ``wait_for`` for the whole suite.

``wait_for(condition, what, deadline_s=...)`` calls ``condition`` until it returns something
truthy and returns that value. Past the deadline it raises AssertionError naming ``what``
and the last value ``condition`` returned, so a failure says what never happened and how
far it got. The pause between calls starts short (unit tests wait milliseconds) and grows
to a fraction of a second (a poll of the API server or a broker costs a round trip), or to
``longest_pause_s`` where each call is dearer (a ``kubectl`` run against a real cluster).
``until(...)`` is the same wait for a coroutine: it pauses with ``asyncio.sleep``, so the
event loop it runs on goes on making the condition come true.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

DEADLINE_S = 60.0
FIRST_PAUSE_S = 0.01
LONGEST_PAUSE_S = 0.25


def wait_for(
    condition: Callable[[], T],
    what: str,
    deadline_s: float = DEADLINE_S,
    pause: Callable[[float], object] = time.sleep,
    longest_pause_s: float = LONGEST_PAUSE_S,
) -> T:
    """``condition()``'s first truthy value; AssertionError naming ``what`` after the deadline.

    ``pause(seconds)`` waits between calls; a caller that is told when something changes
    (a condition variable) passes a pause that returns early on that signal.
    """
    end = time.monotonic() + deadline_s
    pause_s = FIRST_PAUSE_S
    while True:
        value = condition()
        if value:
            return value
        remaining = end - time.monotonic()
        if remaining <= 0:
            raise _timed_out(deadline_s, what, value)
        pause(min(pause_s, remaining))
        pause_s = min(pause_s * 2, longest_pause_s)


async def until(condition: Callable[[], T], what: str, deadline_s: float = DEADLINE_S) -> T:
    """``wait_for`` on an event loop: ``condition()``'s first truthy value."""
    end = time.monotonic() + deadline_s
    pause_s = FIRST_PAUSE_S
    while True:
        value = condition()
        if value:
            return value
        remaining = end - time.monotonic()
        if remaining <= 0:
            raise _timed_out(deadline_s, what, value)
        await asyncio.sleep(min(pause_s, remaining))
        pause_s = min(pause_s * 2, LONGEST_PAUSE_S)


def _timed_out(deadline_s: float, what: str, value: object) -> AssertionError:
    return AssertionError(
        f"timed out after {deadline_s:g}s waiting for {what} (last seen: {value!r})"
    )
