"""Messages and their commit-log record layout (RocketMQ's, big-endian).

    TOTALSIZE 4 | MAGIC 4 | BODYCRC 4 | QUEUEID 4 | FLAG 4 | QUEUEOFFSET 8 |
    PHYSICALOFFSET 8 | SYSFLAG 4 | BORNTIMESTAMP 8 | BORNHOST 8 or 20 |
    STORETIMESTAMP 8 | STOREHOST 8 or 20 | RECONSUMETIMES 4 |
    PREPARED TRANSACTION OFFSET 8 | BODYLENGTH 4 | BODY | TOPICLENGTH 1 | TOPIC |
    PROPERTIESLENGTH 2 | PROPERTIES ("k\\x01v\\x02" pairs)

A host is an IPv4 address and port (4 + 4 bytes) or, when its SYSFLAG bit is set,
an IPv6 address and port (16 + 4 bytes).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import socket
import struct
import typing
import zlib

MESSAGE_MAGIC = 0xDAA320A7
BLANK_MAGIC = 0xCBD43194
# A segment's end always keeps room for a BLANK record's size and magic.
END_FILE_MIN_BLANK_LENGTH = 8

MAX_TOPIC_LENGTH = 127
MAX_PROPERTIES_LENGTH = 32767

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"


class SysFlag(enum.IntFlag):
    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TRANSACTION_PREPARED = 0x4
    TRANSACTION_COMMIT = 0x8
    BORNHOST_V6 = 0x10
    STOREHOST_V6 = 0x20


TRANSACTION_MASK = 0xC
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC


class Property:
    """Property names the store itself reads (RocketMQ's MessageConst)."""

    KEYS = "KEYS"
    TAGS = "TAGS"
    UNIQ_KEY = "UNIQ_KEY"
    KEY_SEPARATOR = " "


def _header_struct(born_v6: bool, store_v6: bool) -> struct.Struct:
    bh = 20 if born_v6 else 8
    sh = 20 if store_v6 else 8
    # TOTALSIZE .. BODYLENGTH; MAGIC unsigned so it reads back as the hex constant.
    return struct.Struct(f">iIiiiqqiq{bh}sq{sh}siqi")


_HEADERS = {
    (born_v6, store_v6): _header_struct(born_v6, store_v6)
    for born_v6 in (False, True)
    for store_v6 in (False, True)
}
SIZE_MAGIC = struct.Struct(">iI")
SYSFLAG_OFFSET = 36
# STORETIMESTAMP follows BORNHOST, whose size depends on its address family.
STORE_TIMESTAMP_OFFSET = 56
STORE_TIMESTAMP_OFFSET_V6 = 68
_INT = struct.Struct(">i")
_SHORT = struct.Struct(">H")


# Indexed by (sys_flag >> 4) & 3: plain ints, because IntFlag arithmetic costs
# more than the rest of a record's encoding on the hot paths.
_HEADERS_BY_HOST_BITS = (
    _HEADERS[(False, False)],
    _HEADERS[(True, False)],
    _HEADERS[(False, True)],
    _HEADERS[(True, True)],
)
BORNHOST_V6 = 0x10
STOREHOST_V6 = 0x20


def header_struct(sys_flag: int) -> struct.Struct:
    return _HEADERS_BY_HOST_BITS[(sys_flag >> 4) & 3]


@functools.lru_cache(maxsize=1024)
def encode_host(host: str) -> bytes:
    """``"ip:port"`` (``"[v6]:port"`` for IPv6) as the record's host field."""
    address, _, port = host.rpartition(":")
    if not address:
        raise ValueError(f"host {host!r} must look like ip:port")
    address = address.strip("[]")
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        packed = socket.inet_pton(family, address)
    except OSError as exc:
        raise ValueError(f"host {host!r} has an invalid IP address") from exc
    if not port.isdecimal() or int(port) > 65535:
        raise ValueError(f"host {host!r} must end with a port from 0 to 65535")
    return packed + _INT.pack(int(port))


def decode_host(raw: bytes) -> str:
    if len(raw) == 20:
        return f"[{socket.inet_ntop(socket.AF_INET6, raw[:16])}]:{_INT.unpack(raw[16:])[0]}"
    return f"{socket.inet_ntop(socket.AF_INET, raw[:4])}:{_INT.unpack(raw[4:])[0]}"


def host_flags(born_host: bytes, store_host: bytes) -> int:
    return (BORNHOST_V6 if len(born_host) == 20 else 0) | (
        STOREHOST_V6 if len(store_host) == 20 else 0
    )


def encode_properties(properties: dict[str, str]) -> bytes:
    text = "".join([f"{name}\x01{value}\x02" for name, value in properties.items()])
    # Exactly one of each separator per property, or a name or value holds one.
    if text.count(NAME_VALUE_SEPARATOR) != len(properties) or text.count(PROPERTY_SEPARATOR) != len(
        properties
    ):
        for name, value in properties.items():
            if any(
                sep in name or sep in value for sep in (NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR)
            ):
                raise ValueError(f"property {name!r} contains a reserved separator character")
    return text.encode()


# The properties of a record that carries nothing but its message ID.
ID_ONLY_PREFIX = f"{Property.UNIQ_KEY}{NAME_VALUE_SEPARATOR}".encode()


def id_only_properties(message_id: str) -> bytes:
    """``encode_properties({UNIQ_KEY: message_id})``, for the most common record, cheaply."""
    return ID_ONLY_PREFIX + message_id.encode() + PROPERTY_SEPARATOR.encode()


def decode_properties(raw: bytes | str) -> dict[str, str]:
    text = raw.decode() if isinstance(raw, bytes | bytearray | memoryview) else raw
    result: dict[str, str] = {}
    for pair in text.split(PROPERTY_SEPARATOR):
        if pair:
            name, _, value = pair.partition(NAME_VALUE_SEPARATOR)
            result[name] = value
    return result


def body_crc(body: bytes | memoryview) -> int:
    """RocketMQ keeps the CRC32 of the body with its sign bit cleared."""
    return zlib.crc32(body) & 0x7FFFFFFF


@dataclasses.dataclass(slots=True)
class Message:
    """A message as a producer hands it to the store."""

    topic: str
    body: bytes
    queue_id: int = 0
    properties: dict[str, str] = dataclasses.field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str = "127.0.0.1:0"
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    @property
    def tags(self) -> str:
        return self.properties.get(Property.TAGS, "")

    @property
    def keys(self) -> list[str]:
        return self.properties.get(Property.KEYS, "").split()


@dataclasses.dataclass(slots=True)
class StoredMessage:
    """A message read back from the commit log, with what the store added."""

    topic: str
    body: bytes
    queue_id: int
    queue_offset: int
    physical_offset: int
    store_size: int
    properties: dict[str, str]
    flag: int
    sys_flag: int
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    reconsume_times: int
    prepared_transaction_offset: int
    body_crc: int

    @property
    def tags(self) -> str:
        return self.properties.get(Property.TAGS, "")

    @property
    def keys(self) -> list[str]:
        return self.properties.get(Property.KEYS, "").split()

    @property
    def unique_id(self) -> str:
        return self.properties.get(Property.UNIQ_KEY, "")


class CorruptRecordError(ValueError):
    """A record failed its length, magic or CRC check: it is never returned."""


def record_length(body_len: int, topic_len: int, properties_len: int, sys_flag: int = 0) -> int:
    return header_struct(sys_flag).size + body_len + 1 + topic_len + 2 + properties_len


def decode_record(
    buf: bytes | memoryview, pos: int = 0, *, check_crc: bool = True
) -> StoredMessage:
    """Decode the record at ``pos``; raise CorruptRecordError if it is not whole and valid."""
    limit = len(buf)
    if pos + 8 > limit:
        raise CorruptRecordError(f"record at {pos} is cut short")
    size, magic = SIZE_MAGIC.unpack_from(buf, pos)
    if magic != MESSAGE_MAGIC:
        raise CorruptRecordError(f"record at {pos} has magic {magic:#x}, not a message")
    if pos + SYSFLAG_OFFSET + 4 > limit:
        raise CorruptRecordError(f"record at {pos} is cut short")
    sys_flag = _INT.unpack_from(buf, pos + SYSFLAG_OFFSET)[0]
    header = header_struct(sys_flag)
    if size < header.size + 3 or pos + size > limit:
        raise CorruptRecordError(f"record at {pos} has impossible size {size}")
    (
        _,
        _,
        crc,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_timestamp,
        born_host,
        store_timestamp,
        store_host,
        reconsume_times,
        prepared_offset,
        body_len,
    ) = header.unpack_from(buf, pos)
    p = pos + header.size
    if body_len < 0 or p + body_len + 3 > pos + size:
        raise CorruptRecordError(f"record at {pos} has impossible body length {body_len}")
    body = bytes(buf[p : p + body_len])
    if check_crc and body_crc(body) != crc:
        raise CorruptRecordError(f"record at {pos} fails its body CRC")
    p += body_len
    topic_len = buf[p]
    # Lengths outside the body are not under the CRC: check them before reading.
    if p + 1 + topic_len + 2 > pos + size:
        raise CorruptRecordError(f"record at {pos} has inconsistent field lengths")
    raw_topic = bytes(buf[p + 1 : p + 1 + topic_len])
    p += 1 + topic_len
    props_len = _SHORT.unpack_from(buf, p)[0]
    p += 2
    if p + props_len != pos + size:
        raise CorruptRecordError(f"record at {pos} has inconsistent field lengths")
    try:
        topic = raw_topic.decode()
        properties = decode_properties(bytes(buf[p : p + props_len]))
    except UnicodeDecodeError as exc:
        raise CorruptRecordError(f"record at {pos} has a topic or properties not in UTF-8") from exc
    return StoredMessage(
        topic=topic,
        body=body,
        queue_id=queue_id,
        queue_offset=queue_offset,
        physical_offset=physical_offset,
        store_size=size,
        properties=properties,
        flag=flag,
        sys_flag=sys_flag,
        born_timestamp=born_timestamp,
        born_host=decode_host(born_host),
        store_timestamp=store_timestamp,
        store_host=decode_host(store_host),
        reconsume_times=reconsume_times,
        prepared_transaction_offset=prepared_offset,
        body_crc=crc,
    )


class RecordProblem(typing.NamedTuple):
    reason: str
    # The record's size can be trusted, so the records after it can still be found.
    framing_holds: bool


def record_problem(buf: bytes | memoryview, pos: int = 0) -> RecordProblem | None:
    """What is wrong with the record at ``pos`` (framing or body CRC); None if nothing.

    Cheaper than decoding: nothing is built, only the body's CRC computed.
    """
    limit = len(buf)
    if pos + SYSFLAG_OFFSET + 4 > limit:
        return RecordProblem("it is cut short", False)
    size, magic = SIZE_MAGIC.unpack_from(buf, pos)
    if magic != MESSAGE_MAGIC:
        return RecordProblem(f"magic {magic:#x} is not a message's", False)
    header = header_struct(_INT.unpack_from(buf, pos + SYSFLAG_OFFSET)[0])
    if size < header.size + 3 or pos + size > limit:
        return RecordProblem(f"size {size} is impossible", False)
    crc = _INT.unpack_from(buf, pos + 8)[0]
    body_len = _INT.unpack_from(buf, pos + header.size - 4)[0]
    body_at = pos + header.size
    if body_len < 0 or body_at + body_len + 3 > pos + size:
        return RecordProblem(f"body length {body_len} is impossible", True)
    if body_crc(buf[body_at : body_at + body_len]) != crc:
        return RecordProblem("body fails its CRC", True)
    return None


def offset_message_id(store_host: bytes, physical_offset: int) -> str:
    """RocketMQ's offset message ID: store host and physical offset, upper-case hex."""
    return (store_host + struct.pack(">q", physical_offset)).hex().upper()
