"""SYNC_FLUSH: group commit.

Appenders ask for the flushed offset to reach the end of their records. While one
fdatasync runs, further requests pile up; the next pass covers them all with a
single fdatasync. With many concurrent appenders a flush costs a fraction of a
call per message.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from .flush_waiters import FlushWaiters
from .mapped_file_queue import MappedFileQueue

log = logging.getLogger(__name__)


class GroupCommitService:
    """``on_flushed`` gets the newest store timestamp known flushed (for the checkpoint)."""

    name = "group-commit"

    def __init__(
        self,
        queue: MappedFileQueue,
        waiters: FlushWaiters,
        on_flushed: Callable[[int], None] = lambda stamp: None,
        stamp: Callable[[], int] = lambda: 0,
    ) -> None:
        self._queue = queue
        self._waiters = waiters
        self._on_flushed = on_flushed
        self._stamp = stamp
        self._lock = threading.Lock()
        self._requested = threading.Condition(self._lock)
        self._target = 0
        self._stopped = False
        self._thread: threading.Thread | None = None
        # Waiters served per pass, for the span attribute and the benchmark.
        self.last_batch_waiters = 0
        self._pending_waiters = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def request(self, offset: int) -> None:
        """Ask for everything below ``offset`` to be flushed."""
        with self._lock:
            self._pending_waiters += 1
            if offset > self._target:
                self._target = offset
                self._requested.notify()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._stopped and self._target <= self._queue.flushed_where:
                    self._requested.wait()
                if self._stopped:
                    break
                self.last_batch_waiters, self._pending_waiters = self._pending_waiters, 0
            self._flush()
        self._flush()

    def _flush(self) -> None:
        # Sampled first: every record stamped before now is covered by this flush.
        stamp = self._stamp()
        try:
            flushed = self._queue.flush_all()
        except OSError as exc:
            log.error("commit log flush failed: %s", exc)
            self._waiters.fail(f"flushing the commit log failed: {exc}")
            with self._lock:
                # Nothing below the target can be promised any more.
                self._target = 0
            return
        self._waiters.advance(flushed)
        self._on_flushed(stamp)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._requested.notify()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
