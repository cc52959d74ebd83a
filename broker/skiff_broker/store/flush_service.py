"""ASYNC_FLUSH: flush in the background by interval and least dirty pages.

Every ``flush_interval`` the commit log is flushed if at least ``least_pages``
pages are dirty, and whatever is dirty every ``thorough_interval``. Appenders do
not wait; a crash of the machine loses at most what was not yet flushed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from .flush_waiters import FlushWaiters
from .mapped_file_queue import MappedFileQueue
from .observer import NULL_OBSERVER, FlushTimer, StoreObserver
from .service_thread import ServiceThread

log = logging.getLogger(__name__)


class LeastPages:
    """How many dirty pages make a flush (or commit) worth it right now.

    Usually ``least_pages``; zero (everything) once ``thorough_interval`` has
    passed since the last thorough pass.
    """

    def __init__(self, least_pages: int, thorough_interval: float) -> None:
        self._least_pages = least_pages
        self._thorough_interval = thorough_interval
        self._last_thorough = time.monotonic()

    def now(self) -> int:
        now = time.monotonic()
        if now - self._last_thorough >= self._thorough_interval:
            self._last_thorough = now
            return 0
        return self._least_pages


class AsyncFlushService(ServiceThread):
    name = "async-flush"

    def __init__(
        self,
        queue: MappedFileQueue,
        waiters: FlushWaiters,
        *,
        interval: float,
        least_pages: int,
        thorough_interval: float,
        on_flushed: Callable[[int], None] = lambda stamp: None,
        stamp: Callable[[], int] = lambda: 0,
        observer: StoreObserver = NULL_OBSERVER,
    ) -> None:
        super().__init__(interval)
        self._queue = queue
        self._waiters = waiters
        self._pages = LeastPages(least_pages, thorough_interval)
        self._on_flushed = on_flushed
        self._stamp = stamp
        self._observer = observer

    def step(self) -> None:
        least_pages = self._pages.now()
        self._flush(least_pages)

    def _flush(self, least_pages: int) -> None:
        stamp = self._stamp()
        timer = FlushTimer(self._queue.flushed_where)
        try:
            moved = False
            while self._queue.flush(least_pages):
                moved = True
            timer.stop()
        except OSError as exc:
            log.error("commit log flush failed: %s", exc)
            self._waiters.fail(f"flushing the commit log failed: {exc}")
            self._report(timer, str(exc))
            return
        if moved:
            self._waiters.advance(self._queue.flushed_where)
            self._on_flushed(stamp)
            # Intervals that found too few dirty pages are not flushes: nothing to report.
            self._report(timer)

    def _report(self, timer: FlushTimer, error: str = "") -> None:
        try:
            self._observer.flush_finished(
                timer.report("ASYNC_FLUSH", self._queue.flushed_where, error=error)
            )
        except Exception:
            # Telemetry must never stop the flush thread.
            log.exception("flush observer failed")

    def on_stop(self) -> None:
        self._flush(0)


class CommitService(ServiceThread):
    """Transient store pool: copy write buffers into the file, then wake the flusher."""

    name = "commit"

    def __init__(
        self,
        queue: MappedFileQueue,
        flusher: AsyncFlushService,
        *,
        interval: float,
        least_pages: int,
        thorough_interval: float,
    ) -> None:
        super().__init__(interval)
        self._queue = queue
        self._flusher = flusher
        self._pages = LeastPages(least_pages, thorough_interval)
        self.on_committed: Callable[[], None] = lambda: None

    def step(self) -> None:
        least_pages = self._pages.now()
        moved = False
        while self._queue.commit(least_pages):
            moved = True
        if moved:
            self.on_committed()
            self._flusher.wakeup()

    def on_stop(self) -> None:
        if self._queue.commit_all():
            self.on_committed()


class LogicsFlushService(ServiceThread):
    """Flushes consume queues and the index, then records progress in the checkpoint.

    ``flush_logics(least_pages)`` does both; it runs every interval.
    """

    name = "logics-flush"

    def __init__(
        self,
        flush_logics: Callable[[int], None],
        *,
        interval: float,
        least_pages: int,
        thorough_interval: float,
    ) -> None:
        super().__init__(interval)
        self._flush_logics = flush_logics
        self._pages = LeastPages(least_pages, thorough_interval)

    def step(self) -> None:
        least_pages = self._pages.now()
        self._flush_logics(least_pages)
