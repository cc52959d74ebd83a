"""Prepares the next commit-log segment in the background.

When a segment is handed out, the one after it is allocated and warmed by this
thread, so a roll at a segment's end finds its successor ready instead of
stalling the append on fallocate and page faults.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future

from .mapped_file import MappedFile

log = logging.getLogger(__name__)


class SegmentAllocator:
    def __init__(self, *, warm: bool) -> None:
        self._warm = warm
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)
        self._pending: dict[str, tuple[int, Future[MappedFile]]] = {}
        self._queue: list[str] = []
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="segment-allocator", daemon=True)
        self._thread.start()

    def get(self, path: str, next_path: str | None, file_size: int) -> MappedFile:
        """The segment at ``path``, ready to write; schedules ``next_path`` ahead of need.

        Raises DiskFullError (or OSError) when the segment cannot be allocated.
        """
        with self._lock:
            entry = self._pending.get(path)
            if next_path is not None and next_path not in self._pending and not self._stopped:
                self._pending[next_path] = (file_size, Future())
                self._queue.append(next_path)
                self._wakeup.notify()
        if entry is None:
            return MappedFile.create(path, file_size, warm=self._warm)
        try:
            return entry[1].result()
        finally:
            with self._lock:
                self._pending.pop(path, None)

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._stopped:
                    self._wakeup.wait()
                if self._stopped:
                    return
                path = self._queue.pop(0)
                file_size, future = self._pending[path]
            try:
                future.set_result(MappedFile.create(path, file_size, warm=self._warm))
            except BaseException as exc:  # handed to the appender that needs the segment
                log.warning("could not prepare segment %s: %s", path, exc)
                future.set_exception(exc)
                with self._lock:
                    # Let the next request try again instead of replaying the failure.
                    self._pending.pop(path, None)

    def shutdown(self) -> None:
        """Stop the thread and close segments prepared but never handed out.

        They stay on disk, empty; recovery treats a trailing empty segment as unused.
        """
        with self._lock:
            self._stopped = True
            self._wakeup.notify_all()
        self._thread.join()
        for _, future in list(self._pending.values()):
            if future.done() and future.exception() is None:
                future.result().close()
        self._pending.clear()
