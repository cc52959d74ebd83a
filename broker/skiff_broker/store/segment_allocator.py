"""Prepares the next commit-log segment in the background.

When a segment is handed out, the one after it is allocated and warmed by this
thread, so a roll at a segment's end finds its successor ready instead of
stalling the append on fallocate and page faults.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import CancelledError, Future

from .mapped_file import MappedFile

log = logging.getLogger(__name__)


class SegmentAllocator:
    def __init__(self, *, warm: bool) -> None:
        self._warm = warm
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)
        # Requested but not yet handed out, by path.
        self._pending: dict[str, Future[MappedFile]] = {}
        # Not yet started by the thread.
        self._queue: list[tuple[str, int, Future[MappedFile]]] = []
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="segment-allocator", daemon=True)
        self._thread.start()

    def get(self, path: str, next_path: str | None, file_size: int) -> MappedFile:
        """The segment at ``path``, ready to write; schedules ``next_path`` ahead of need.

        Raises DiskFullError (or OSError) when the segment cannot be allocated.
        """
        with self._lock:
            # Claimed here, so shutdown() cannot close a segment being handed out.
            future = self._pending.pop(path, None)
            if next_path is not None and next_path not in self._pending and not self._stopped:
                scheduled: Future[MappedFile] = Future()
                self._pending[next_path] = scheduled
                self._queue.append((next_path, file_size, scheduled))
                self._wakeup.notify()
        if future is None:
            return MappedFile.create(path, file_size, warm=self._warm)
        try:
            return future.result()
        except CancelledError:
            # The allocator stopped before preparing it: the caller still needs it.
            return MappedFile.create(path, file_size, warm=self._warm)

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._stopped:
                    self._wakeup.wait()
                if self._stopped:
                    return
                path, file_size, future = self._queue.pop(0)
                if not future.set_running_or_notify_cancel():
                    continue
            try:
                future.set_result(MappedFile.create(path, file_size, warm=self._warm))
            except BaseException as exc:  # handed to the appender that needs the segment
                log.warning("could not prepare segment %s: %s", path, exc)
                future.set_exception(exc)
                with self._lock:
                    # Let the next request try again instead of replaying the failure.
                    if self._pending.get(path) is future:
                        del self._pending[path]

    def shutdown(self) -> None:
        """Stop the thread and close segments prepared but never handed out.

        They stay on disk, empty; recovery treats a trailing empty segment as unused.
        """
        with self._lock:
            self._stopped = True
            self._wakeup.notify_all()
        self._thread.join()
        with self._lock:
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
