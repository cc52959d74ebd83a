"""Finding the end of the commit log at start-up.

After a clean stop the checkpoint names the exact end, so loading is O(1).
After a crash the log is scanned from the segment that the checkpoint says may
hold unflushed records: every record's length, magic, physical offset and body
CRC are checked, and the log is cut at the first record that fails (a torn or
corrupt tail); nothing after it is ever returned.
"""

from __future__ import annotations

import dataclasses
import logging
import mmap
import struct

from ..wire.record_check import check_record
from ..wire.record_layout import (
    BLANK_MAGIC,
    MESSAGE_MAGIC,
    SIZE_MAGIC,
    SYSFLAG_OFFSET,
)
from .checkpoint import Checkpoint
from .mapped_file import MappedFile
from .mapped_file_queue import MappedFileQueue

log = logging.getLogger(__name__)

_INT = struct.Struct(">i")
_STORE_TS_V4 = struct.Struct(">q")
# Store timestamps are wall-clock milliseconds: records appended in the same
# millisecond as the checkpoint's newest flushed record, or after the clock
# stepped back, can carry a stamp no newer than it and yet not be covered by it.
# The scan therefore starts at a segment older than the checkpoint by this much
# (RocketMQ uses the same three seconds).
CHECKPOINT_MARGIN_MS = 3000


@dataclasses.dataclass(slots=True)
class ScanResult:
    end: int  # global offset where valid data ends
    records: int
    bytes_scanned: int
    problem: str | None  # why the scan stopped early, if it did


def scan_segment(
    mf: MappedFile, start: int, *, check_crc: bool
) -> tuple[int, int, str | None, bool]:
    """Walk records from ``start`` (file position).

    Returns (end position, record count, problem or None, ended with BLANK).
    """
    mm = mf.mapping
    limit = mf.file_size
    base = mf.file_from_offset
    pos = start
    records = 0
    with memoryview(mm) as view:
        # A BLANK record may be only 8 bytes (size and magic), so those come first.
        while pos + 8 <= limit:
            size, magic = SIZE_MAGIC.unpack_from(mm, pos)
            if magic == MESSAGE_MAGIC:
                problem = _check_record(mm, view, pos, size, limit, base, check_crc)
                if problem is not None:
                    return pos, records, problem, False
                pos += size
                records += 1
            elif magic == BLANK_MAGIC and size == limit - pos:
                return pos, records, None, True
            elif size == 0 and magic == 0:
                return pos, records, None, False
            else:
                return pos, records, f"no record at {base + pos} (magic {magic:#x})", False
    return pos, records, None, False


def _check_record(
    mm: mmap.mmap,
    view: memoryview,
    pos: int,
    size: int,
    limit: int,
    base: int,
    check_crc: bool,
) -> str | None:
    """Why the message record at ``pos`` is not whole and valid, or None if it is.

    ``wire.record_check`` decides, as it does for every door: what a door
    accepted, this keeps.
    """
    checked = check_record(mm, pos, limit, base=base, check_crc=check_crc)
    return None if isinstance(checked, int) else str(checked)


def first_store_timestamp(mf: MappedFile) -> int:
    """STORETIMESTAMP of a segment's first record, or -1 if it has none."""
    mm = mf.mapping
    _, magic = SIZE_MAGIC.unpack_from(mm, 0)
    if magic != MESSAGE_MAGIC:
        return -1
    sys_flag = _INT.unpack_from(mm, SYSFLAG_OFFSET)[0]
    born_host_len = 20 if sys_flag & 0x10 else 8
    return _STORE_TS_V4.unpack_from(mm, 48 + born_host_len)[0]


def scan_from(queue: MappedFileQueue, first_index: int, *, check_crc: bool) -> ScanResult:
    """Scan segments from ``first_index`` on, to the first end or problem."""
    files = queue.files
    if not files:
        return ScanResult(0, 0, 0, None)
    records = 0
    scanned = 0
    for mf in files[first_index:]:
        end, count, problem, blank = scan_segment(mf, 0, check_crc=check_crc)
        records += count
        scanned += end
        if not blank:
            return ScanResult(mf.file_from_offset + end, records, scanned, problem)
    last = files[-1]
    return ScanResult(last.file_from_offset + last.file_size, records, scanned, None)


def choose_scan_start(queue: MappedFileQueue, checkpoint: Checkpoint, include_index: bool) -> int:
    """Index of the newest segment whose first record is older than the checkpoint (with margin)."""
    files = queue.files
    threshold = checkpoint.min_timestamp(include_index=include_index) - CHECKPOINT_MARGIN_MS
    if threshold <= 0:
        return 0
    for index in range(len(files) - 1, -1, -1):
        stamp = first_store_timestamp(files[index])
        if 0 <= stamp <= threshold:
            return index
    return 0


def clean_end_is_valid(queue: MappedFileQueue, offset: int) -> bool:
    """True if ``offset`` (from a clean stop) lies at the end of written data."""
    if offset < 0:
        return False
    files = queue.files
    if not files:
        return offset == 0
    if offset == files[-1].file_from_offset + queue.file_size:
        return True
    mf = queue.find(offset)
    if mf is None:
        return False
    # Nothing may follow the end, at a segment's start as anywhere else: a stale
    # checkpoint must not make the truncation below delete real records.
    position = offset - mf.file_from_offset
    tail = mf.mapping[position : position + 8]
    return tail == bytes(len(tail))


def recover_commit_log(
    queue: MappedFileQueue,
    checkpoint: Checkpoint,
    *,
    clean: bool,
    check_crc: bool,
    include_index: bool,
    quiet_bytes: int,
) -> tuple[int, int]:
    """Set the commit log's positions; returns (end offset, offset to re-dispatch from)."""
    files = queue.files
    if not files:
        return 0, 0
    if clean and clean_end_is_valid(queue, checkpoint.clean_shutdown_offset):
        end = checkpoint.clean_shutdown_offset
        log.info("clean start: commit log ends at %d", end)
        redispatch_from = end
    else:
        if clean:
            log.warning("checkpoint does not match the commit log; checking every record")
        first = choose_scan_start(queue, checkpoint, include_index)
        result = scan_from(queue, first, check_crc=check_crc)
        end = result.end
        redispatch_from = files[first].file_from_offset if files else 0
        if result.problem:
            log.warning("commit log cut at %d: %s", end, result.problem)
        log.info(
            "recovered after a crash: %d records checked from %d, commit log ends at %d",
            result.records,
            redispatch_from,
            end,
        )
    queue.truncate(end, quiet_bytes=quiet_bytes)
    queue.drop_trailing_empty()
    queue.flushed_where = queue.committed_where = end
    return end, redispatch_from
