"""The one validator of commit-log records.

Invariant: a record ``check_record`` accepts is whole and readable by every
reader, and recovery keeps it byte for byte: every length agrees with
TOTALSIZE, the topic is non-empty UTF-8 whose last byte is not NUL, the
properties are empty or UTF-8 ``name\\x01value\\x02`` pairs (non-empty name,
exactly one ``\\x01`` each, so they end in ``\\x02``), the body matches its CRC
(unless the caller skips it) and, when the caller knows where the bytes sit in
the log, PHYSICALOFFSET names that place. Both write doors, replication,
recovery, dispatch, fetch and the clients' decoder ask this module, so what one
accepts none of the others rejects.

Why these rules: the writer fills a record front to back after its size
field and only the body is under the CRC, so a record torn by a crash ends in
zero bytes where its topic or properties belong; a topic never ends in NUL and
properties end in their separator, which is how such a record is recognised.

``check_run`` walks many records in one loop (a fetch, an append, a
replicated run): the usual record (IPv4 hosts, ASCII topic and properties) is
checked inline, its topic and properties with one C-level pattern match in
place; anything else goes through ``check_record``, with the same verdict.

A reader that knows where a long run's records start (a fetch, from the consume
queue's units; a client, from one walk over the sizes) hands ``check_run`` those
starts, and the framing rules then run as numpy expressions over every record at
once, with the same verdict, record and count: past the first record they do not
accept, the loop decides.

``text=False`` leaves out every rule about the bytes of the topic and the
properties (UTF-8, name/value pairs, the torn-write marks) and keeps the
framing, the offsets and the body CRC. It is for bytes whose text was checked when they
entered the log (a fetch from the broker's own log, a client reading what a
broker fetched), where the per-record pattern match would cost more than
half of the read path; readers there decode text leniently.
"""

from __future__ import annotations

import mmap
import re
import struct
import typing

import numpy as np

from .body_crc import crc32
from .field_arrays import fields_at
from .record_layout import (
    BLANK_MAGIC,
    BODY_CRC_OFFSET,
    HOST_V6_BITS,
    INT,
    MESSAGE_MAGIC,
    MIN_RECORD_SIZE,
    PHYSICAL_OFFSET_OFFSET,
    PLAIN_HEADER,
    SHORT,
    SIZE_MAGIC,
    SYSFLAG_OFFSET,
    header_struct,
)

# bytes, bytearray, memoryview or mmap: anything struct and re read in place.
Buffer: typing.TypeAlias = "bytes | bytearray | memoryview | mmap.mmap"


class RecordProblem(typing.NamedTuple):
    """Why a record is refused."""

    reason: str
    # Where the record starts: a log offset when the caller gave one, else a byte index.
    position: int
    # The record's TOTALSIZE agrees with its fields, so the records after it can be found.
    framing_holds: bool
    # The bytes end before the record does: more of it may still come (or a tail was torn).
    incomplete: bool = False

    def __str__(self) -> str:
        return f"record at {self.position}: {self.reason}"


class RunCheck(typing.NamedTuple):
    """How far a run of records checked out."""

    stop: int  # index of the first record not accepted, or the run's end
    records: int  # records accepted before ``stop``
    problem: RecordProblem | None  # why it stopped before the end


# TOTALSIZE, MAGIC, BODYCRC, PHYSICALOFFSET, SYSFLAG .. BODYLENGTH of a record with
# IPv4 hosts, skipping the rest: what the inline check reads.
_FAST = struct.Struct(">iIi16xqi44xi")
assert _FAST.size == PLAIN_HEADER.size
_PLAIN_SIZE = PLAIN_HEADER.size
# The usual record's TOPIC, PROPERTIESLENGTH and PROPERTIES (ASCII), matched in
# place by one pattern per topic length: no slicing, one C call per record.
_ASCII_PAIRS = rb"(?:[\x00\x03-\x7f]++\x01[\x00\x03-\x7f]*+\x02)*+"


class _AsciiTails(dict[int, typing.Callable[..., typing.Any]]):
    """The pattern for each topic length, compiled when that length is first met."""

    def __missing__(self, topic_length: int) -> typing.Callable[..., typing.Any]:
        if topic_length == 0:
            match = re.compile(rb"(?!)").fullmatch  # an empty topic: the slow path says why
        else:
            # Possessive: nothing to backtrack into, which keeps the match cheap.
            match = re.compile(
                rb"[\x00-\x7f]{%d}[\x01-\x7f].." % (topic_length - 1) + _ASCII_PAIRS, re.DOTALL
            ).fullmatch
        self[topic_length] = match
        return match


