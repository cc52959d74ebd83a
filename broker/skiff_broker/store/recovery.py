"""Finding the end of the commit log at start-up, and stepping over damaged records.

After a clean stop the checkpoint names the exact end, so loading is O(1).
After a crash the log is scanned from the checkpoint's ``scan_start`` (a record
below which log, consume queues and index were flushed), every record checked by
``_check_record`` (length, magic, physical offset, body CRC): the work grows with
what was written since the last checkpoint, not with the segment size. Where that
start cannot be trusted (no such field, a checkpoint another program wrote, no
valid record there, below the log's start) the scan starts, as RocketMQ's does, at
the segment whose first record is older than the checkpoint's timestamps. The
records between that segment's start and ``scan_start`` are what the scan skipped
and the old recovery checked: ``Recovered.verify_from`` and ``verify_below`` name
them, to be checked in the background (:mod:`.older_records_check`).

Invariants:

- A record is valid only if ``_check_record`` passes it: recovery, the
  dispatcher and ``skiff store check`` all decide through ``record_problem_at``
  and ``resume_after`` below, so they skip exactly the same bytes.
- A damaged stretch with valid data after it (in its segment or any later
  one) is skipped, never cut: it stays in the log, and everything after it is
  kept. Valid data resumes at the damaged record's own end when its framing
  holds, else at the next position holding a valid record (message magic,
  sane size, PHYSICALOFFSET equal to its position, body CRC) or the segment's
  closing BLANK record.
- A run of zero bytes longer than any record (``quiet_bytes``) is where writing
  stopped: nothing after it in its segment is searched for. Truncation zero-fills
  up to such a run, so together no resynchronisation can reach a record that
  was cut on purpose.
- A torn tail (nothing valid anywhere after the damage) is cut, and
  ``MappedFileQueue.truncate`` zero-fills what it cuts, so no later scan can
  resynchronise on a record that was cut on purpose.
"""

from __future__ import annotations

import dataclasses
import logging
import mmap
import struct

from ..wire.record_check import check_record, check_run
from ..wire.record_layout import (
    BLANK_MAGIC,
    MESSAGE_MAGIC,
    MIN_RECORD_SIZE,
    SIZE_MAGIC,
    SYSFLAG_OFFSET,
)
from .checkpoint import Checkpoint
from .mapped_file import MappedFile
from .mapped_file_queue import MappedFileQueue

log = logging.getLogger(__name__)

_INT = struct.Struct(">i")
_STORE_TS_V4 = struct.Struct(">q")
_MESSAGE_MAGIC_BYTES = MESSAGE_MAGIC.to_bytes(4, "big")
_BLANK_MAGIC_BYTES = BLANK_MAGIC.to_bytes(4, "big")
# Store timestamps are wall-clock milliseconds: records appended in the same
# millisecond as the checkpoint's newest flushed record, or after the clock
# stepped back, can carry a stamp no newer than it and yet not be covered by it.
# The scan therefore starts at a segment older than the checkpoint by this much
# (RocketMQ uses the same three seconds).
CHECKPOINT_MARGIN_MS = 3000
# Data is written front to back, so a run of zero bytes longer than any record
# (the largest message plus room for its header, topic and properties) is where
# writing stopped: the same rule by which truncation stops zero-filling. Past such
# a run nothing is searched for, which keeps the usual crash (a tail of zeros up
# to the segment's end) from costing a search of the whole remainder.
DEFAULT_QUIET_BYTES = 4 * 1024 * 1024 + 1024 * 1024
_ZERO_CHUNK = bytes(1024 * 1024)

Buffer = mmap.mmap | bytes


@dataclasses.dataclass(slots=True, frozen=True)
class Damage:
    """A stretch of the commit log skipped because it holds no valid record."""

    offset: int  # global offset of its first byte
    length: int
    records: int  # damaged records in it as far as can be told; 0 for a segment's padding
    reason: str


@dataclasses.dataclass(slots=True)
class ScanResult:
    end: int  # global offset where valid data ends
    records: int
    bytes_scanned: int
    problem: str | None  # why valid data ended before the last segment's end, if it did
    damages: list[Damage] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(slots=True)
