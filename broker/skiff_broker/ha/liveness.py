"""Dropping a replication peer that went silent.

Each end notes every frame it reads; a watchdog task closes the connection once
nothing arrived for the heartbeat timeout. One check per interval instead of a
timeout armed around every read, which on a busy SYNC stream would cost a timer
(or, with ``asyncio.wait_for`` on Python 3.11, a task) per frame.
"""

from __future__ import annotations

import asyncio
import logging
import time

log = logging.getLogger(__name__)


class PeerSilent(Exception):
    """Nothing arrived from the peer within the heartbeat timeout."""


class Liveness:
    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.last_heard = time.monotonic()

    def heard(self) -> None:
        self.last_heard = time.monotonic()

    def silent_for(self) -> float:
        return time.monotonic() - self.last_heard

    async def watch(self, transport: asyncio.WriteTransport, peer: str) -> None:
        """Abort ``transport`` once the peer is silent too long; readers then see it closed."""
        check = max(0.05, min(1.0, self.timeout / 4))
        while True:
            await asyncio.sleep(check)
            if self.silent_for() > self.timeout:
                log.warning("%s silent for %.1f s; dropping the connection", peer, self.timeout)
                transport.abort()
                return
