"""Appenders waiting for the flushed offset to pass the end of their records.

The flush side publishes one watermark per flush; every waiter at or below it
is released together. Event-loop waiters are released with one callback per
loop and flush, not one per message.
"""

from __future__ import annotations

import asyncio
import enum
import heapq
import itertools
import threading


class FlushOutcome(enum.Enum):
    FLUSHED = "FLUSHED"
    TIMEOUT = "TIMEOUT"
    FAILED = "FAILED"


class FlushWaiters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._flushed = 0
        self._failure: str | None = None
        self._seq = itertools.count()
        self._by_loop: dict[asyncio.AbstractEventLoop, list] = {}

    @property
    def flushed(self) -> int:
        return self._flushed

    @property
    def failure(self) -> str | None:
        """Why a flush failed; once set, no later write is reported durable."""
        return self._failure

    def reset(self, flushed: int) -> None:
        with self._lock:
            self._flushed = flushed

    def wait(self, offset: int, timeout: float) -> FlushOutcome:
        with self._changed:
            self._changed.wait_for(lambda: self._flushed >= offset or self._failure, timeout)
            if self._flushed >= offset:
                return FlushOutcome.FLUSHED
            return FlushOutcome.FAILED if self._failure else FlushOutcome.TIMEOUT

    async def wait_async(self, offset: int, timeout: float) -> FlushOutcome:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._flushed >= offset:
                return FlushOutcome.FLUSHED
            if self._failure:
                return FlushOutcome.FAILED
            future: asyncio.Future[FlushOutcome] = loop.create_future()
            heapq.heappush(self._by_loop.setdefault(loop, []), (offset, next(self._seq), future))
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            return FlushOutcome.TIMEOUT

    def advance(self, flushed: int) -> None:
        """Called by the flush side after every successful flush."""
        with self._lock:
            if flushed <= self._flushed:
                return
            self._flushed = flushed
            self._changed.notify_all()
            ready = [loop for loop, heap in self._by_loop.items() if heap and heap[0][0] <= flushed]
        for loop in ready:
            self._call_in_loop(loop)

    def fail(self, reason: str) -> None:
        """A flush failed: every pending and future waiter beyond the watermark fails."""
        with self._lock:
            self._failure = reason
            self._changed.notify_all()
            loops = list(self._by_loop)
        for loop in loops:
            self._call_in_loop(loop)

    def _call_in_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            loop.call_soon_threadsafe(self._release, loop)
        except RuntimeError:
            # The loop is closed; its waiters went with it.
            with self._lock:
                self._by_loop.pop(loop, None)

    def _release(self, loop: asyncio.AbstractEventLoop) -> None:
        released = []
        with self._lock:
            heap = self._by_loop.get(loop, [])
            failed = self._failure is not None
            while heap and (failed or heap[0][0] <= self._flushed):
                offset, _, future = heapq.heappop(heap)
                released.append((future, offset <= self._flushed))
            if not heap:
                self._by_loop.pop(loop, None)
        for future, flushed in released:
            if not future.done():
                future.set_result(FlushOutcome.FLUSHED if flushed else FlushOutcome.FAILED)
