"""An ordered run of equal-size segments forming one logical byte stream.

Segment files are named by the 20-digit, zero-padded global offset of their
first byte, so the segment holding any offset is found by arithmetic.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable

from .errors import DiskFullError, StoreCorruptError
from .mapped_file import MappedFile, is_reserved, reserve_file, segment_name
from .segment_allocator import SegmentAllocator
from .transient_store_pool import TransientStorePool

log = logging.getLogger(__name__)


class MappedFileQueue:
    def __init__(
        self,
        directory: str,
        file_size: int,
        *,
        allocator: SegmentAllocator | None = None,
        pool: TransientStorePool | None = None,
    ) -> None:
        self.directory = directory
        self.file_size = file_size
        self._allocator = allocator
        self._pool = pool
        # Readers take a reference to the current tuple without locking; every
        # change replaces it whole.
        self._files: tuple[MappedFile, ...] = ()
        self._lock = threading.Lock()
        self.flushed_where = 0
        self.committed_where = 0
        # fdatasync calls made, for the fsyncs-per-message figure.
        self.flush_count = 0
        # Segments found cut short by the last load(): (path, size it had).
        self.extended_segments: list[tuple[str, int]] = []

    def use_allocator(self, allocator: SegmentAllocator | None) -> None:
        """Have new segments made by ``allocator`` (which prepares each one's successor).

        Set once recovery is done: recovery must not have segments prepared ahead of it.
        """
        self._allocator = allocator

    # -- loading ------------------------------------------------------------

    def load(self) -> None:
        """Open every segment on disk, all marked full until recovery says otherwise."""
        os.makedirs(self.directory, exist_ok=True)
        names = []
        for name in os.listdir(self.directory):
            if name.endswith(".tmp"):
                # Left by a crash while a segment was being allocated.
                os.unlink(os.path.join(self.directory, name))
            elif name.isdigit() and len(name) == 20:
                names.append(name)
        files = []
        self.extended_segments = []
        for name in sorted(names):
            path = os.path.join(self.directory, name)
            self._extend_if_short(path)
            mf = MappedFile(path, self.file_size)
            mf.set_positions(self.file_size)
            files.append(mf)
        for before, after in itertools.pairwise(files):
            if after.file_from_offset != before.file_from_offset + self.file_size:
                log.warning(
                    "gap in %s between %s and %s",
                    self.directory,
                    os.path.basename(before.path),
                    os.path.basename(after.path),
                )
        self._files = tuple(files)

    def _extend_if_short(self, path: str) -> None:
        """Give a segment that was cut short its full size back, as zero bytes.

        Its records up to the cut stay where they were; recovery then sees the zeros
        as where its valid data stops (``extended_segments`` tells it to check).
        Blocks are allocated, not left sparse: the last segment may be written to.
        """
        size = os.path.getsize(path)
        if size >= self.file_size:
            return  # a longer one is refused when it is opened
        fd = os.open(path, os.O_RDWR)
        try:
            try:
                os.posix_fallocate(fd, size, self.file_size - size)
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise DiskFullError(
                        f"segment {path} is {size} bytes, shorter than the segments' "
                        f"{self.file_size}, and there is no space to extend it: free disk "
                        "space and start again (its records are kept)"
                    ) from exc
                raise
            os.fsync(fd)
        finally:
            os.close(fd)
        self.extended_segments.append((path, size))
        log.warning(
            "segment %s was %d bytes, shorter than the segments' %d (cut short): "
            "zero-extended; its records up to the cut are kept and checked",
            path,
            size,
            self.file_size,
        )

    # -- segments -----------------------------------------------------------

    @property
    def files(self) -> tuple[MappedFile, ...]:
        return self._files

    @property
    def first_file(self) -> MappedFile | None:
        files = self._files
        return files[0] if files else None

    @property
    def last_file(self) -> MappedFile | None:
        files = self._files
        return files[-1] if files else None

    def last_file_for_append(self, start_offset: int = 0) -> MappedFile:
        """The segment to append to, rolling to a new one when the last is full.

        Raises DiskFullError when a new segment cannot be allocated.
        """
        last = self.last_file
        if last is not None and not last.is_full:
            return last
        if last is None:
            os.makedirs(self.directory, exist_ok=True)
            create_offset = start_offset - start_offset % self.file_size
        else:
            create_offset = last.file_from_offset + self.file_size
        path = os.path.join(self.directory, segment_name(create_offset))
        if self._allocator is not None:
            next_path = os.path.join(self.directory, segment_name(create_offset + self.file_size))
            mf = self._allocator.get(path, next_path, self.file_size)
        else:
            mf = MappedFile.create(path, self.file_size)
        if self._pool is not None:
            mf.attach_write_buffer(self._pool)
        with self._lock:
            self._files = (*self._files, mf)
        return mf

    def reserve(self, offset: int, what: str) -> None:
        """Make sure the segment that will hold global ``offset`` exists or has its blocks.

        Raises DiskFullError when it has to be allocated and there is no room.
        """
        os.makedirs(self.directory, exist_ok=True)
        path = os.path.join(self.directory, segment_name(offset - offset % self.file_size))
        if not os.path.exists(path) and not is_reserved(path, self.file_size):
            reserve_file(path, self.file_size, what)

    def find(self, offset: int) -> MappedFile | None:
        """The segment holding global ``offset``, or None."""
        files = self._files
        if not files:
            return None
        first = files[0].file_from_offset
        index = (offset - first) // self.file_size
        if 0 <= index < len(files):
            mf = files[index]
            if mf.file_from_offset <= offset < mf.file_from_offset + self.file_size:
                return mf
        # Gaps are unusual; fall back to a search.
        for mf in files:
            if mf.file_from_offset <= offset < mf.file_from_offset + self.file_size:
                return mf
        return None

    # -- offsets ------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        first = self.first_file
        return first.file_from_offset if first is not None else 0

    @property
    def max_offset(self) -> int:
        """End of readable data: everything before it has reached the file.

        Without write buffers every segment but the last is full. With them,
        segments are committed in order from ``committed_where``, and a later
        segment can already hold data (a newer buffer, or direct writes once the
        pool ran dry) while an earlier one is not committed: the readable end is
        in the first segment from there that is not wholly in the file.
        """
        files = self._files
        if not files:
            return 0
        if self._pool is None:
            last = files[-1]
            return last.file_from_offset + last.read_position
        where = self.committed_where
        index = min(len(files) - 1, max(0, (where - files[0].file_from_offset) // self.file_size))
        while index > 0 and files[index].file_from_offset > where:
            index -= 1  # a gap in the segments: arithmetic overshot
        for mf in files[index:]:
            if mf.read_position < self.file_size:
                return mf.file_from_offset + mf.read_position
        last = files[-1]
        return last.file_from_offset + self.file_size

    @property
    def max_wrote_offset(self) -> int:
        last = self.last_file
        return last.file_from_offset + last.wrote_position if last is not None else 0

    # -- commit and flush ---------------------------------------------------

    def _segment_from(self, where: int) -> MappedFile | None:
        """The segment holding ``where``, else the first one after it; None past the end.

        Past the end must give None: falling back to the first segment would move
        the position backwards and make ``while flush(...)`` loops spin forever.
        """
        mf = self.find(where)
        if mf is not None:
            return mf
        # ``where`` lies before the oldest segment (deleted files) or in a gap.
        return next((f for f in self._files if f.file_from_offset > where), None)

    def commit(self, least_pages: int) -> bool:
        """Commit the segment at ``committed_where``; True if the position moved."""
        mf = self._segment_from(self.committed_where)
        if mf is None:
            return False
        position = mf.file_from_offset + mf.commit(least_pages)
        moved = position != self.committed_where
        self.committed_where = position
        return moved

    def flush(self, least_pages: int) -> bool:
        """Flush the segment at ``flushed_where``; True if the position moved.

        A segment that just filled is flushed whole before the next one is
        touched, so the flushed position never skips bytes.
        """
        mf = self._segment_from(self.flushed_where)
        if mf is None:
            return False
        position = mf.file_from_offset + mf.flush(least_pages)
        moved = position != self.flushed_where
        if moved:
            self.flush_count += 1
        self.flushed_where = position
        return moved

    def flush_all(self) -> int:
        """Flush until the flushed position reaches the readable end."""
        while self.flushed_where < self.max_offset and self.flush(0):
            pass
        return self.flushed_where

    def commit_all(self) -> int:
        while self.committed_where < self.max_wrote_offset and self.commit(0):
            pass
        return self.committed_where

    # -- truncation and deletion -------------------------------------------

    def truncate(self, offset: int, *, quiet_bytes: int) -> None:
        """Drop everything at and after global ``offset`` (recovery of a torn tail)."""
        keep = []
        for mf in self._files:
            if mf.file_from_offset + self.file_size <= offset:
                keep.append(mf)
            elif mf.file_from_offset <= offset:
                position = offset - mf.file_from_offset
                mf.zero_from(position, quiet_bytes)
                mf.set_positions(position)
                keep.append(mf)
            else:
                mf.destroy()
        with self._lock:
            self._files = tuple(keep)
        self.flushed_where = min(self.flushed_where, offset)
        self.committed_where = min(self.committed_where, offset)

    def drop_trailing_empty(self) -> None:
        """Forget empty segments after the last one holding data (prepared ahead of need)."""
        files = list(self._files)
        while len(files) > 1 and files[-1].wrote_position == 0 and files[-2].wrote_position > 0:
            files.pop().destroy()
        with self._lock:
            self._files = tuple(files)

    def delete_expired_by_time(
        self,
        expired_seconds: float,
        *,
        interval: float,
        clean_immediately: bool,
        batch_max: int,
        deletable_below: int,
    ) -> int:
        """Delete the oldest segments untouched for ``expired_seconds``; never the newest.

        With ``clean_immediately`` age does not matter (the disk is nearly full).
        Only segments wholly below ``deletable_below`` (what is flushed and
        dispatched) may go.
        """
        deleted = 0
        now = time.time()
        for mf in self._files[:-1]:
            if deleted >= batch_max or mf.file_from_offset + self.file_size > deletable_below:
                break
            if not clean_immediately and mf.last_modified + expired_seconds > now:
                break
            self._remove_first(mf)
            deleted += 1
            if interval > 0:
                time.sleep(interval)
        return deleted

    def delete_before(self, offset_is_obsolete: Callable[[MappedFile], bool]) -> int:
        """Delete leading segments (never the newest) for which the predicate holds."""
        deleted = 0
        for mf in self._files[:-1]:
            if not offset_is_obsolete(mf):
                break
            self._remove_first(mf)
            deleted += 1
        return deleted

    def _remove_first(self, mf: MappedFile) -> None:
        with self._lock:
            if not self._files or self._files[0] is not mf:
                raise StoreCorruptError(f"segment {mf.path} is not the oldest; refusing to delete")
            self._files = self._files[1:]
        mf.destroy()
        log.info("deleted segment %s", mf.path)

    def close(self) -> None:
        for mf in self._files:
            mf.close()
        self._files = ()

    def destroy(self) -> None:
        for mf in self._files:
            mf.destroy()
        self._files = ()