_ASCII_TAILS = _AsciiTails()
# Properties at byte level; UTF-8 is checked apart.
_PROPERTIES = re.compile(rb"(?:[^\x01\x02]+\x01[^\x01\x02]*\x02)*").fullmatch
_PAIR = re.compile(rb"([^\x02]*)(\x02|$)")


def check_record(
    buf: Buffer,
    pos: int,
    end: int,
    *,
    base: int | None = None,
    check_crc: bool = True,
    text: bool = True,
) -> int | RecordProblem:
    """The size of the message record at ``buf[pos:]`` (which must not pass ``end``).

    Or the problem that makes it unacceptable. With ``base`` (the log offset of
    ``buf[0]``) its PHYSICALOFFSET must equal ``base + pos`` and problems name
    log offsets. Every length is checked before it is used, so a damaged field
    only fails the record, never sends a read past ``end``.
    """
    where = pos if base is None else base + pos
    if pos + 8 > end:
        return RecordProblem(
            f"it is cut short: only {end - pos} bytes, not even a size and magic",
            where,
            False,
            True,
        )
    size, magic = SIZE_MAGIC.unpack_from(buf, pos)
    if magic != MESSAGE_MAGIC:
        return RecordProblem(f"magic {magic:#x} is not a message record's", where, False)
    if size < MIN_RECORD_SIZE:
        return RecordProblem(f"size {size} is impossible", where, False)
    if pos + size > end:
        return RecordProblem(
            f"it is cut short: size {size} runs past the {end - pos} bytes there",
            where,
            False,
            True,
        )
    # At least MIN_RECORD_SIZE bytes are there: the plain header's fields in one read.
    _, _, crc, physical, sys_flag, body_length = _FAST.unpack_from(buf, pos)
    record_end = pos + size
    if sys_flag & HOST_V6_BITS:
        header_size = header_struct(sys_flag).size
        if header_size + 3 > size:
            return RecordProblem(f"size {size} is too small for its hosts", where, False)
        body_length = INT.unpack_from(buf, pos + header_size - 4)[0]
    else:
        header_size = _PLAIN_SIZE
    topic_at = pos + header_size + body_length
    if body_length < 0 or topic_at + 3 > record_end:
        return RecordProblem(f"body length {body_length} does not fit size {size}", where, False)
    topic_length = buf[topic_at]
    if topic_at + 3 + topic_length > record_end:
        return RecordProblem(f"topic length {topic_length} does not fit size {size}", where, False)
    properties_at = topic_at + 3 + topic_length
    properties_length = SHORT.unpack_from(buf, properties_at - 2)[0]
    if properties_at + properties_length != record_end:
        return RecordProblem(
            f"properties length {properties_length} does not add up to size {size}", where, False
        )
    # From here on the size is trustworthy: the record can be stepped over.
    if base is not None and physical != where:
        return RecordProblem(f"it claims offset {physical}", where, True)
    if not text:
        pass
    elif topic_length == 0:
        return RecordProblem("its topic is empty", where, True)
    elif buf[properties_at - 3] == 0 or (properties_length and buf[record_end - 1] != 2):
        return RecordProblem(
            "it is incomplete (topic or properties not written: a topic never ends in NUL, "
            "properties end in \\x02)",
            where,
            True,
        )
    elif not _ASCII_TAILS[topic_length](buf, topic_at + 1, record_end):
        text_problem = _text_problem(buf, topic_at, properties_at, record_end, where)
        if text_problem is not None:
            return text_problem
    if check_crc:
        body_at = pos + header_size
        # A temporary view: released as soon as the CRC is taken (an mmap may close later).
        body = (buf if buf.__class__ is memoryview else memoryview(buf))[body_at:topic_at]
        if crc32(body) & 0x7FFFFFFF != crc:
            return RecordProblem("it fails its body CRC", where, True)
    return size


def _text_problem(
    buf: Buffer, topic_at: int, properties_at: int, record_end: int, where: int
) -> RecordProblem | None:
    """What is wrong with a record's topic or properties beyond ASCII, if anything."""
    topic = bytes(buf[topic_at + 1 : properties_at - 2])
    try:
        topic.decode()
    except UnicodeDecodeError as exc:
        return RecordProblem(
            f"its topic is not UTF-8 (byte {topic_at + 1 + exc.start})", where, True
        )
    properties = bytes(buf[properties_at:record_end])
    if not _PROPERTIES(properties):
        return RecordProblem(
            f"its properties are not name\\x01value\\x02 pairs "
            f"(byte {properties_at + _first_bad_pair(properties)})",
            where,
            True,
        )
    try:
        properties.decode()
    except UnicodeDecodeError as exc:
        return RecordProblem(
            f"its properties are not UTF-8 (byte {properties_at + exc.start})", where, True
        )
    return None


