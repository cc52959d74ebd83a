"""At most one log line per interval about events that may come in floods.

A peer that keeps reconnecting with the wrong secret, or a client that keeps dialling
plaintext into a TLS-only port, must not fill the log. Invariant: every event is counted
in exactly one line (the next one allowed), so the lines add up to what happened.
"""

from __future__ import annotations

import time


class RateLimitedLog:
    """At most one line per ``interval`` seconds (``time.monotonic``)."""

    def __init__(self, interval: float = 10.0) -> None:
        self.interval = interval
        self._last = -interval
        self._unlogged = 0

    def due(self) -> int | None:
        """Count one event: how many (this one too) the line due now covers, else None."""
        self._unlogged += 1
        now = time.monotonic()
        if now - self._last < self.interval:
            return None
        self._last = now
        count, self._unlogged = self._unlogged, 0
        return count

    def line(self, text: str) -> str | None:
        """``text`` (with the count held back) if it may be logged now, else None."""
        count = self.due()
        if count is None:
            return None
        held = count - 1
        return f"{text} ({held} more like it not logged since the last)" if held else text
