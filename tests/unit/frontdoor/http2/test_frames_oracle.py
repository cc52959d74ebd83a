"""Skiff's HTTP/2 frames against python-hyper's ``hyperframe``, an independent framing layer.

Both ways, for every frame type Skiff reads or writes:

* Frames Skiff builds (frames.py, and what the server connection writes: DATA cut to
  the peer's frame size and windows, HEADERS with CONTINUATION, SETTINGS, PING acks,
  GOAWAY, RST_STREAM, WINDOW_UPDATE) parse with hyperframe to the same fields.
* Frames hyperframe builds (DATA with padding, HEADERS with priority and padding,
  CONTINUATION, SETTINGS, PING, GOAWAY, RST_STREAM, WINDOW_UPDATE, PRIORITY) are read
  by a server connection as what hyperframe says they hold: the application gets the
  same headers and data, the settings and windows take the values, padding is given
  back to the window as hyperframe counts it.
* Padding both sides refuse or accept alike.

Case counts are bounded and derandomized (SKIFF_HTTP2_EXAMPLES raises them).
"""

from __future__ import annotations

import hpack
import pytest
from hyperframe.exceptions import HyperframeError
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    PriorityFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)
from hypothesis import given
from hypothesis import strategies as st
from tests.support.http2_fuzz import REQUEST, bounded_examples

from skiff_broker.frontdoor.http2 import frames as fr
from skiff_broker.frontdoor.http2.connection import Limits, ServerConnection, Stream
from skiff_broker.frontdoor.http2.frames import ErrorCode
from skiff_broker.frontdoor.http2.hpack import encode_headers

stream_ids = st.integers(1, fr.STREAM_MASK)
words = st.integers(0, 0xFFFFFFFF)
increments = st.integers(1, fr.MAX_WINDOW)
client_streams = st.integers(0, 1000).map(lambda n: 2 * n + 1)


def as_octets(text: str) -> str:
    """Text as Skiff's HPACK holds it: its UTF-8 octets, one latin-1 character each."""
    return text.encode().decode("latin-1")


def parse(data: bytes) -> list[Frame]:
    """Every frame in data, as hyperframe reads it; all of data must be whole frames."""
    found = []
    view = memoryview(data)
    pos = 0
    while pos < len(data):
        frame, length = Frame.parse_frame_header(view[pos : pos + 9])
        body = view[pos + 9 : pos + 9 + length]
        assert len(body) == length, "a frame cut short"
        frame.parse_body(body)
        found.append(frame)
        pos += 9 + length
    return found


def parse_one(data: bytes) -> Frame:
    (frame,) = parse(data)
    return frame


# -- Skiff builds, hyperframe parses -----------------------------------------------------------


@bounded_examples(100)
@given(st.dictionaries(st.integers(0, 0xFFFF), words, max_size=8))
def test_skiff_settings_parse_the_same(values):
    frame = parse_one(fr.settings(values))
    assert isinstance(frame, SettingsFrame)
    assert (frame.stream_id, frame.flags, frame.settings) == (0, set(), values)


@bounded_examples(100)
@given(st.dictionaries(st.integers(0, 0xFF), words, max_size=8))
def test_hyperframe_settings_parse_the_same_with_skiff(values):
    # (hyperframe writes only the low 8 bits of an identifier, so no higher ones here)
    payload = SettingsFrame(0, settings=values).serialize()[9:]
    assert dict(fr.parse_settings(payload)) == values


def test_skiff_settings_ack_parses_the_same():
    frame = parse_one(fr.SETTINGS_ACK)
    assert isinstance(frame, SettingsFrame)
    assert (frame.stream_id, frame.flags, frame.settings) == (0, {"ACK"}, {})


@bounded_examples(200)
@given(st.integers(0, fr.STREAM_MASK), increments)
def test_skiff_window_updates_parse_the_same(stream_id, increment):
    frame = parse_one(fr.window_update(stream_id, increment))
    assert isinstance(frame, WindowUpdateFrame)
    assert (frame.stream_id, frame.window_increment) == (stream_id, increment)


@bounded_examples(200)
@given(stream_ids, words)
def test_skiff_resets_parse_the_same(stream_id, code):
    frame = parse_one(fr.rst_stream(stream_id, code))
    assert isinstance(frame, RstStreamFrame)
    assert (frame.stream_id, frame.error_code) == (stream_id, code)


@bounded_examples(200)
@given(st.integers(0, fr.STREAM_MASK), words, st.binary(max_size=300))
def test_skiff_goaways_parse_the_same(last_stream_id, code, debug):
    frame = parse_one(fr.goaway(last_stream_id, code, debug))
    assert isinstance(frame, GoAwayFrame)
    assert (frame.stream_id, frame.last_stream_id, frame.error_code) == (0, last_stream_id, code)
    assert frame.additional_data == debug


