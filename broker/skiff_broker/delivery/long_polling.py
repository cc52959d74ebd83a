"""Wakes receive calls waiting on a topic when something there may have become deliverable.

That is when the dispatcher indexes new messages, and when a consumer acks or
changes an invisible time: an ack can release a FIFO queue, and a shorter
invisible time makes a redelivery due sooner than the waiter planned for.

Memory: one event per topic with waiters, whatever their number, and one arrival
count per topic that has had messages; each waiting
request is a suspended call, and a connection holds at most the server's
``MAX_CONCURRENT_STREAMS`` of them (``assembly/broker_server.py``), further calls waiting in
the client. A wait never outlives its request's deadline.

No lost wake-ups, though arrivals for topics nobody waits on never reach the loop (most
sends have no receiver waiting; a hand-over costs a syscall on each side): every arrival
bumps its topic's count in ``arrivals`` before it looks for waiters, and a waiter
registers before it checks its topic's count against the one it took before reading, so
one of the two sees the other. Arrivals on other topics never end a wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class ArrivalHub:
    """Bridges the dispatcher thread to waiters on one event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._events: dict[str, asyncio.Event] = {}
        # Topics with arrivals the loop has not woken waiters for yet, and whether a
        # wake-up is already on its way: a busy dispatcher hands over many batches
        # per turn of the loop, and each hand-over through the loop costs a syscall.
        self._lock = threading.Lock()
        self._arrived: set[str] = set()
        self._wake_scheduled = False
        # Arrivals so far per topic, written by the dispatcher thread (the one caller of
        # on_arrival): see the module docstring.
        self._arrivals: dict[str, int] = {}

    def arrivals(self, topic: str) -> int:
        """Arrivals ``topic`` has had so far: take it before reading what a wait is for."""
        return self._arrivals.get(topic, 0)

    def on_arrival(self, touched: set[tuple[str, int]]) -> None:
        """Dispatcher listener (its thread): at most one loop callback pending at a time."""
        counts = self._arrivals
        events = self._events
        waited_for = False
        for topic, _ in touched:
            counts[topic] = counts.get(topic, 0) + 1
            waited_for = waited_for or topic in events
        if not waited_for:
            return
        with self._lock:
            self._arrived.update(topic for topic, _ in touched)
            if self._wake_scheduled:
                return
            self._wake_scheduled = True
        # A stopped loop has nobody waiting.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._wake_arrived)

    def _wake_arrived(self) -> None:
        with self._lock:
            topics, self._arrived = self._arrived, set()
            self._wake_scheduled = False
        self._wake(topics)

    def notify(self, topic: str) -> None:
        """Wake the waiters of ``topic`` (call on the loop's own thread)."""
        self._wake({topic})

    def _wake(self, topics: set[str]) -> None:
        for topic in topics:
            event = self._events.pop(topic, None)
            if event is not None:
                event.set()

    async def poll(
        self, topic: str, seconds: float, read: Callable[[], T], empty: Callable[[T], bool]
    ) -> T:
        """``read()``, again each time ``topic`` gets messages, until it is not ``empty``
        or ``seconds`` have passed; its last result."""
        deadline = time.monotonic() + max(seconds, 0.0)
        while True:
            since = self.arrivals(topic)
            result = read()
            left = deadline - time.monotonic()
            if not empty(result) or left <= 0:
                return result
            await self.wait(topic, left, since)

    async def wait(self, topic: str, timeout: float, since: int) -> bool:
        """True if new messages arrived for ``topic`` within ``timeout`` seconds, or since
        ``arrivals(topic)`` was ``since`` (take it before reading what the wait is for)."""
        if timeout <= 0:
            return False
        event = self._events.get(topic)
        if event is None:
            event = self._events[topic] = asyncio.Event()
        if self.arrivals(topic) != since:
            # Arrived while reading: the arrival may not have seen this waiter. Let the
            # loop's other work run before the caller reads again.
            await asyncio.sleep(0)
            return True
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            return False
        return True
