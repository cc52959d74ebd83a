"""Write buffers that appends fill before a commit service copies them to the file.

Appends then touch only anonymous memory, never the file's pages, which keeps
them clear of writeback stalls; the price is that data becomes readable only
once committed.
"""

from __future__ import annotations

import collections
import mmap
import threading


class TransientStorePool:
    def __init__(self, buffer_count: int, buffer_size: int) -> None:
        self.buffer_size = buffer_size
        self._lock = threading.Lock()
        self._free: collections.deque[mmap.mmap] = collections.deque(
            mmap.mmap(-1, buffer_size) for _ in range(buffer_count)
        )

    def borrow(self) -> mmap.mmap | None:
        """A free buffer, or None: the segment then writes through its mapping."""
        with self._lock:
            return self._free.popleft() if self._free else None

    def give_back(self, buffer: mmap.mmap) -> None:
        with self._lock:
            self._free.append(buffer)

    @property
    def available(self) -> int:
        return len(self._free)

    def close(self) -> None:
        with self._lock:
            while self._free:
                self._free.popleft().close()
