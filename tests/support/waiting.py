"""Waiting for something that happens asynchronously: one ``wait_for`` for the whole suite.

``wait_for(condition, what, deadline_s=...)`` calls ``condition`` until it returns something
truthy and returns that value. Past the deadline it raises AssertionError naming ``what``
and the last value ``condition`` returned, so a failure says what never happened and how
far it got. The pause between calls starts short (unit tests wait milliseconds) and grows
to a fraction of a second (a poll of the API server or a broker costs a round trip).
"""

from __future__ import annotations

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
            raise AssertionError(
                f"timed out after {deadline_s:g}s waiting for {what} (last seen: {value!r})"
            )
        pause(min(pause_s, remaining))
        pause_s = min(pause_s * 2, LONGEST_PAUSE_S)
