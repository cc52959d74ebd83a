"""SYNC_FLUSH: group commit.

Appenders ask for the flushed offset to reach the end of their records. While one
fdatasync runs, further requests pile up; the next pass covers them all with a
single fdatasync. With many concurrent appenders a flush costs a fraction of a
call per message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from .flush_waiters import FlushWaiters
from .mapped_file_queue import MappedFileQueue
from .observer import MAX_FLUSH_CONTEXTS, NULL_OBSERVER, FlushTimer, StoreObserver
from .service_thread import ConditionServiceThread

log = logging.getLogger(__name__)


class GroupCommitService(ConditionServiceThread):
    """``on_flushed`` gets the newest store timestamp known flushed (for the checkpoint).

    A flush starts as soon as a request asks past the flushed offset; stopping flushes
    once more, so everything requested before ``stop()`` is on disk.
    """

    name = "group-commit"

    def __init__(
        self,
        queue: MappedFileQueue,
        waiters: FlushWaiters,
        on_flushed: Callable[[int], None] = lambda stamp: None,
        stamp: Callable[[], int] = lambda: 0,
        observer: StoreObserver = NULL_OBSERVER,
    ) -> None:
        self._queue = queue
        self._waiters = waiters
        self._on_flushed = on_flushed
        self._stamp = stamp
        self._observer = observer
        super().__init__()
        self._target = 0
        # Waiters served per pass, for the span attribute and the benchmark.
        self.last_batch_waiters = 0
        # (offset, observer token) of each appender waiting for a flush.
        self._pending: list[tuple[int, Any]] = []

    def request(self, offset: int, context: Any = None) -> None:
        """Ask for everything below ``offset`` to be flushed.

        ``context`` is the appender's observer token (``AppendScope.context``).
        """
        with self._work:
            # Already on disk (a flush that began before this request covered it): no wait.
            if offset > self._queue.flushed_where:
                self._pending.append((offset, context))
            if offset > self._target:
                self._target = offset
                self._work.notify()

    def work_due_in(self) -> float | None:
        return 0 if self._target > self._queue.flushed_where else None

    def step(self) -> None:
        self._flush()

    def on_stop(self) -> None:
        self._flush()

    def _take_served(self, flushed: int | None) -> list[Any]:
        """Forget the waiters whose records lie below ``flushed`` (None: all of them).

        Returns (some of) their observer tokens, first come first.
        """
        with self._work:
            pending = self._pending
            served = [w for w in pending if flushed is None or w[0] <= flushed]
            self._pending = (
                [w for w in pending if w[0] > flushed]  # type: ignore[operator]
                if len(served) < len(pending)
                else []
            )
        self.last_batch_waiters = len(served)
        return [context for _, context in served if context is not None][:MAX_FLUSH_CONTEXTS]

    def _flush(self) -> None:
        # Sampled first: every record stamped before now is covered by this flush.
        stamp = self._stamp()
        timer = FlushTimer(self._queue.flushed_where)
        try:
            flushed = self._queue.flush_all()
            timer.stop()
        except OSError as exc:
            log.error("commit log flush failed: %s", exc)
            self._waiters.fail(f"flushing the commit log failed: {exc}")
            with self._work:
                # Nothing below the target can be promised any more.
                self._target = 0
            # Every waiter fails with this flush.
            self._report(timer, self._queue.flushed_where, self._take_served(None), str(exc))
            return
        self._waiters.advance(flushed)
        self._on_flushed(stamp)
        contexts = self._take_served(flushed)
        if flushed > timer.before or self.last_batch_waiters:
            self._report(timer, flushed, contexts)

    def _report(
        self, timer: FlushTimer, flushed: int, contexts: list[Any], error: str = ""
    ) -> None:
        report = timer.report(
            "SYNC_FLUSH",
            flushed,
            waiters=self.last_batch_waiters,
            contexts=contexts,
            error=error,
        )
        try:
            self._observer.flush_finished(report)
        except Exception:
            # Telemetry must never stop the flush thread that appenders wait on.
            log.exception("flush observer failed")