@bounded_examples(100)
@given(st.binary(min_size=8, max_size=8))
def test_skiff_ping_acks_parse_the_same(opaque):
    frame = parse_one(fr.ping_ack(opaque))
    assert isinstance(frame, PingFrame)
    assert (frame.stream_id, frame.flags, frame.opaque_data) == (0, {"ACK"}, opaque)


@bounded_examples(200)
@given(
    st.sampled_from([(fr.DATA, DataFrame), (fr.HEADERS, HeadersFrame)]),
    st.sampled_from([0, fr.END_STREAM, fr.END_HEADERS, fr.END_STREAM | fr.END_HEADERS]),
    stream_ids,
    st.binary(max_size=2000),
)
def test_skiff_frame_headers_parse_the_same(kind, flags, stream_id, payload):
    frame_type, cls = kind
    built = fr.frame(frame_type, flags, stream_id, payload)
    assert built == fr.frame_header(frame_type, flags, stream_id, len(payload)) + payload
    frame = parse_one(built)
    assert isinstance(frame, cls)
    assert frame.stream_id == stream_id
    assert frame.data == payload
    expected = {"END_STREAM"} if flags & fr.END_STREAM else set()
    if cls is HeadersFrame and flags & fr.END_HEADERS:
        expected.add("END_HEADERS")
    assert frame.flags == expected


class Recorder:
    def __init__(self) -> None:
        self.data: list[tuple[bytes, bool]] = []
        self.resets: list[int] = []

    def data_received(self, data: bytes, end_stream: bool) -> None:
        self.data.append((data, end_stream))

    def reset(self, code: int) -> None:
        self.resets.append(code)

    def writable(self) -> None:
        pass


class App:
    def __init__(self) -> None:
        self.requests: dict[int, tuple[Stream, list[tuple[str, str]], bool]] = {}
        self.handlers: dict[int, Recorder] = {}

    def request(self, stream: Stream, headers: list[tuple[str, str]], end_stream: bool) -> None:
        self.requests[stream.id] = (stream, headers, end_stream)
        stream.handler = self.handlers[stream.id] = Recorder()

    def headers_too_large(self, stream: Stream) -> None:
        stream.reset(ErrorCode.REFUSED_STREAM)


class Client:
    """A client made of hyperframe frames, talking to a real server connection."""

    def __init__(self, settings: dict[int, int] | None = None, limits: Limits | None = None):
        self.app = App()
        self.conn = ServerConnection(self.app, limits)
        self.encoder = hpack.Encoder()
        self.opening = self.frames()
        self.send(SettingsFrame(0, settings=settings or {}), preface=True)
        assert [type(f) for f in self.frames()] == [SettingsFrame]

    def send(self, *frames: Frame, preface: bool = False) -> None:
        data = b"".join(f.serialize() for f in frames)
        self.conn.receive((fr.PREFACE if preface else b"") + data)

    def frames(self) -> list[Frame]:
        return parse(self.conn.take_output())

    def open(self, stream_id: int, end_stream: bool = False) -> Stream:
        flags = ["END_HEADERS", *(["END_STREAM"] if end_stream else [])]
        self.send(HeadersFrame(stream_id, self.encoder.encode(REQUEST), flags=flags))
        return self.app.requests[stream_id][0]


@bounded_examples(50)
@given(
    st.lists(
        st.tuples(
            st.text(max_size=10),
            st.one_of(st.text(max_size=10), st.integers(0, 20_000).map(lambda n: "v" * n)),
        ),
        max_size=8,
    ),
    st.sampled_from([16_384, 20_000, 1 << 20]),
)
def test_long_response_headers_come_as_headers_and_continuation_hyperframe_reads(
    fields, max_frame_size
):
    client = Client({fr.MAX_FRAME_SIZE: max_frame_size})
    stream = client.open(1, end_stream=True)
    headers = [(":status", "200"), *((f"x-{n.lower()}", v) for n, v in fields)]
    block = encode_headers([(as_octets(n), as_octets(v)) for n, v in headers])
    stream.send_headers(block, end_stream=True)
    frames = client.frames()
    assert isinstance(frames[0], HeadersFrame)
    assert all(isinstance(f, ContinuationFrame) for f in frames[1:])
    assert all(f.stream_id == 1 and len(f.data) <= max_frame_size for f in frames)
    assert "END_STREAM" in frames[0].flags
    assert ["END_HEADERS" in f.flags for f in frames] == [False] * (len(frames) - 1) + [True]
    decoded = hpack.Decoder(max_header_list_size=1 << 24).decode(b"".join(f.data for f in frames))
    assert decoded == headers


