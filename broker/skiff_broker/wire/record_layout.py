"""Where every field of a commit-log record sits (RocketMQ's layout, big-endian).

    TOTALSIZE 4 | MAGIC 4 | BODYCRC 4 | QUEUEID 4 | FLAG 4 | QUEUEOFFSET 8 |
    PHYSICALOFFSET 8 | SYSFLAG 4 | BORNTIMESTAMP 8 | BORNHOST 8 or 20 |
    STORETIMESTAMP 8 | STOREHOST 8 or 20 | RECONSUMETIMES 4 |
    PREPARED TRANSACTION OFFSET 8 | BODYLENGTH 4 | BODY | TOPICLENGTH 1 | TOPIC |
    PROPERTIESLENGTH 2 | PROPERTIES ("name\\x01value\\x02" pairs)

A host is an IPv4 address and port (4 + 4 bytes) or, when its SYSFLAG bit is
set, an IPv6 address and port (16 + 4 bytes). A segment's unused end holds a
BLANK record: TOTALSIZE (to the segment's end) and BLANK_MAGIC, nothing else
meaningful. Every other module reads these names, never raw numbers.
"""

from __future__ import annotations

import enum
import struct

MESSAGE_MAGIC = 0xDAA320A7
BLANK_MAGIC = 0xCBD43194
# A segment's end always keeps room for a BLANK record's size and magic.
END_FILE_MIN_BLANK_LENGTH = 8

MAX_TOPIC_LENGTH = 127
MAX_PROPERTIES_LENGTH = 32767


class SysFlag(enum.IntFlag):
    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TRANSACTION_PREPARED = 0x4
    TRANSACTION_COMMIT = 0x8
    BORNHOST_V6 = 0x10
    STOREHOST_V6 = 0x20


# Plain ints for the hot paths: IntFlag arithmetic costs more than a record's checks.
COMPRESSED = 0x1
BORNHOST_V6 = 0x10
STOREHOST_V6 = 0x20
HOST_V6_BITS = BORNHOST_V6 | STOREHOST_V6

TRANSACTION_MASK = 0xC
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
# A transaction's half and its rollback take no queue offset and go into no consume
# queue: only plain messages and commits do.
UNQUEUED_TRANSACTION_TYPES = (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)


def _header_struct(born_v6: bool, store_v6: bool) -> struct.Struct:
    bh = 20 if born_v6 else 8
    sh = 20 if store_v6 else 8
    # TOTALSIZE .. BODYLENGTH; MAGIC unsigned so it reads back as the hex constant.
    return struct.Struct(f">iIiiiqqiq{bh}sq{sh}siqi")


# Indexed by (sys_flag >> 4) & 3.
_HEADERS = (
    _header_struct(False, False),
    _header_struct(True, False),
    _header_struct(False, True),
    _header_struct(True, True),
)


def header_struct(sys_flag: int) -> struct.Struct:
    """TOTALSIZE .. BODYLENGTH for a record with this SYSFLAG (its hosts' sizes)."""
    return _HEADERS[(sys_flag >> 4) & 3]


PLAIN_HEADER = _HEADERS[0]
SIZE_MAGIC = struct.Struct(">iI")
INT = struct.Struct(">i")
LONG = struct.Struct(">q")
SHORT = struct.Struct(">H")

BODY_CRC_OFFSET = 8
QUEUE_ID_OFFSET = 12
# QUEUEOFFSET and PHYSICALOFFSET are adjacent.
QUEUE_OFFSET_OFFSET = 20
PHYSICAL_OFFSET_OFFSET = 28
SYSFLAG_OFFSET = 36
BORN_TIMESTAMP_OFFSET = 40
BORN_HOST_OFFSET = 48
# STORETIMESTAMP follows BORNHOST, whose size depends on its address family.
STORE_TIMESTAMP_OFFSET = 56
STORE_TIMESTAMP_OFFSET_V6 = 68

# Header, empty body, a one-byte topic and its length, empty properties.
MIN_RECORD_SIZE = PLAIN_HEADER.size + 1 + 1 + 2


def store_timestamp_offset(sys_flag: int) -> int:
    return STORE_TIMESTAMP_OFFSET_V6 if sys_flag & BORNHOST_V6 else STORE_TIMESTAMP_OFFSET


def record_length(body_len: int, topic_len: int, properties_len: int, sys_flag: int = 0) -> int:
    return header_struct(sys_flag).size + body_len + 1 + topic_len + 2 + properties_len


def properties_start(record: bytes | bytearray | memoryview, sys_flag: int) -> int | None:
    """Where the PROPERTIES field of ``record`` (one whole record, nothing after it, whose
    SYSFLAG is ``sys_flag``) starts, found from its lengths alone; None when they do not add
    up to the record's size.

    Nothing else of the record is checked: a reader that serves the record still has it
    checked whole.
    """
    end = len(record)
    header = _HEADERS[(sys_flag >> 4) & 3].size
    if end < header + 4:
        return None
    topic_at = header + INT.unpack_from(record, header - 4)[0]
    if not header <= topic_at < end:
        return None
    start = topic_at + 3 + record[topic_at]
    if start > end or start + SHORT.unpack_from(record, start - 2)[0] != end:
        return None
    return start