class SegmentScan:
    end: int  # file position where valid data stops, or where the closing BLANK starts
    records: int
    blank: bool  # ended with its closing BLANK record
    problem: str | None  # what stopped the scan with nothing valid after it (None: zeros)
    first_valid: int  # position of the first valid record or BLANK, -1 if none
    damages: list[Damage]


def record_problem_at(
    buf: Buffer, view: memoryview, pos: int, limit: int, base: int, check_crc: bool
) -> str | None:
    """Why ``buf[pos:]`` does not start a valid message record, or None if it does.

    ``base`` is the global offset of ``buf[0]``; ``limit`` the end of usable data.
    """
    if pos + 8 > limit:
        return f"no record at {base + pos} (cut short)"
    size, magic = SIZE_MAGIC.unpack_from(buf, pos)
    if magic != MESSAGE_MAGIC:
        return f"no record at {base + pos} (magic {magic:#x})"
    return _check_record(buf, view, pos, size, limit, base, check_crc)  # type: ignore[arg-type]


def blank_at(buf: Buffer, pos: int, limit: int) -> bool:
    """True if ``buf[pos:]`` is a segment's closing BLANK record (``limit`` = segment end)."""
    if pos + 8 > limit:
        return False
    size, magic = SIZE_MAGIC.unpack_from(buf, pos)
    return magic == BLANK_MAGIC and size == limit - pos


def resume_after(
    buf: Buffer,
    view: memoryview,
    pos: int,
    limit: int,
    base: int,
    check_crc: bool,
    quiet_bytes: int | None = None,
) -> int | None:
    """Where valid data resumes after the damaged record at ``pos``, or None.

    The answer is the next valid message record or the segment's closing BLANK
    within ``buf[:limit]``. A record whose own lengths agree with its size is
    stepped over by that size if a valid record or BLANK follows; otherwise the
    next one is searched for by its magic (``find`` runs in C). With
    ``quiet_bytes``, the search ends at the first run of that many zero bytes:
    writing stopped there, so nothing after it can be a record still in the log.
    """
    if pos + 8 <= limit:
        size = _INT.unpack_from(buf, pos)[0]
        after = pos + size
        if (
            size >= MIN_RECORD_SIZE
            and after + 8 <= limit
            and _check_record(buf, view, pos, size, limit, base, False) is None  # type: ignore[arg-type]
            and (
                blank_at(buf, after, limit)
                or record_problem_at(buf, view, after, limit, base, check_crc) is None
            )
        ):
            return after
    search_end = limit
    if quiet_bytes is not None and limit - pos > quiet_bytes:
        quiet_at = buf.find(bytes(quiet_bytes), pos + 8, limit)
        if quiet_at >= 0:
            # A candidate starts before the zero run; its magic ends 8 bytes in.
            search_end = min(limit, quiet_at + 8)
    hit = buf.find(_MESSAGE_MAGIC_BYTES, pos + 5, search_end)
    while hit >= 0:
        candidate = hit - 4
        if record_problem_at(buf, view, candidate, limit, base, check_crc) is None:
            return candidate
        hit = buf.find(_MESSAGE_MAGIC_BYTES, hit + 1, search_end)
    # No message after it: the damage may run up to the segment's closing BLANK.
    hit = buf.find(_BLANK_MAGIC_BYTES, pos + 5, search_end)
    while hit >= 0:
        if blank_at(buf, hit - 4, limit):
            return hit - 4
        hit = buf.find(_BLANK_MAGIC_BYTES, hit + 1, search_end)
    return None


def damaged_records(buf: Buffer, pos: int, limit: int) -> int:
    """1 for a damaged message record, 0 for a segment's damaged padding (its BLANK)."""
    if pos + 8 > limit:
        return 0
    size, magic = SIZE_MAGIC.unpack_from(buf, pos)
    return 0 if magic == BLANK_MAGIC or size == limit - pos else 1


def zeros_for(mm: Buffer, pos: int, length: int) -> bool:
    """True if ``mm[pos:pos + length]`` is all zero bytes (compared a chunk at a time)."""
    end = pos + length
    while pos < end:
        step = min(len(_ZERO_CHUNK), end - pos)
        if mm[pos : pos + step] != _ZERO_CHUNK[:step]:
            return False
        pos += step
    return True


