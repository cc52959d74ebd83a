"""Consume-queue units a read found pointing at no record of theirs, and reads that met
a record retention deleted.

Invariants:

- A unit is judged by recovery's quick check (``queue_check.unit_problem``): its
  commit-log offset starts a record of its queue, at its queue offset, with its size.
- A unit that fails is mended once, under one lock, with one WARNING: rewritten to
  point at its record when the log between its neighbours' records holds it, else
  made a blank unit that every reader steps over. Either way the next read of it
  passes, so no reader meets it again. A unit that sits where its record belongs
  (in the log, between its neighbours' records) but whose record is damaged is left
  as it is: that is a damaged record, which reads skip and report as before.
- "Deleted by retention" is said of a unit only if its record lies below the commit
  log's first offset and the unit sits in order between its neighbours (a damaged
  offset can be small too); the offset to go on from is then after the one asked for.
"""

from __future__ import annotations

import logging
import struct
import threading
from collections.abc import Callable

from .commit_log import CommitLog
from .consume_queue import BLANK_UNIT_SIZE, ConsumeQueue
from .dispatcher import request_of
from .hashing import tag_hash
from .message import BLANK_MAGIC, MESSAGE_MAGIC
from .queue_check import unit_problem
from .recovery import record_problem_at

log = logging.getLogger(__name__)

# TOTALSIZE, MAGIC, BODYCRC, QUEUEID, FLAG, QUEUEOFFSET, PHYSICALOFFSET
_HEAD = struct.Struct(">iIiiiqq")
# The most of the log searched for a unit's record; past it the unit is stepped over.
MAX_SEARCH_BYTES = 64 * 1024 * 1024
# Units looked at past a bad one for the next real unit (the search's end).
_NEXT_UNITS = 64

# topic, queue id, units mended, of them rebuilt, the first one's reason
RepairListener = Callable[[str, int, int, int, str], None]


