"""One topic/queue's index into the commit log: 20-byte units in fixed-size files.

Unit ``n`` (the message at queue offset ``n``) sits at byte ``20 * n`` of the
queue's byte stream and holds the record's commit-log offset (8), size (4) and
tag hash (8). Files are named by the byte offset of their first unit.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
from collections.abc import Callable, Iterator

import numpy as np

from .mapped_file_queue import MappedFileQueue

log = logging.getLogger(__name__)

UNIT = struct.Struct(">qiq")
UNIT_SIZE = UNIT.size
# Fills positions that hold no message (before a queue's first unit, or a gap),
# so that every written unit has a non-zero size and the end of data is the
# first all-zero unit.
BLANK_UNIT_SIZE = 0x7FFFFFFF
_BLANK_UNIT = UNIT.pack(0, BLANK_UNIT_SIZE, 0)
# The same unit as numpy reads it, for reads that take thousands of units at once.
UNIT_DTYPE = np.dtype([("physical", ">i8"), ("size", ">i4"), ("tag_code", ">i8")])
assert UNIT_DTYPE.itemsize == UNIT_SIZE


class ConsumeQueue:
    def __init__(self, topic: str, queue_id: int, root_dir: str, units_per_file: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.queue = MappedFileQueue(
            os.path.join(root_dir, topic, str(queue_id)), units_per_file * UNIT_SIZE
        )
        self.units_per_file = units_per_file
        # End (offset + size) of the newest record indexed here.
        self.max_physical_offset = 0
        self._min_logical_offset = 0
        # Byte end of the files known to exist or to have their blocks reserved.
        self._reserved_end = -1

    # -- loading ------------------------------------------------------------

    def load(self) -> None:
        """Open the files and find where the units end."""
        self.queue.load()
        files = self.queue.files
        if not files:
            return
        last = files[-1]
        last.set_positions(self._first_zero_unit(last) * UNIT_SIZE)
        self.refresh_max_physical_offset()
        self._min_logical_offset = files[0].file_from_offset // UNIT_SIZE

    @staticmethod
    def _first_zero_unit(mf) -> int:
        mm = mf.mapping
        lo, hi = 0, mf.file_size // UNIT_SIZE
        while lo < hi:
            mid = (lo + hi) // 2
            if UNIT.unpack_from(mm, mid * UNIT_SIZE)[1] == 0:
                hi = mid
            else:
                lo = mid + 1
        return lo

    # -- allocation ---------------------------------------------------------

    def reserve_through(self, first_offset: int, last_offset: int) -> None:
        """Make sure every file that units ``first_offset..last_offset`` go into has its blocks.

        Called before a write that takes those queue offsets is appended, by one
        appender at a time, so the dispatcher can always write the write's units
        (and the blank units of any gap before them). Raises DiskFullError when a
        file cannot be allocated.
        """
        end = (last_offset + 1) * UNIT_SIZE
        if end <= self._reserved_end:
            return
        file_size = self.queue.file_size
        if self._reserved_end < 0:
            last = self.queue.last_file
            self._reserved_end = last.file_from_offset + file_size if last is not None else -1
        start = self._reserved_end if self._reserved_end >= 0 else first_offset * UNIT_SIZE
        start -= start % file_size
        for file_start in range(start, end, file_size):
            self.queue.reserve(file_start, f"consume-queue file for {self.topic}/{self.queue_id}")
            self._reserved_end = file_start + file_size

    def reserved(self, end: int) -> None:
        """Files up to byte ``end`` have their blocks reserved (by the queue table)."""
        self._reserved_end = max(self._reserved_end, end)

    # -- writing ------------------------------------------------------------

    def put(self, physical_offset: int, size: int, tag_code: int, queue_offset: int) -> bool:
        """Write the unit for ``queue_offset``; a unit already present is left alone.

        Returns False if the unit was already there (a replayed dispatch).
        """
        expected = queue_offset * UNIT_SIZE
        if not self.queue.files:
            self._min_logical_offset = queue_offset
        mf = self.queue.last_file_for_append(start_offset=expected)
        current = mf.file_from_offset + mf.wrote_position
        if expected < current:
            return False
        if expected > current:
            if current != mf.file_from_offset or mf is not self.queue.first_file:
                log.warning(
                    "consume queue %s/%d expected unit %d but is at %d; filling the gap",
                    self.topic,
                    self.queue_id,
                    queue_offset,
                    current // UNIT_SIZE,
                )
            mf = self._fill_blank(current, expected)
        UNIT.pack_into(mf.write_target, mf.wrote_position, physical_offset, size, tag_code)
        mf.wrote_position += UNIT_SIZE
        self.max_physical_offset = physical_offset + size
        return True

    def put_run(
        self, queue_offset: int, physical_offsets: list[int], sizes: list[int], tag_codes: list[int]
    ) -> None:
        """Write the units of records that follow this queue's newest unit, from
        ``queue_offset`` (which must be :attr:`max_offset`): the bytes of :meth:`put` one
        by one, in one write per file."""
        expected = queue_offset * UNIT_SIZE
        if expected != self.queue.max_offset:
            raise ValueError(
                f"a run from unit {queue_offset} does not follow the newest unit of "
                f"{self.topic}/{self.queue_id} ({self.max_offset})"
            )
        units = np.empty(len(physical_offsets), UNIT_DTYPE)
        units["physical"] = physical_offsets
        units["size"] = sizes
        units["tag_code"] = tag_codes
        data = units.tobytes()
        if not self.queue.files:
            self._min_logical_offset = queue_offset
        written = 0
        with memoryview(data) as view:
            while written < len(data):
                mf = self.queue.last_file_for_append(start_offset=expected + written)
                take = min(mf.remaining, len(data) - written)
                # Readers see units only up to the new end: each file's are complete when
                # they do. A page or more is written with pwrite, outside the GIL.
                mf.append(view[written : written + take])
                written += take
        self.max_physical_offset = physical_offsets[-1] + sizes[-1]

    def _fill_blank(self, current: int, expected: int):
        while True:
            mf = self.queue.last_file_for_append(start_offset=current)
            while current < expected and not mf.is_full:
                UNIT.pack_into(mf.write_target, mf.wrote_position, 0, BLANK_UNIT_SIZE, 0)
                mf.wrote_position += UNIT_SIZE
                current += UNIT_SIZE
            if current >= expected:
                return self.queue.last_file_for_append(start_offset=current)

    # -- reading ------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        return self._min_logical_offset

    @property
    def max_offset(self) -> int:
        """One past the newest unit (the next queue offset)."""
        return self.queue.max_offset // UNIT_SIZE

    def get(self, queue_offset: int) -> tuple[int, int, int] | None:
        """(commit-log offset, size, tag code) of one message, or None."""
        units = self.read_units(queue_offset, 1)
        return units[0] if units else None

    def read_units(self, queue_offset: int, max_count: int) -> list[tuple[int, int, int]]:
        """Up to ``max_count`` units from ``queue_offset``, within one file.

        The i-th unit returned is the one at ``queue_offset + i``: the run stops
        before a blank unit, and is empty when ``queue_offset`` itself is blank,
        so a reader that counts what it got always knows its next offset.
        """
        return list(UNIT.iter_unpack(self._unit_bytes(queue_offset, max_count)))

    def unit_array(self, queue_offset: int, max_count: int) -> np.ndarray:
        """:meth:`read_units` as one array of ``UNIT_DTYPE``: the same units, no tuple each."""
        return np.frombuffer(self._unit_bytes(queue_offset, max_count), dtype=UNIT_DTYPE)

    def _unit_bytes(self, queue_offset: int, max_count: int) -> bytes:
        if queue_offset < self._min_logical_offset or queue_offset >= self.max_offset:
            return b""
        position = queue_offset * UNIT_SIZE
        mf = self.queue.find(position)
        if mf is None:
            return b""
        start = position - mf.file_from_offset
        try:
            data = mf.read(start, max_count * UNIT_SIZE)
        except ValueError:
            return b""
        usable = len(data) - len(data) % UNIT_SIZE
        # Blank units are rare and all alike: find the first one in C, not unit by unit.
        blank = data.find(_BLANK_UNIT, 0, usable)
        while blank != -1 and blank % UNIT_SIZE:
            blank = data.find(_BLANK_UNIT, blank + 1, usable)
        if blank != -1:
            usable = blank
        return data[:usable] if usable < len(data) else data

    def offset_by_time(self, timestamp_ms: int, store_timestamp_at: Callable[[int], int]) -> int:
        """First queue offset whose message was stored at or after ``timestamp_ms``."""
        lo, hi = self.min_offset, self.max_offset
        floor = lo
        while lo < hi:
            mid = (lo + hi) // 2
            unit = self._real_unit_at_or_before(mid, floor)
            stored = store_timestamp_at(unit[0]) if unit is not None else -1
            if stored >= timestamp_ms:
                hi = mid
            else:
                lo = mid + 1
        return lo

    # -- recovery and retention --------------------------------------------

    def truncate_dirty(self, physical_end: int) -> None:
        """Drop units whose record lies at or beyond ``physical_end`` (a truncated commit log)."""
        lo, hi = self.min_offset, self.max_offset
        floor = lo
        while lo < hi:
            mid = (lo + hi) // 2
            unit = self._real_unit_at_or_before(mid, floor)
            if unit is not None and unit[0] + unit[1] > physical_end:
                hi = mid
            else:
                lo = mid + 1
        if lo < self.max_offset:
            self._reserved_end = -1  # files past the cut are gone: look again
            self.queue.truncate(lo * UNIT_SIZE, quiet_bytes=1024 * 1024)
            self.max_physical_offset = 0
            for index in range(lo - 1, max(self.min_offset, lo - 64) - 1, -1):
                unit = self.get(index)
                if unit is not None:
                    self.max_physical_offset = unit[0] + unit[1]
                    break
        if not self.queue.files:
            self._min_logical_offset = 0

    def _real_unit_at_or_before(self, queue_offset: int, floor: int) -> tuple[int, int, int] | None:
        """The nearest non-blank unit at or before ``queue_offset`` (not below ``floor``).

        Binary searches judge a blank unit by the unit before it: blanks only fill
        gaps behind a newer unit, so the predicates stay monotonic across them.
        """
        for index in range(queue_offset, floor - 1, -1):
            position = index * UNIT_SIZE
            mf = self.queue.find(position)
            if mf is None:
                return None  # deleted by retention while offset_by_time was searching
            try:
                unit = UNIT.unpack_from(mf.mapping, position - mf.file_from_offset)
            except ValueError:
                return None  # the same, caught after the file was closed
            if unit[1] != BLANK_UNIT_SIZE:
                return unit
        return None

    def correct_min_offset(self, min_commit_log_offset: int) -> None:
        """Skip units whose records retention already deleted."""
        first = self.queue.first_file
        if first is None:
            return
        lo = first.file_from_offset // UNIT_SIZE
        hi = min(self.max_offset, lo + self.units_per_file)
        first_kept = self._first_unit_at_or_after(min_commit_log_offset, lo, hi)
        self._min_logical_offset = max(self._min_logical_offset, first_kept)

    def delete_expired(self, min_commit_log_offset: int) -> int:
        """Delete files whose every record is gone from the commit log; never the newest."""

        def obsolete(mf) -> bool:
            # The newest real unit decides; a blank unit's size is no record's end.
            mm = mf.mapping
            for position in range(mf.file_size - UNIT_SIZE, -1, -UNIT_SIZE):
                physical, size, _ = UNIT.unpack_from(mm, position)
                if size == 0:
                    return False
                if size != BLANK_UNIT_SIZE:
                    return physical + size <= min_commit_log_offset
            return True

        deleted = self.queue.delete_before(obsolete)
        self.correct_min_offset(min_commit_log_offset)
        return deleted

    # -- integrity (checked against the commit log by queue_check) ---------

    def units(self, start: int = 0) -> Iterator[tuple[int, int, int, int]]:
        """(queue offset, commit-log offset, size, tag code) of every unit from ``start``,
        blanks included."""
        end = self.max_offset
        for mf in self.queue.files:
            first = mf.file_from_offset // UNIT_SIZE
            lo = max(first, self._min_logical_offset, start)
            hi = min(first + mf.file_size // UNIT_SIZE, end)
            if lo >= hi:
                continue
            data = mf.mapping[(lo - first) * UNIT_SIZE : (hi - first) * UNIT_SIZE]
            for index, (physical, size, tag_code) in enumerate(UNIT.iter_unpack(data), lo):
                yield index, physical, size, tag_code

    def first_unit_from(self, physical: int) -> int:
        """The first queue offset whose record lies at or after commit-log offset ``physical``
        (judging blank units by the unit before them, as ``truncate_dirty`` does)."""
        return self._first_unit_at_or_after(physical, self.min_offset, self.max_offset)

    def _first_unit_at_or_after(self, physical: int, lo: int, hi: int) -> int:
        """Binary search in queue offsets [lo, hi) for the first whose record lies at or after
        commit-log offset ``physical``; a blank unit is judged by the real unit before it."""
        floor = lo
        while lo < hi:
            mid = (lo + hi) // 2
            unit = self._real_unit_at_or_before(mid, floor)
            if unit is not None and unit[0] >= physical:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def real_unit_before(self, queue_offset: int) -> tuple[int, int, int] | None:
        """The nearest unit before ``queue_offset`` that is not blank, or None."""
        if queue_offset <= self.min_offset:
            return None
        return self._real_unit_at_or_before(queue_offset - 1, self.min_offset)

    def raw_unit(self, queue_offset: int) -> tuple[int, int, int] | None:
        """The unit at ``queue_offset`` as written (a blank one too), None if there is none."""
        position = queue_offset * UNIT_SIZE
        mf = self.queue.find(position)
        if mf is None or queue_offset < self._min_logical_offset:
            return None
        at = position - mf.file_from_offset
        if at >= mf.wrote_position:
            return None
        return UNIT.unpack_from(mf.mapping, at)

    def rewrite_unit(self, queue_offset: int, physical: int, size: int, tag_code: int) -> None:
        """Replace one written unit in place, and get it to disk."""
        position = queue_offset * UNIT_SIZE
        mf = self.queue.find(position)
        if mf is None or position >= self.queue.max_offset:
            return
        at = position - mf.file_from_offset
        UNIT.pack_into(mf.mapping, at, physical, size, tag_code)
        page = at - at % mmap.PAGESIZE
        mf.mapping.flush(page, min(mmap.PAGESIZE, mf.file_size - page))

    def refresh_max_physical_offset(self) -> None:
        """Recompute the newest record's end from the newest real units (after repairs)."""
        end = self.max_offset
        self.max_physical_offset = 0
        for index in range(end - 1, max(self.min_offset, end - 64) - 1, -1):
            unit = self.get(index)
            if unit is not None:
                self.max_physical_offset = unit[0] + unit[1]
                break

    def blank_unit(self, queue_offset: int) -> None:
        """Make one unit a blank that readers step over (no record of it can be found)."""
        self.rewrite_unit(queue_offset, 0, BLANK_UNIT_SIZE, 0)

    def flush(self, least_pages: int) -> None:
        while self.queue.flush(least_pages):
            pass

    def close(self) -> None:
        self.queue.close()