def scan_segment(
    mf: MappedFile,
    start: int,
    *,
    check_crc: bool,
    quiet_bytes: int = DEFAULT_QUIET_BYTES,
    stop: int | None = None,
) -> SegmentScan:
    """Walk records from file position ``start``, stepping over damage with valid data after it.

    With ``stop`` (a file position where a record starts), the walk ends there.
    """
    mm = mf.mapping
    limit = mf.file_size
    stop = limit if stop is None else min(stop, limit)
    base = mf.file_from_offset
    pos = start
    records = 0
    first_valid = -1
    damages: list[Damage] = []
    with memoryview(mm) as view:
        # A BLANK record may be only 8 bytes (size and magic), so those come first.
        while pos + 8 <= limit and pos < stop:
            size, magic = SIZE_MAGIC.unpack_from(mm, pos)
            if magic == MESSAGE_MAGIC:
                # The valid records from here on in one loop of the same validator;
                # the per-record check below then explains what stopped it.
                run = check_run(mm, pos, stop, base=base, check_crc=check_crc)
                if run.records:
                    if first_valid < 0:
                        first_valid = pos
                    records += run.records
                    pos = run.stop
                    continue
                problem = _check_record(mm, view, pos, size, limit, base, check_crc)
                if problem is None:
                    if first_valid < 0:
                        first_valid = pos
                    pos += size
                    records += 1
                    continue
            elif magic == BLANK_MAGIC and size == limit - pos:
                if first_valid < 0:
                    first_valid = pos
                return SegmentScan(pos, records, True, None, first_valid, damages)
            elif size == 0 and magic == 0:
                if zeros_for(mm, pos, min(quiet_bytes, limit - pos)):
                    # Writing stopped here (or the rest of the segment is blank).
                    return SegmentScan(pos, records, False, None, first_valid, damages)
                problem = None
            else:
                problem = f"no record at {base + pos} (magic {magic:#x})"
            resume = resume_after(mm, view, pos, limit, base, check_crc, quiet_bytes)
            if resume is None or blank_at(mm, resume, limit):
                # Only padding follows in this segment: later segments decide (scan_from).
                return SegmentScan(pos, records, False, problem, first_valid, damages)
            reason = problem or f"zero bytes at {base + pos} where a record belongs"
            damages.append(
                Damage(base + pos, resume - pos, damaged_records(mm, pos, limit), reason)
            )
            pos = resume
    return SegmentScan(pos, records, False, None, first_valid, damages)


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


def scan_from(
    queue: MappedFileQueue,
    first_index: int,
    *,
    check_crc: bool,
    quiet_bytes: int = DEFAULT_QUIET_BYTES,
    first_position: int = 0,
) -> ScanResult:
    """Scan segments from ``first_index`` on: valid data, the damage skipped, where data ends.

    The first segment is scanned from file position ``first_position`` (a record's start).

    Where a segment's data stops with nothing valid after it in that segment,
    the later segments decide: if one holds valid data, everything up to it is
    one damaged stretch; if none does, the log ends there (a torn tail).
    """
    files = queue.files
    if not files:
        return ScanResult(0, 0, 0, None)
    records = 0
    scanned = 0
    damages: list[Damage] = []
    # Global offset and reason where valid data stopped, while nothing valid follows yet.
    stopped: tuple[int, str | None, int] | None = None
    position = first_position
    for mf in files[first_index:]:
        seg = scan_segment(mf, position, check_crc=check_crc, quiet_bytes=quiet_bytes)
        records += seg.records
        scanned += seg.end - position
        position = 0
        found = seg.damages
        if stopped is not None:
            if seg.first_valid < 0:
                continue
            offset, reason, lost = stopped
            if found and found[0].offset == mf.file_from_offset:
                found = found[1:]  # part of the stretch that began in an earlier segment
            resume = mf.file_from_offset + seg.first_valid
            damages.append(
                Damage(offset, resume - offset, lost, reason or f"zero bytes at {offset}")
            )
            stopped = None
        damages += found
        if not seg.blank:
            lost = damaged_records(mf.mapping, seg.end, mf.file_size) if seg.problem else 1
            stopped = (mf.file_from_offset + seg.end, seg.problem, lost)
    if stopped is not None:
        return ScanResult(stopped[0], records, scanned, stopped[1], damages)
    last = files[-1]
    return ScanResult(last.file_from_offset + last.file_size, records, scanned, None, damages)


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