class UnitMender:
    """Mends the units of one store's consume queues that reads find bad."""

    def __init__(self, commit_log: CommitLog) -> None:
        self.commit_log = commit_log
        self._lock = threading.Lock()
        # Set by the store: told of every repair (the damage history).
        self.on_repair: RepairListener | None = None

    def problem(self, cq: ConsumeQueue, queue_offset: int, physical: int, size: int) -> str | None:
        """Recovery's quick check of one unit: None when it points at its record."""
        log_queue = self.commit_log.queue
        return unit_problem(log_queue, self.commit_log.max_offset, cq, queue_offset, physical, size)

    def deleted_by_retention(self, cq: ConsumeQueue, queue_offset: int, physical: int) -> bool:
        """Whether the record of the unit at ``queue_offset`` (at ``physical``) is gone
        because retention deleted the log there."""
        if not 0 <= physical < self.commit_log.min_offset:
            return False
        before = cq.real_unit_before(queue_offset)
        if before is not None and before[0] >= physical:
            return False
        after = self._real_unit_after(cq, queue_offset)
        return after is None or after[1] > physical

    def first_kept(self, cq: ConsumeQueue, queue_offset: int) -> int:
        """Where a reader at ``queue_offset``, whose record retention deleted, goes on:
        the queue's first unit whose record is still in the log, and in any case after
        ``queue_offset`` (the queue's own bounds may not say so yet)."""
        kept = cq.first_unit_from(self.commit_log.min_offset)
        return max(kept, queue_offset + 1)

    def mend(self, cq: ConsumeQueue, queue_offset: int) -> tuple[int, int, int] | None:
        """Make the unit at ``queue_offset`` sound; returns it as it is now, or None when
        it is blank (stepped over) or gone."""
        with self._lock:
            try:
                return self._mend(cq, queue_offset)
            except ValueError:
                return None  # its file was deleted by retention meanwhile

    def _mend(self, cq: ConsumeQueue, queue_offset: int) -> tuple[int, int, int] | None:
        unit = cq.raw_unit(queue_offset)
        if unit is None or unit[1] == BLANK_UNIT_SIZE:
            return None
        physical, size, _ = unit
        problem = self.problem(cq, queue_offset, physical, size)
        if problem is None:
            return unit  # sound: mended by another reader, or its record itself is bad
        found = self._find_record(cq, queue_offset)
        if found is not None:
            cq.rewrite_unit(queue_offset, *found)
            what = f"rebuilt from the commit log (its record is at {found[0]})"
        elif self._in_place(cq, queue_offset, physical, size):
            # Its record is damaged, not the unit: reads skip that record as they do any
            # damaged one, and ``store check --repair`` deals with it.
            return unit
        else:
            cq.blank_unit(queue_offset)
            what = (
                "stepped over: its record is not in the log between its neighbours'; "
                "run `skiff store check` on a stopped copy for the rest of the queue"
            )
        log.warning("consume queue %s/%d: %s; %s", cq.topic, cq.queue_id, problem, what)
        if self.on_repair is not None:
            self.on_repair(cq.topic, cq.queue_id, 1, int(found is not None), problem)
        return found

    def _in_place(self, cq: ConsumeQueue, queue_offset: int, physical: int, size: int) -> bool:
        """Whether a unit lies in the log, after the record of the unit before it and
        before the next one's: where its record would be if the unit is right."""
        if physical < self.commit_log.min_offset or physical + size > self.commit_log.max_offset:
            return False
        before = self._real_unit_before(cq, queue_offset)
        if before is not None and before[1] + before[2] > physical:
            return False
        after = self._real_unit_after(cq, queue_offset)
        return after is None or physical + size <= after[1]

    def _real_unit_after(self, cq: ConsumeQueue, queue_offset: int) -> tuple[int, int, int] | None:
        """(queue offset, commit-log offset, size) of the nearest real unit after one."""
        end = min(cq.max_offset, queue_offset + 1 + _NEXT_UNITS)
        for index in range(queue_offset + 1, end):
            unit = cq.raw_unit(index)
            if unit is not None and unit[1] != BLANK_UNIT_SIZE:
                return index, unit[0], unit[1]
        return None

    def _real_unit_before(self, cq: ConsumeQueue, queue_offset: int) -> tuple[int, int, int] | None:
        """:meth:`_real_unit_after`, looking back."""
        for index in range(
            queue_offset - 1, max(cq.min_offset, queue_offset - _NEXT_UNITS) - 1, -1
        ):
            unit = cq.raw_unit(index)
            if unit is not None and unit[1] != BLANK_UNIT_SIZE:
                return index, unit[0], unit[1]
        return None

    def _find_record(self, cq: ConsumeQueue, queue_offset: int) -> tuple[int, int, int] | None:
        """(offset, size, tag hash) of the record of ``cq`` at ``queue_offset``, searched
        for in the log between the records of the sound units around it."""
        start = self.commit_log.min_offset
        before = self._real_unit_before(cq, queue_offset)
        if before is not None and self.problem(cq, *before) is None:
            start = max(start, before[1] + before[2])
        end = self.commit_log.max_offset
        after = self._real_unit_after(cq, queue_offset)
        if after is not None and self.problem(cq, *after) is None:
            end = min(end, after[1])
        if end - start > MAX_SEARCH_BYTES or start >= end:
            return None
        log_queue = self.commit_log.queue
        position = start
        while position < end:
            mf = log_queue.find(position)
            if mf is None:
                return None
            mm = mf.mapping
            at = position - mf.file_from_offset
            limit = min(mf.file_size, end - mf.file_from_offset)
            while at + _HEAD.size <= limit:
                size, magic, _, queue_id, _, record_queue_offset, claimed = _HEAD.unpack_from(
                    mm, at
                )
                if magic == BLANK_MAGIC:
                    break  # the segment's end
                if (
                    magic != MESSAGE_MAGIC
                    or size < _HEAD.size
                    or claimed != position
                    or at + size > limit
                ):
                    return None  # the log is damaged here too: left to store check
                if queue_id == cq.queue_id and record_queue_offset == queue_offset:
                    with memoryview(mm) as view:
                        damaged = record_problem_at(mm, view, at, limit, mf.file_from_offset, True)
                    if damaged is not None:
                        return None
                    request = request_of(mm, at, size, {})  # type: ignore[arg-type]
                    if request.topic == cq.topic:
                        return position, size, tag_hash(request.tags)
                at += size
                position += size
            position = mf.file_from_offset + mf.file_size
        return None