@bounded_examples(60)
@given(
    st.integers(0, 200_000),
    st.sampled_from([16_384, 20_000]),
    st.integers(0, 100_000),
    st.integers(1000, 100_000),
)
def test_response_data_comes_in_frames_and_windows_hyperframe_reads(
    size, max_frame_size, initial_window, more_window
):
    client = Client({fr.MAX_FRAME_SIZE: max_frame_size, fr.INITIAL_WINDOW_SIZE: initial_window})
    stream = client.open(1, end_stream=True)
    body = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    stream.send_data(body, end_stream=True)
    sent = client.frames()
    # The connection's window (65,535) and the stream's bound what goes out; the rest
    # follows as the client opens both, never past either.
    opened = 0
    while True:
        assert sum(len(f.data) for f in sent) <= min(fr.DEFAULT_WINDOW, initial_window) + opened
        client.send(WindowUpdateFrame(0, more_window), WindowUpdateFrame(1, more_window))
        opened += more_window
        more = client.frames()
        if not more:
            break
        sent += more
    assert all(isinstance(f, DataFrame) and f.stream_id == 1 for f in sent)
    assert all(len(f.data) <= max_frame_size for f in sent)
    assert b"".join(f.data for f in sent) == body
    assert ["END_STREAM" in f.flags for f in sent] == [False] * (len(sent) - 1) + [True]


# -- hyperframe builds, Skiff reads ------------------------------------------------------------


@bounded_examples(80)
@given(
    client_streams,
    st.lists(
        st.tuples(
            st.sampled_from(["x-a", "x-b", "grpc-timeout"]),
            st.text(st.characters(blacklist_characters="\r\n\x00"), max_size=50),
        ),
        max_size=10,
    ),
    st.booleans(),
    st.one_of(st.none(), st.integers(0, 255)),
    st.one_of(
        st.none(), st.tuples(st.integers(0, fr.STREAM_MASK), st.integers(0, 255), st.booleans())
    ),
    st.lists(st.integers(0, 300), max_size=3),
)
def test_hyperframe_headers_with_priority_padding_and_continuation_read_the_same(
    stream_id, extra, end_stream, pad_length, priority, cuts
):
    if priority is not None and priority[0] == stream_id:
        priority = (0, *priority[1:])  # a stream depending on itself: a test below
    client = Client()
    headers = [*REQUEST, *extra]
    block = client.encoder.encode(headers, huffman=bool(len(extra) % 2))
    edges = sorted({min(c, len(block)) for c in cuts})
    pieces = [block[a:b] for a, b in zip([0, *edges], [*edges, len(block)], strict=True)]
    if pad_length is not None and priority is None and not pieces[0]:
        pad_length = None  # hyperframe refuses to read this (see the padding tests below)
    flags = ["END_STREAM"] if end_stream else []
    if len(pieces) == 1:
        flags.append("END_HEADERS")
    first = HeadersFrame(stream_id, pieces[0], flags=flags)
    if pad_length is not None:
        first.flags.add("PADDED")
        first.pad_length = pad_length
    if priority is not None:
        first.flags.add("PRIORITY")
        first.depends_on, first.stream_weight, first.exclusive = priority
    rest = [
        ContinuationFrame(stream_id, piece, flags=["END_HEADERS"] if i == len(pieces) else [])
        for i, piece in enumerate(pieces[1:], 2)
    ]
    # hyperframe reads back what it built...
    again = parse(b"".join(f.serialize() for f in (first, *rest)))
    assert b"".join(f.data for f in again) == block
    # ...and the server reads the same.
    client.send(first, *rest)
    _, got, got_end = client.app.requests[stream_id]
    assert got == [(n, as_octets(v)) for n, v in headers]
    assert got_end == end_stream
    assert client.frames() == [] and not client.conn.closed