def checkpoint_scan_start(queue: MappedFileQueue, checkpoint: Checkpoint) -> int | None:
    """The checkpoint's ``scan_start`` if a valid message record starts there, else None.

    A start below the log's first offset, past its end or inside a record fails:
    the record check includes the PHYSICALOFFSET field, which only a record that
    really starts at that offset carries (and the body CRC).
    """
    start = checkpoint.scan_start
    if start < queue.min_offset:
        return None
    mf = queue.find(start)
    if mf is None:
        return None
    with memoryview(mf.mapping) as view:
        problem = record_problem_at(
            mf.mapping, view, start - mf.file_from_offset, mf.file_size, mf.file_from_offset, True
        )
    return start if problem is None else None


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


@dataclasses.dataclass(slots=True)
class Recovered:
    end: int  # where the commit log now ends
    redispatch_from: int  # where consume queues and index are rebuilt from
    crashed: bool  # the log was scanned (no trustworthy clean end)
    damages: list[Damage]  # stretches skipped, oldest first
    # Records the scan did not check that a scan from the segment's start would have
    # (it started at the checkpoint's scan_start): [verify_from, verify_below).
    verify_from: int = 0
    verify_below: int = 0


def describe(damages: list[Damage]) -> str:
    """One sentence naming how many records and bytes were skipped, and where."""
    records = sum(d.records for d in damages)
    size = sum(d.length for d in damages)
    where = ", ".join(f"{d.offset} ({d.length} bytes: {d.reason})" for d in damages[:20])
    more = f" and {len(damages) - 20} more" if len(damages) > 20 else ""
    return (
        f"skipped {records} damaged record(s), {size} bytes in {len(damages)} stretch(es), "
        f"at commit-log offsets {where}{more}; every valid record after them was kept"
    )


def recover_commit_log(
    queue: MappedFileQueue,
    checkpoint: Checkpoint,
    *,
    clean: bool,
    check_crc: bool,
    include_index: bool,
    quiet_bytes: int,
    scan_everything: bool = False,
) -> Recovered:
    """Set the commit log's positions: trust a clean end, else scan (from the start if asked)."""
    files = queue.files
    if not files:
        return Recovered(0, 0, not clean, [])
    damages: list[Damage] = []
    verify_from = verify_below = 0
    if (
        clean
        and not scan_everything
        and clean_end_is_valid(queue, checkpoint.clean_shutdown_offset)
    ):
        end = checkpoint.clean_shutdown_offset
        log.info("clean start: commit log ends at %d", end)
        redispatch_from = end
        crashed = False
    else:
        if clean and not scan_everything:
            log.warning("checkpoint does not match the commit log; checking every record")
        first = 0 if scan_everything else choose_scan_start(queue, checkpoint, include_index)
        segment_start = files[first].file_from_offset
        start = None if scan_everything else checkpoint_scan_start(queue, checkpoint)
        if start is None:
            if not scan_everything and checkpoint.scan_start >= 0:
                log.warning(
                    "the checkpoint's scan start %d is not where a valid record starts in "
                    "the commit log; checking every record from %d",
                    checkpoint.scan_start,
                    segment_start,
                )
            start = segment_start
        else:
            first = max(i for i, mf in enumerate(files) if mf.file_from_offset <= start)
            verify_from, verify_below = segment_start, max(segment_start, start)
        result = scan_from(
            queue,
            first,
            check_crc=check_crc,
            quiet_bytes=quiet_bytes,
            first_position=start - files[first].file_from_offset,
        )
        end = result.end
        damages = result.damages
        redispatch_from = start
        crashed = True
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
    return Recovered(end, redispatch_from, crashed, damages, verify_from, verify_below)
