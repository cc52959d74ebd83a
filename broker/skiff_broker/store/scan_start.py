"""Where a crash recovery may start scanning the commit log: the checkpoint's ``scan_start``.

Invariants:

- ``scan_start`` is an offset where a message record starts (it is a consume-queue
  unit's), below what the commit log has flushed and what was dispatched before the
  consume queues and the index were flushed, and at or below the first unflushed unit
  of every consume queue: after a process kill or a power cut, everything below it is
  on disk in the log, the queues and the index. It only grows, except that a cut of
  the log forgets it (-1, unknown).
- A consume queue written too little to reach ``flush_consume_queue_least_pages``
  would hold the start back until the next thorough flush (a minute by default), and
  a crash would then re-scan everything written meanwhile: a queue whose first
  unflushed unit lies more than ``MAX_SCAN_LAG_BYTES`` of log below the durable end
  is flushed whole at once. Each queue is flushed so at most once per that much log.
"""

from __future__ import annotations

from .consume_queue import BLANK_UNIT_SIZE, UNIT_SIZE, ConsumeQueue
from .consume_queue_table import ConsumeQueueTable

# About a quarter of a second of re-scanning after a crash, with 100-byte records.
MAX_SCAN_LAG_BYTES = 16 * 1024 * 1024


def first_unflushed_record(cq: ConsumeQueue) -> int | None:
    """Commit-log offset of a record at or below the record of ``cq``'s first unflushed
    unit (None when every unit is flushed, or when no offset is known)."""
    files = cq.queue
    flushed = files.flushed_where
    if flushed >= files.max_wrote_offset:
        return None
    unit = cq.raw_unit(flushed // UNIT_SIZE)
    if unit is not None and unit[1] == BLANK_UNIT_SIZE:
        # A hole names no record: the real unit before it is flushed and older.
        unit = cq.real_unit_before(flushed // UNIT_SIZE)
        if unit is None:
            return 0
    return None if unit is None else unit[0]


def flush_lagging_queues(consume_queues: ConsumeQueueTable, durable_below: int) -> None:
    """Flush every queue whose unflushed units would hold the scan start far back."""
    for cq in consume_queues:
        first = first_unflushed_record(cq)
        if first is not None and first < durable_below - MAX_SCAN_LAG_BYTES:
            cq.flush(0)


def durable_scan_start(consume_queues: ConsumeQueueTable, below: int) -> int | None:
    """A record start under ``below`` (everything under it flushed and dispatched) at or
    below every queue's first unflushed unit; None when no unit says where one is."""
    start: int | None = None
    unflushed_from: int | None = None
    for cq in consume_queues:
        before = cq.real_unit_before(cq.max_offset)
        if before is not None and before[0] >= below:
            # Written to since: search (most queues are not, and need no search).
            before = cq.real_unit_before(cq.first_unit_from(below))
        if before is not None and before[0] < below:
            start = before[0] if start is None else max(start, before[0])
        first = first_unflushed_record(cq)
        if first is not None:
            unflushed_from = first if unflushed_from is None else min(unflushed_from, first)
    if start is None or (unflushed_from is not None and unflushed_from < start):
        # The first unflushed unit is itself a record start with everything flushed below.
        return unflushed_from
    return start