def _first_bad_pair(properties: bytes) -> int:
    """Index in ``properties`` of the first pair that is not ``name\\x01value\\x02``."""
    at = 0
    for match in _PAIR.finditer(properties):
        pair, separator = match.group(1), match.group(2)
        if not pair and not separator:
            break
        if not separator or pair.count(b"\x01") != 1 or pair.startswith(b"\x01"):
            return at
        at = match.end()
    return at


def check_run(
    buf: Buffer,
    start: int,
    end: int,
    *,
    base: int | None = None,
    check_crc: bool = True,
    text: bool = True,
    starts: np.ndarray | None = None,
) -> RunCheck:
    """Check the records back to back in ``buf[start:end]``; stop at the first problem.

    A BLANK record or zeros are a problem here too (they are not messages):
    callers that walk segments look at ``problem`` and the bytes at ``stop``.
    ``starts`` (with ``text=False``) says where the caller expects the records to start,
    ``start`` first (a consume queue's units, or :func:`record_starts`): a long run is
    then checked all at once. It is only a guess: the verdict is the same without it.
    """
    if not text:
        return _check_run_framing(buf, start, end, base, check_crc, starts)
    unpack = _FAST.unpack_from
    short = SHORT.unpack_from
    ascii_tails = _ASCII_TAILS
    crc_of = crc32
    last_header = end - _PLAIN_SIZE - 3
    pos = start
    records = 0
    with memoryview(buf) as view:
        # Once per record on the hot paths: every operation here is paid for
        # hundreds of thousands of times a second.
        while pos < end:
            if pos <= last_header:
                size, magic, crc, physical, sys_flag, body_length = unpack(buf, pos)
                topic_at = pos + _PLAIN_SIZE + body_length
                record_end = pos + size
                if (
                    magic == MESSAGE_MAGIC
                    and not sys_flag & HOST_V6_BITS
                    and body_length >= 0
                    and topic_at + 3 <= record_end <= end
                    and (base is None or physical == base + pos)
                ):
                    topic_length = buf[topic_at]
                    properties_at = topic_at + 3 + topic_length
                    if (
                        properties_at <= record_end
                        and properties_at + short(buf, properties_at - 2)[0] == record_end
                        and ascii_tails[topic_length](buf, topic_at + 1, record_end)
                        and (
                            not check_crc
                            or crc_of(view[topic_at - body_length : topic_at]) & 0x7FFFFFFF == crc
                        )
                    ):
                        pos = record_end
                        records += 1
                        continue
            checked = check_record(buf, pos, end, base=base, check_crc=check_crc)
            if checked.__class__ is not int:
                return RunCheck(pos, records, checked)  # type: ignore[arg-type]
            pos += checked
            records += 1
    return RunCheck(pos, records, None)


def _check_run_framing(
    buf: Buffer,
    start: int,
    end: int,
    base: int | None,
    check_crc: bool,
    starts: np.ndarray | None,
) -> RunCheck:
    """``check_run`` with ``text=False``: its own loop, the read path's, kept lean.

    With ``starts`` for a long run, ``_framed_prefix`` first applies the loop's rules to
    every record at once; the loop takes over where that stops (the run's end, normally).
    """
    unpack = _FAST.unpack_from
    short = SHORT.unpack_from
    crc_of = crc32
    last_header = end - _PLAIN_SIZE - 3
    # PHYSICALOFFSET minus position is the same for every record of the run.
    shift = base
    pos = start
    records = 0
    with memoryview(buf) as view:
        if starts is not None and len(starts) >= _VECTOR_MIN_RECORDS and starts[0] == start:
            records, pos = _framed_prefix(view, starts, end, shift, check_crc)
        while pos < end:
            if pos <= last_header:
                size, magic, crc, physical, sys_flag, body_length = unpack(buf, pos)
                topic_at = pos + _PLAIN_SIZE + body_length
                record_end = pos + size
                if (
                    magic == MESSAGE_MAGIC
                    and not sys_flag & HOST_V6_BITS
                    and body_length >= 0
                    and topic_at + 3 <= record_end <= end
                    and (shift is None or physical - pos == shift)
                ):
                    properties_at = topic_at + 3 + buf[topic_at]
                    if (
                        properties_at <= record_end
                        and properties_at + short(buf, properties_at - 2)[0] == record_end
                        and (
                            not check_crc
                            or crc_of(view[topic_at - body_length : topic_at]) & 0x7FFFFFFF == crc
                        )
                    ):
                        pos = record_end
                        records += 1
                        continue
            checked = check_record(buf, pos, end, base=base, check_crc=check_crc, text=False)
            if checked.__class__ is not int:
                return RunCheck(pos, records, checked)  # type: ignore[arg-type]
            pos += checked
            records += 1
    return RunCheck(pos, records, None)


