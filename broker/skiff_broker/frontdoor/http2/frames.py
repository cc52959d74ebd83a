"""The HTTP/2 frame layout (RFC 9113 section 4) and the protocol's numbers.

Every frame starts with a 9-octet header: a 24-bit payload length, an 8-bit type, 8 bits
of flags and a 31-bit stream identifier (the top bit is reserved and ignored). Payloads
built here are complete frames, ready to be written.
"""

from __future__ import annotations

import enum
import struct

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# Length (24 bits) and type as one 32-bit word, then flags, then the stream identifier.
HEADER = struct.Struct(">IBI")
HEADER_SIZE = HEADER.size
STREAM_MASK = 0x7FFFFFFF

DATA = 0x0
HEADERS = 0x1
PRIORITY = 0x2
RST_STREAM = 0x3
SETTINGS = 0x4
PUSH_PROMISE = 0x5
PING = 0x6
GOAWAY = 0x7
WINDOW_UPDATE = 0x8
CONTINUATION = 0x9

END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20

# SETTINGS parameters.
HEADER_TABLE_SIZE = 0x1
ENABLE_PUSH = 0x2
MAX_CONCURRENT_STREAMS = 0x3
INITIAL_WINDOW_SIZE = 0x4
MAX_FRAME_SIZE = 0x5
MAX_HEADER_LIST_SIZE = 0x6

DEFAULT_WINDOW = 65_535
DEFAULT_FRAME_SIZE = 16_384
MAX_FRAME_SIZE_LIMIT = (1 << 24) - 1
MAX_WINDOW = (1 << 31) - 1

_SETTING = struct.Struct(">HI")
_WORD = struct.Struct(">I")
_GOAWAY = struct.Struct(">II")


class ErrorCode(enum.IntEnum):
    NO_ERROR = 0x0
    PROTOCOL_ERROR = 0x1
    INTERNAL_ERROR = 0x2
    FLOW_CONTROL_ERROR = 0x3
    SETTINGS_TIMEOUT = 0x4
    STREAM_CLOSED = 0x5
    FRAME_SIZE_ERROR = 0x6
    REFUSED_STREAM = 0x7
    CANCEL = 0x8
    COMPRESSION_ERROR = 0x9
    CONNECT_ERROR = 0xA
    ENHANCE_YOUR_CALM = 0xB
    INADEQUATE_SECURITY = 0xC
    HTTP_1_1_REQUIRED = 0xD


class ConnectionFault(Exception):
    """The peer broke the protocol: the connection ends with GOAWAY carrying ``code``."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def frame(frame_type: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return HEADER.pack(len(payload) << 8 | frame_type, flags, stream_id) + payload


def frame_header(frame_type: int, flags: int, stream_id: int, length: int) -> bytes:
    return HEADER.pack(length << 8 | frame_type, flags, stream_id)


def settings(values: dict[int, int]) -> bytes:
    return frame(SETTINGS, 0, 0, b"".join(_SETTING.pack(k, v) for k, v in values.items()))


SETTINGS_ACK = frame(SETTINGS, ACK, 0)


def parse_settings(payload: bytes) -> list[tuple[int, int]]:
    return [_SETTING.unpack_from(payload, i) for i in range(0, len(payload), _SETTING.size)]


def window_update(stream_id: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream_id, _WORD.pack(increment))


def rst_stream(stream_id: int, code: int) -> bytes:
    return frame(RST_STREAM, 0, stream_id, _WORD.pack(code))


def goaway(last_stream_id: int, code: int, debug: bytes = b"") -> bytes:
    return frame(GOAWAY, 0, 0, _GOAWAY.pack(last_stream_id, code) + debug)


def ping_ack(payload: bytes) -> bytes:
    return frame(PING, ACK, 0, payload)


def read_word(payload: bytes) -> int:
    return _WORD.unpack_from(payload)[0]