@bounded_examples(100)
@given(
    client_streams,
    st.lists(
        st.tuples(st.binary(max_size=3000), st.one_of(st.none(), st.integers(0, 255))),
        max_size=10,
    ),
    st.booleans(),
)
def test_hyperframe_data_with_padding_reads_the_same_and_padding_is_given_back(
    stream_id, chunks, end_stream
):
    client = Client()
    client.open(stream_id)
    frames = []
    for i, (data, pad_length) in enumerate(chunks):
        last = i == len(chunks) - 1
        frame = DataFrame(stream_id, data, flags=["END_STREAM"] if last and end_stream else [])
        if pad_length is not None:
            frame.flags.add("PADDED")
            frame.pad_length = pad_length
        frames.append(frame)
    client.send(*frames)
    handler = client.app.handlers[stream_id]
    assert b"".join(d for d, _ in handler.data) == b"".join(d for d, _ in chunks)
    assert any(end for _, end in handler.data) == (end_stream and bool(chunks))
    # The stream's receive window as the client reckons it: what hyperframe counts each
    # frame to cost (data, padding and its length octet), less what the server gave back.
    updates = [f for f in client.frames() if isinstance(f, WindowUpdateFrame)]
    given_back = sum(f.window_increment for f in updates if f.stream_id == stream_id)
    spent = sum(f.flow_controlled_length for f in frames)
    assert client.conn.streams[stream_id].recv_window == fr.DEFAULT_WINDOW - spent + given_back
    assert not client.conn.closed


@bounded_examples(100)
@given(
    st.integers(0, fr.MAX_WINDOW),
    st.integers(fr.DEFAULT_FRAME_SIZE, fr.MAX_FRAME_SIZE_LIMIT),
    st.integers(0, 1),
    st.integers(0, 0xFFFFFFFF),
)
def test_hyperframe_settings_take_effect(initial_window, max_frame_size, enable_push, streams):
    client = Client()
    client.open(1)
    client.send(
        SettingsFrame(
            0,
            settings={
                SettingsFrame.INITIAL_WINDOW_SIZE: initial_window,
                SettingsFrame.MAX_FRAME_SIZE: max_frame_size,
                SettingsFrame.ENABLE_PUSH: enable_push,
                SettingsFrame.MAX_CONCURRENT_STREAMS: streams,
            },
        )
    )
    (ack,) = client.frames()
    assert isinstance(ack, SettingsFrame) and ack.flags == {"ACK"}
    assert client.conn.peer_initial_window == initial_window
    assert client.conn.peer_max_frame_size == max_frame_size
    assert client.conn.streams[1].send_window == initial_window


@bounded_examples(100)
@given(st.binary(min_size=8, max_size=8))
def test_hyperframe_pings_are_answered_with_their_data(opaque):
    client = Client()
    client.send(PingFrame(0, opaque))
    (ack,) = client.frames()
    assert isinstance(ack, PingFrame)
    assert (ack.flags, ack.opaque_data) == ({"ACK"}, opaque)
    client.send(PingFrame(0, opaque, flags=["ACK"]))  # an ack is not answered
    assert client.frames() == []


@bounded_examples(100)
@given(st.lists(increments, min_size=1, max_size=3), client_streams)
def test_hyperframe_window_updates_open_the_windows(increments_, stream_id):
    client = Client()
    stream = client.open(stream_id)
    total = sum(increments_)
    client.send(*(WindowUpdateFrame(0, i) for i in increments_))
    client.send(*(WindowUpdateFrame(stream_id, i) for i in increments_))
    if fr.DEFAULT_WINDOW + total > fr.MAX_WINDOW:
        assert client.conn.closed  # FLOW_CONTROL_ERROR, RFC 9113 6.9.1
        return
    assert client.conn.send_window == fr.DEFAULT_WINDOW + total
    assert stream.send_window == fr.DEFAULT_WINDOW + total


@bounded_examples(100)
@given(client_streams, words)
def test_hyperframe_resets_reach_the_stream_with_their_code(stream_id, code):
    client = Client()
    client.open(stream_id)
    client.send(RstStreamFrame(stream_id, code))
    assert client.app.handlers[stream_id].resets == [code]
    assert stream_id not in client.conn.streams and not client.conn.closed


@bounded_examples(100)
@given(st.integers(0, fr.STREAM_MASK), words, st.binary(max_size=100))
def test_hyperframe_goaways_are_read_without_ending_the_servers_side(last, code, debug):
    client = Client()
    client.open(1)
    client.send(GoAwayFrame(0, last_stream_id=last, error_code=code, additional_data=debug))
    assert client.frames() == [] and not client.conn.closed


@bounded_examples(100)
@given(client_streams, st.integers(0, fr.STREAM_MASK), st.integers(0, 255), st.booleans())
def test_hyperframe_priority_frames_are_read_and_a_self_dependency_resets(
    stream_id, depends_on, weight, exclusive
):
    client = Client()
    client.send(PriorityFrame(stream_id, depends_on, weight, exclusive))
    out = client.frames()
    if depends_on == stream_id:  # RFC 9113 5.3.1: a stream error
        assert [(type(f), f.stream_id, f.error_code) for f in out] == [
            (RstStreamFrame, stream_id, ErrorCode.PROTOCOL_ERROR)
        ]
    else:
        assert out == []
    assert not client.conn.closed
    client.open(stream_id + 2)  # the connection still serves