# Records from which ``_framed_prefix`` checks a run: below it numpy's fixed cost per
# call outweighs the loop's per record.
_VECTOR_MIN_RECORDS = 256


def record_starts(buf: Buffer, start: int, end: int) -> np.ndarray:
    """Where the records of ``buf[start:end]`` start if each TOTALSIZE is right, up to a
    size no record can have (``check_run`` says why) or the run's end: the ``starts``
    of a run nothing else locates."""
    size_of = INT.unpack_from
    found: list[int] = []
    append = found.append
    pos = start
    last = end - MIN_RECORD_SIZE
    while pos <= last:
        size = size_of(buf, pos)[0]
        if size < MIN_RECORD_SIZE:
            break
        append(pos)
        pos += size
    return np.array(found, dtype=np.int64)


def _framed_prefix(
    view: memoryview, starts: np.ndarray, end: int, shift: int | None, check_crc: bool
) -> tuple[int, int]:
    """How many records from ``starts[0]`` the framing loop's inline rules accept one after
    another, and where the first one they do not (or the run's end) is: the loop's verdict
    on those records, reached with one numpy expression per rule instead of one Python
    step per record.

    A record an inline rule sends to ``check_record`` (IPv6 hosts, or a problem), and a
    record that does not end where the next of ``starts`` begins, are left to the loop,
    which then goes on exactly as it would have.
    """

    if end < _PLAIN_SIZE + 3:
        return 0, int(starts[0])  # not one whole header: the loop says what is wrong

    def field(positions: np.ndarray, dtype: str) -> np.ndarray:
        return fields_at(view, end, positions, dtype)

    # Every rule reads only bytes it has shown are before ``end``; a record that fails an
    # earlier rule reads its later fields at index 0 instead, and is refused anyway.
    ok = (starts >= 0) & (starts <= end - _PLAIN_SIZE - 3)
    at = np.where(ok, starts, 0)
    size = field(at, ">i4")
    body_length = field(at + (_PLAIN_SIZE - 4), ">i4")
    topic_at = at + _PLAIN_SIZE + body_length
    record_end = at + size
    ok &= (
        (field(at + 4, ">u4") == MESSAGE_MAGIC)
        & (field(at + SYSFLAG_OFFSET, ">i4") & HOST_V6_BITS == 0)
        & (body_length >= 0)
        & (topic_at + 3 <= record_end)
        & (record_end <= end)
    )
    if shift is not None:
        ok &= field(at + PHYSICAL_OFFSET_OFFSET, ">i8") - at == shift
    properties_at = np.where(ok, topic_at + 3, 3)
    properties_at += field(properties_at - 3, ">u1")
    ok &= properties_at <= record_end
    ok &= properties_at + field(np.where(ok, properties_at - 2, 0), ">u2") == record_end
    # The loop steps from each record it accepts to that record's end: the run is the
    # loop's again after the first record that does not end where the next one starts.
    ok[1:] &= record_end[:-1] == starts[1:]
    accepted = len(ok) if ok.all() else int(np.argmin(ok))
    if check_crc and accepted:
        # One CRC call per body, the iteration in C: no Python step per record.
        bodies = map(slice, (at[:accepted] + _PLAIN_SIZE).tolist(), topic_at[:accepted].tolist())
        crcs = np.fromiter(
            map(crc32, map(view.__getitem__, bodies)), dtype=np.int64, count=accepted
        )
        matched = (crcs & 0x7FFFFFFF) == field(at[:accepted] + BODY_CRC_OFFSET, ">i4")
        if not matched.all():
            accepted = int(np.argmin(matched))
    if not accepted:
        return 0, int(starts[0])
    return accepted, int(record_end[accepted - 1])


def is_blank(buf: Buffer, pos: int, end: int, segment_end: int) -> bool:
    """True if a BLANK record starts at ``pos`` and reaches ``segment_end`` (an index in buf)."""
    if pos + 8 > end:
        return False
    size, magic = SIZE_MAGIC.unpack_from(buf, pos)
    return magic == BLANK_MAGIC and size == segment_end - pos
