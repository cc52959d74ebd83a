"""The replication wire format: length-prefixed frames on a plain TCP stream.

Why TCP and not gRPC: the transfer is bulk bytes that go straight from one
commit log's mapped segment into another's. A frame here is a 5-byte header and
the log bytes themselves, written to the socket without re-encoding; acks are
13 bytes. A gRPC stream would wrap each run in a message and pass it through
grpc.aio's per-message machinery (task hops, copies, flow-control bookkeeping)
on both ends of every SYNC round trip. ``bench/replication_bench.py
--transport`` measures both: on the 2-CPU development machine an acknowledged
1 KiB run took 38 µs over these frames and 202 µs over a grpc.aio stream,
a 64 KiB run 52 µs against 255 µs (1 MiB: 0.8 ms against 1.0 ms).

Every frame: ``type`` (1 byte) and payload length (4 bytes, big-endian), then
the payload. The three AUTH frames come first, and nothing else is read or
sent before they are done (:mod:`.peer_auth`).

==============  =========  ==================================================
frame           direction  payload
==============  =========  ==================================================
AUTH_HELLO      R -> M     the replica's nonce (32)
AUTH_CHALLENGE  M -> R     the master's nonce (32), its proof (32)
AUTH_PROOF      R -> M     the replica's proof (32)
HELLO           R -> M     JSON: replica name, max offset, epochs, segment size
WELCOME         M -> R     JSON: offset to continue from, master's epochs
REFUSED         M -> R     JSON: reason (the replica logs it and retries later)
DATA            M -> R     master's max offset (8), log offset (8), log bytes
HEARTBEAT       M -> R     master's max offset (8)
ACK             R -> M     replica's log end, at most what it was sent (8); a heartbeat
METADATA        M -> R     JSON: topic config and consumer offsets
==============  =========  ==================================================
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
import struct
from typing import Any

HEADER = struct.Struct(">BI")
_OFFSET = struct.Struct(">q")
_DATA_HEAD = struct.Struct(">qq")
# Larger than any DATA frame a master sends (1 MiB runs by default): a length
# beyond it means the stream is not Skiff replication or is corrupt.
MAX_PAYLOAD = 64 * 1024 * 1024


class FrameType(enum.IntEnum):
    HELLO = 1
    WELCOME = 2
    REFUSED = 3
    DATA = 4
    HEARTBEAT = 5
    ACK = 6
    METADATA = 7
    AUTH_HELLO = 8
    AUTH_CHALLENGE = 9
    AUTH_PROOF = 10


class FramingError(Exception):
    """The peer sent something that is not a valid frame; the connection is dropped."""


@dataclasses.dataclass(slots=True)
class Frame:
    type: FrameType
    payload: bytes

    def json(self) -> dict[str, Any]:
        try:
            document = json.loads(self.payload)
        except ValueError as exc:
            raise FramingError(f"{self.type.name} frame is not JSON: {exc}") from None
        if not isinstance(document, dict):
            raise FramingError(f"{self.type.name} frame is not a JSON object")
        return document

    def offset(self) -> int:
        if len(self.payload) != _OFFSET.size:
            raise FramingError(f"{self.type.name} frame has {len(self.payload)} bytes, not 8")
        return _OFFSET.unpack(self.payload)[0]

    def data(self) -> tuple[int, int, memoryview]:
        """(master's max offset, log offset, log bytes) of a DATA frame."""
        if len(self.payload) < _DATA_HEAD.size:
            raise FramingError("DATA frame too short")
        master_offset, offset = _DATA_HEAD.unpack_from(self.payload)
        return master_offset, offset, memoryview(self.payload)[_DATA_HEAD.size :]


def encode(frame_type: FrameType, payload: bytes = b"") -> bytes:
    return HEADER.pack(frame_type, len(payload)) + payload


def encode_json(frame_type: FrameType, document: dict[str, Any]) -> bytes:
    return encode(frame_type, json.dumps(document, separators=(",", ":")).encode())


def encode_offset(frame_type: FrameType, offset: int) -> bytes:
    return HEADER.pack(frame_type, _OFFSET.size) + _OFFSET.pack(offset)


def data_header(master_offset: int, offset: int, length: int) -> bytes:
    """Header of a DATA frame whose ``length`` log bytes follow it on the stream."""
    return HEADER.pack(FrameType.DATA, _DATA_HEAD.size + length) + _DATA_HEAD.pack(
        master_offset, offset
    )


def _check_header(header: bytes) -> tuple[FrameType, int]:
    raw_type, length = HEADER.unpack(header)
    try:
        frame_type = FrameType(raw_type)
    except ValueError:
        raise FramingError(f"unknown frame type {raw_type}") from None
    if length > MAX_PAYLOAD:
        raise FramingError(f"{frame_type.name} frame of {length} bytes exceeds {MAX_PAYLOAD}")
    return frame_type, length


async def read_frame(reader: asyncio.StreamReader) -> Frame:
    """The next frame; IncompleteReadError at a clean end of stream, FramingError on garbage."""
    frame_type, length = _check_header(await reader.readexactly(HEADER.size))
    payload = await reader.readexactly(length) if length else b""
    return Frame(frame_type, payload)
