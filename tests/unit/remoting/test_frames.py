"""The remoting frame codec: round trips, frames as a 4.x client writes them, hostile bytes."""

from __future__ import annotations

import gc
import json
import struct
import weakref

import pytest

from skiff_broker.remoting.frames import (
    JSON,
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    ROCKETMQ,
    FrameDecoder,
    FrameError,
    RemotingCommand,
    encode,
)


def _json_frame(header: dict, body: bytes = b"") -> bytes:
    """A frame built by hand from the protocol's layout, as the Java client writes it."""
    raw = json.dumps(header).encode()
    return struct.pack(">ii", 4 + len(raw) + len(body), len(raw)) + raw + body


def _binary_frame(code: int, opaque: int, flag: int, remark: bytes, ext: dict) -> bytes:
    entries = b"".join(
        struct.pack(">h", len(k)) + k + struct.pack(">i", len(v)) + v
        for k, v in ((k.encode(), v.encode()) for k, v in ext.items())
    )
    header = (
        struct.pack(">hbhii", code, 0, 417, opaque, flag)
        + struct.pack(">i", len(remark))
        + remark
        + struct.pack(">i", len(entries))
        + entries
    )
    return struct.pack(">iI", 4 + len(header), (1 << 24) | len(header)) + header


def test_a_json_request_as_the_java_client_writes_it_is_read_whole():
    frame = _json_frame(
        {
            "code": 105,
            "extFields": {"topic": "orders"},
            "flag": 0,
            "language": "JAVA",
            "opaque": 7,
            "serializeTypeCurrentRPC": "JSON",
            "version": 417,
        },
        b"payload",
    )
    (command,) = FrameDecoder().feed(frame)
    assert (command.code, command.opaque, command.version) == (105, 7, 417)
    assert command.language == "JAVA" and command.serialize_type == JSON
    assert command.ext_fields == {"topic": "orders"} and command.body == b"payload"
    assert not command.is_response and not command.is_oneway


def test_a_rocketmq_binary_header_is_read_whole():
    frame = _binary_frame(10, 99, ONEWAY_FLAG, "hé".encode(), {"a": "1", "topic": "t"})
    (command,) = FrameDecoder().feed(frame)
    assert (command.code, command.opaque, command.remark) == (10, 99, "hé")
    assert command.is_oneway and command.serialize_type == ROCKETMQ
    assert command.ext_fields == {"a": "1", "topic": "t"} and command.language == "JAVA"


@pytest.mark.parametrize("serialize_type", [JSON, ROCKETMQ])
def test_commands_round_trip_in_both_header_kinds(serialize_type):
    command = RemotingCommand(
        code=310,
        opaque=-5,
        flag=RESPONSE_FLAG,
        remark="ok ✓",
        ext_fields={"msgId": "AB", "queueOffset": "12", "": ""},
        body=bytes(range(256)),
        language="GO",
        version=3,
        serialize_type=serialize_type,
    )
    (again,) = FrameDecoder().feed(encode(command))
    assert again == command


def test_frames_cut_anywhere_come_out_whole_and_in_order():
    commands = [RemotingCommand(code=c, opaque=c, body=b"x" * c) for c in range(1, 40)]
    stream = b"".join(encode(c) for c in commands)
    decoder = FrameDecoder()
    out = []
    for start in range(0, len(stream), 3):
        out += decoder.feed(stream[start : start + 3])
    assert out == commands and decoder.buffered == 0


def test_a_response_copies_the_requests_opaque_and_header_kind():
    request = RemotingCommand(code=34, opaque=42, serialize_type=ROCKETMQ)
    response = request.response(0, "fine", k="v")
    assert (response.opaque, response.serialize_type, response.is_response) == (42, ROCKETMQ, True)


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (struct.pack(">i", -1), "less than the 4-byte"),
        (struct.pack(">i", 2), "less than the 4-byte"),
        (struct.pack(">i", 2**31 - 1), "over the"),
        (struct.pack(">iI", 8, (7 << 24) | 4) + b"{}{}", "serialize type 7 is unknown"),
        (struct.pack(">iI", 8, 100) + b"{}{}", "header length 100"),
        (struct.pack(">iI", 8, 4) + b"{no}", "not valid JSON"),
        (struct.pack(">iI", 6, 2) + b"[]", "must be an object"),
        (struct.pack(">iI", 6, 2) + b"{}", "code in the JSON header"),
        (_json_frame({"code": "105"}), "code in the JSON header"),
        (_json_frame({"code": 1, "extFields": [1]}), "extFields in the JSON header"),
        (_json_frame({"code": 1, "extFields": {"a": {}}}), "must be a string"),
        (_json_frame({"code": 2**40}), "32-bit"),
        (struct.pack(">iI", 7, (1 << 24) | 3) + b"abc", "too short"),
    ],
)
def test_hostile_frames_raise_a_frame_error_that_says_why(data, says):
    with pytest.raises(FrameError, match=says):
        FrameDecoder(max_frame_length=1024).feed(data)


def test_binary_headers_with_lengths_past_their_end_are_refused():
    good = _binary_frame(10, 1, 0, b"r", {"key": "value"})
    header_start = 8
    remark_length_at = header_start + 13
    for position, value in [(remark_length_at, 10_000), (remark_length_at, -3)]:
        bad = bytearray(good)
        struct.pack_into(">i", bad, position, value)
        with pytest.raises(FrameError):
            FrameDecoder().feed(bytes(bad))
    # Every truncation of the header inside its own declared length.
    for cut in range(1, len(good) - 8):
        header = good[8 : len(good) - cut]
        frame = struct.pack(">iI", 4 + len(header), (1 << 24) | len(header)) + header
        with pytest.raises(FrameError):
            FrameDecoder().feed(frame)


def test_an_oversized_length_is_refused_before_its_body_is_buffered():
    decoder = FrameDecoder(max_frame_length=64)
    with pytest.raises(FrameError, match="64-byte limit"):
        decoder.feed(struct.pack(">i", 61))
    assert decoder.buffered == 4


def test_commands_before_a_malformed_frame_are_returned_then_the_error():
    decoder = FrameDecoder()
    good = encode(RemotingCommand(code=1))
    assert [c.code for c in decoder.feed(good + struct.pack(">i", -9))] == [1]
    with pytest.raises(FrameError):
        decoder.feed(good)


def test_a_decoder_that_met_a_malformed_frame_is_freed_as_soon_as_it_is_dropped():
    # With the collector off, as between two of its passes in a busy broker: the kept
    # error must not hold the decoder (and the peer's whole chunk) in a cycle.
    good = encode(RemotingCommand(code=1))
    gc.disable()
    try:
        decoder = FrameDecoder()
        assert [c.code for c in decoder.feed(good + struct.pack(">i", -9))] == [1]
        assert decoder.failed is not None
        gone = weakref.ref(decoder)
        del decoder
        assert gone() is None, "a failed decoder waits for the collector"
    finally:
        gc.enable()


def test_an_unfinished_frame_waits_for_more():
    decoder = FrameDecoder()
    frame = encode(RemotingCommand(code=5, body=b"abc"))
    assert decoder.feed(frame[:-1]) == []
    assert [c.body for c in decoder.feed(frame[-1:])] == [b"abc"]
