"""Replication frames: what one side encodes, the other decodes; garbage is refused."""

from __future__ import annotations

import asyncio

import pytest

from skiff_broker.ha import framing
from skiff_broker.ha.framing import FrameType, FramingError


def test_frames_round_trip_through_a_stream() -> None:
    log_bytes = bytes(range(256)) * 40
    stream = b"".join(
        [
            framing.encode_json(FrameType.HELLO, {"replica": "r-1", "max_offset": 42}),
            framing.data_header(9000, 4096, len(log_bytes)) + log_bytes,
            framing.encode_offset(FrameType.ACK, 4096 + len(log_bytes)),
            framing.encode(FrameType.HEARTBEAT, (9000).to_bytes(8, "big")),
        ]
    )

    async def read_all() -> list[framing.Frame]:
        reader = asyncio.StreamReader()
        # Fed in odd-sized pieces: frames must not depend on how TCP splits them.
        for start in range(0, len(stream), 777):
            reader.feed_data(stream[start : start + 777])
        reader.feed_eof()
        frames = []
        while True:
            try:
                frames.append(await framing.read_frame(reader))
            except asyncio.IncompleteReadError:
                return frames

    hello, data, ack, heartbeat = asyncio.run(read_all())
    assert hello.type is FrameType.HELLO
    assert hello.json() == {"replica": "r-1", "max_offset": 42}
    master_offset, offset, payload = data.data()
    assert (master_offset, offset, bytes(payload)) == (9000, 4096, log_bytes)
    assert ack.type is FrameType.ACK and ack.offset() == 4096 + len(log_bytes)
    assert heartbeat.offset() == 9000


def read_one(stream: bytes) -> framing.Frame:
    async def read() -> framing.Frame:
        reader = asyncio.StreamReader()
        reader.feed_data(stream)
        reader.feed_eof()
        return await framing.read_frame(reader)

    return asyncio.run(read())


def test_a_frame_cut_short_is_an_incomplete_read() -> None:
    whole = framing.encode_offset(FrameType.ACK, 7)
    assert read_one(whole).offset() == 7
    with pytest.raises(asyncio.IncompleteReadError):
        read_one(whole[:-1])


def test_unknown_frame_type_is_refused() -> None:
    with pytest.raises(FramingError, match="unknown frame type 99"):
        read_one(bytes([99, 0, 0, 0, 0]))


def test_oversized_length_is_refused_before_reading_it() -> None:
    header = framing.HEADER.pack(FrameType.DATA, framing.MAX_PAYLOAD + 1)
    with pytest.raises(FramingError, match="exceeds"):
        read_one(header)


@pytest.mark.parametrize(
    ("frame", "check", "message"),
    [
        (framing.Frame(FrameType.ACK, b"\x00" * 4), "offset", "not 8"),
        (framing.Frame(FrameType.DATA, b"\x00" * 10), "data", "too short"),
        (framing.Frame(FrameType.HELLO, b"{not json"), "json", "not JSON"),
        (framing.Frame(FrameType.HELLO, b"[1, 2]"), "json", "not a JSON object"),
    ],
)
def test_malformed_payloads_raise_framing_errors(
    frame: framing.Frame, check: str, message: str
) -> None:
    with pytest.raises(FramingError, match=message):
        getattr(frame, check)()