# -- padding, accepted or refused alike --------------------------------------------------------


def server_refusal(frame_bytes: bytes, stream_id: int) -> int | None:
    """The error code of the GOAWAY the server answers the frame with, None if none."""
    client = Client()
    if frame_bytes[3] == fr.DATA:
        client.open(stream_id)
    client.conn.receive(frame_bytes)
    goaways = [f for f in client.frames() if isinstance(f, GoAwayFrame)]
    return goaways[0].error_code if goaways else None


def hyperframe_accepts(frame_bytes: bytes) -> bool:
    try:
        parse(frame_bytes)
    except HyperframeError:
        return False
    return True


@bounded_examples(150)
@given(st.integers(0, 255), st.binary(max_size=300), client_streams)
def test_data_padding_is_refused_alike(pad_length, rest, stream_id):
    payload = bytes([pad_length]) + rest
    frame_bytes = fr.frame(fr.DATA, fr.PADDED, stream_id, payload)
    # RFC 9113 6.1: padding as long as the payload or longer is a PROTOCOL_ERROR.
    acceptable = pad_length < len(payload)
    assert server_refusal(frame_bytes, stream_id) == (
        None if acceptable else ErrorCode.PROTOCOL_ERROR
    )
    assert hyperframe_accepts(frame_bytes) is acceptable


@bounded_examples(150)
@given(st.integers(0, 255), st.integers(0, 100).map(lambda n: 3 * n), st.booleans(), client_streams)
def test_headers_padding_is_refused_as_the_rfc_says(pad_length, zeros, priority, stream_id):
    head = b"\0\0\0\0\x10" if priority else b""
    block = hpack.Encoder().encode(REQUEST)
    payload = bytes([pad_length]) + head + block + b"\0" * zeros
    flags = fr.PADDED | fr.END_HEADERS | (fr.PRIORITY_FLAG if priority else 0)
    frame_bytes = fr.frame(fr.HEADERS, flags, stream_id, payload)
    # RFC 9113 6.2: padding that exceeds what is left for the field block (after the pad
    # length and the priority fields) is a PROTOCOL_ERROR.
    room = len(block) + zeros
    refusal = server_refusal(frame_bytes, stream_id)
    if pad_length > room:
        assert refusal == ErrorCode.PROTOCOL_ERROR
    elif pad_length <= zeros and (zeros - pad_length) % 3 == 0:
        # The block is whole; what zeros the padding leaves decode as empty fields
        # (three octets each): the stream's error, not the connection's.
        assert refusal is None
    # hyperframe measures padding against all that follows the pad length, priority
    # fields included: it refuses padding that leaves an empty block (which the RFC
    # allows) and takes padding over the priority fields (which the RFC refuses).
    assert hyperframe_accepts(frame_bytes) is (pad_length < room + len(head))


def test_a_padded_header_block_with_nothing_left_is_read_as_empty():
    """The edge hyperframe refuses: padding leaving an empty block is allowed by RFC 9113
    (it does not exceed what is left), and decodes as an empty header list."""
    client = Client()
    client.conn.receive(fr.frame(fr.HEADERS, fr.PADDED | fr.END_HEADERS, 1, bytes([3, 0, 0, 0])))
    # An empty list is no request: a stream error, not the connection's.
    out = client.frames()
    assert [(type(f), f.stream_id, f.error_code) for f in out] == [
        (RstStreamFrame, 1, ErrorCode.PROTOCOL_ERROR)
    ]
    assert not client.conn.closed
    assert not hyperframe_accepts(fr.frame(fr.HEADERS, fr.PADDED, 1, bytes([3, 0, 0, 0])))


@pytest.mark.parametrize("pad_length", [1, 4, 5])
def test_padding_over_the_priority_fields_is_a_protocol_error(pad_length):
    """RFC 9113 6.2: padding that exceeds the room after the priority fields is a
    PROTOCOL_ERROR (the frame is long enough for its fields: no FRAME_SIZE_ERROR)."""
    payload = bytes([pad_length]) + b"\0\0\0\0\x10" + b"\0" * (pad_length - 1)
    client = Client()
    client.conn.receive(
        fr.frame(fr.HEADERS, fr.PADDED | fr.PRIORITY_FLAG | fr.END_HEADERS, 1, payload)
    )
    (goaway,) = client.frames()
    assert isinstance(goaway, GoAwayFrame)
    assert goaway.error_code == ErrorCode.PROTOCOL_ERROR
