"""Prepares the next commit-log segment in the background.

When a segment is handed out, the one after it is allocated and warmed by this
thread, so a roll at a segment's end finds its successor ready instead of
stalling the append on fallocate and page faults.
"""

from __future__ import annotations

import logging
from concurrent.futures import CancelledError, Future

from .mapped_file import MappedFile
from .service_thread import ConditionServiceThread

log = logging.getLogger(__name__)


class SegmentAllocator(ConditionServiceThread):
    """Prepares one requested segment per step; :meth:`stop` closes those never handed out.

    They stay on disk, empty; recovery treats a trailing empty segment as unused.
    """

    name = "segment-allocator"

    def __init__(self, *, warm: bool) -> None:
        super().__init__()
        self._warm = warm
        # Requested but not yet handed out, by path.
        self._pending: dict[str, Future[MappedFile]] = {}
        # Not yet started by the thread.
        self._queue: list[tuple[str, int, Future[MappedFile]]] = []

    def get(self, path: str, next_path: str | None, file_size: int) -> MappedFile:
        """The segment at ``path``, ready to write; schedules ``next_path`` ahead of need.

        Raises DiskFullError (or OSError) when the segment cannot be allocated.
        """
        with self._work:
            # Claimed here, so stop() cannot close a segment being handed out.
            future = self._pending.pop(path, None)
            if next_path is not None and next_path not in self._pending and not self.stopped:
                scheduled: Future[MappedFile] = Future()
                self._pending[next_path] = scheduled
                self._queue.append((next_path, file_size, scheduled))
                self._work.notify()
        if future is None:
            return MappedFile.create(path, file_size, warm=self._warm)
        try:
            return future.result()
        except CancelledError:
            # The allocator stopped before preparing it: the caller still needs it.
            return MappedFile.create(path, file_size, warm=self._warm)

    def work_due_in(self) -> float | None:
        return 0 if self._queue else None

    def step(self) -> None:
        with self._work:
            # Only this thread takes from the queue: it still holds what woke it.
            path, file_size, future = self._queue.pop(0)
            if not future.set_running_or_notify_cancel():
                return
        try:
            future.set_result(MappedFile.create(path, file_size, warm=self._warm))
        except BaseException as exc:  # handed to the appender that needs the segment
            log.warning("could not prepare segment %s: %s", path, exc)
            future.set_exception(exc)
            with self._work:
                # Let the next request try again instead of replaying the failure.
                if self._pending.get(path) is future:
                    del self._pending[path]

    def on_stop(self) -> None:
        with self._work:
            unclaimed = list(self._pending.values())
            never_started = [future for _, _, future in self._queue]
            self._pending.clear()
            self._queue.clear()
        for future in never_started:
            # Releases an appender blocked in get(); it then allocates by itself.
            future.cancel()
        for future in unclaimed:
            if future.done() and not future.cancelled() and future.exception() is None:
                future.result().close()
