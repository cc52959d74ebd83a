"""One server connection, fed frames as bytes, its output read back as frames.

The RFC's conformance as a whole is checked by h2spec against a running broker
(tests/integration/test_http2_conformance.py); these are the server's own rules: windows,
limits and budgets, and what the application hears.
"""

from __future__ import annotations

import gc
import struct
import weakref

import pytest

from skiff_broker.frontdoor.http2 import frames as fr
from skiff_broker.frontdoor.http2.connection import Limits, ServerConnection, Stream
from skiff_broker.frontdoor.http2.frames import ErrorCode
from skiff_broker.frontdoor.http2.hpack import HeaderDecoder, encode_headers
from skiff_broker.frontdoor.http2.receive_budget import ReceiveBudget

REQUEST = [
    (":method", "POST"),
    (":scheme", "http"),
    (":path", "/svc/Method"),
    (":authority", "localhost"),
    ("content-type", "application/grpc"),
    ("te", "trailers"),
]


class Recorder:
    """A stream handler noting what it hears."""

    def __init__(self) -> None:
        self.data: list[tuple[bytes, bool]] = []
        self.resets: list[int] = []
        self.writable_calls = 0
        self.rooms_reserved = 0

    def room_reserved(self) -> None:
        self.rooms_reserved += 1

    def data_received(self, data: bytes, end_stream: bool) -> None:
        self.data.append((data, end_stream))

    def reset(self, code: int) -> None:
        self.resets.append(code)

    def writable(self) -> None:
        self.writable_calls += 1


class App:
    def __init__(self) -> None:
        self.requests: list[tuple[Stream, list[tuple[str, str]], bool]] = []
        self.handlers: dict[int, Recorder] = {}
        self.too_large: list[int] = []

    def request(self, stream: Stream, headers: list[tuple[str, str]], end_stream: bool) -> None:
        self.requests.append((stream, headers, end_stream))
        stream.handler = self.handlers[stream.id] = Recorder()

    def headers_too_large(self, stream: Stream) -> None:
        self.too_large.append(stream.id)
        stream.reset(ErrorCode.REFUSED_STREAM)


class Peer:
    """The client side: frames in, the server's frames out."""

    def __init__(
        self,
        limits: Limits | None = None,
        settings: dict[int, int] | None = None,
        budget: ReceiveBudget | None = None,
    ):
        self.app = App()
        self.conn = ServerConnection(self.app, limits, budget=budget)
        self.opening = self.frames()
        self.send(fr.PREFACE + fr.settings(settings or {}))

    def send(self, data: bytes) -> None:
        self.conn.receive(data)

    def frames(self) -> list[tuple[int, int, int, bytes]]:
        out = self.conn.take_output()
        found = []
        pos = 0
        while pos < len(out):
            word, flags, stream_id = fr.HEADER.unpack_from(out, pos)
            length = word >> 8
            found.append((word & 0xFF, flags, stream_id, out[pos + 9 : pos + 9 + length]))
            pos += 9 + length
        assert pos == len(out)
        return found

    def request(self, stream_id: int, end_stream: bool = False, headers=REQUEST) -> bytes:  # type: ignore[no-untyped-def]
        flags = fr.END_HEADERS | (fr.END_STREAM if end_stream else 0)
        return fr.frame(fr.HEADERS, flags, stream_id, encode_headers(headers))

    def goaway(self) -> tuple[int, int]:
        """The (last stream, error code) of the GOAWAY the server sent."""
        sent = [f for f in self.frames() if f[0] == fr.GOAWAY]
        assert len(sent) == 1
        return struct.unpack(">II", sent[0][3][:8])


def data(stream_id: int, payload: bytes, end_stream: bool = False) -> bytes:
    return fr.frame(fr.DATA, fr.END_STREAM if end_stream else 0, stream_id, payload)


def resets(frames):  # type: ignore[no-untyped-def]
    return [(f[2], fr.read_word(f[3])) for f in frames if f[0] == fr.RST_STREAM]


def test_the_server_opens_with_its_limits_and_acknowledges_the_clients_settings():
    peer = Peer()
    (settings_frame,) = peer.opening
    assert settings_frame[0] == fr.SETTINGS
    assert dict(fr.parse_settings(settings_frame[3])) == {
        fr.MAX_CONCURRENT_STREAMS: 1000,
        fr.MAX_HEADER_LIST_SIZE: 16_384,
        fr.MAX_FRAME_SIZE: 16_384,
        fr.ENABLE_PUSH: 0,
    }
    # No window past the protocol's 65,535 until streams reserve room for more.
    assert peer.frames() == [(fr.SETTINGS, fr.ACK, 0, b"")]


def test_a_request_arrives_whole_even_one_octet_at_a_time():
    peer = Peer()
    wire = peer.request(1) + data(1, b"hello ") + data(1, b"world", end_stream=True)
    for i in range(len(wire)):
        peer.send(wire[i : i + 1])
    ((stream, headers, end_stream),) = peer.app.requests
    assert headers == REQUEST and not end_stream and stream.id == 1
    assert peer.app.handlers[1].data == [(b"hello ", False), (b"world", True)]


def test_an_answer_in_one_piece_goes_out_as_framed():
    peer = Peer()
    peer.frames()
    peer.send(peer.request(1) + data(1, b"q", end_stream=True))
    stream = peer.app.requests[0][0]
    body = b"answer"
    framed = (
        fr.frame(fr.HEADERS, fr.END_HEADERS, 1, b"\x88")
        + fr.frame(fr.DATA, 0, 1, body)
        + fr.frame(fr.HEADERS, fr.END_HEADERS | fr.END_STREAM, 1, b"\x88")
    )
    assert stream.send_response(framed, len(body))
    assert [f[0] for f in peer.frames()] == [fr.HEADERS, fr.DATA, fr.HEADERS]
    assert not peer.conn.streams


def test_data_past_the_streams_window_waits_and_the_trailers_wait_behind_it():
    peer = Peer(settings={fr.INITIAL_WINDOW_SIZE: 10})
    peer.frames()
    peer.send(peer.request(1, end_stream=True))
    stream = peer.app.requests[0][0]
    stream.send_headers(encode_headers([(":status", "200")]))
    assert not stream.send_data(b"x" * 25)
    stream.send_trailers(encode_headers([("grpc-status", "0")]))
    sent = peer.frames()
    assert [(f[0], len(f[3])) for f in sent] == [(fr.HEADERS, 1), (fr.DATA, 10)]
    assert stream.blocked
    peer.send(fr.window_update(1, 10))
    assert [(f[0], len(f[3])) for f in peer.frames()] == [(fr.DATA, 10)]
    assert peer.app.handlers[1].writable_calls == 0
    peer.send(fr.window_update(1, 100))
    rest = peer.frames()
    assert [(f[0], len(f[3]), f[1] & fr.END_STREAM) for f in rest][:1] == [(fr.DATA, 5, 0)]
    assert [(f[0], f[1] & fr.END_STREAM) for f in rest][1:] == [(fr.HEADERS, fr.END_STREAM)]
    assert peer.app.handlers[1].writable_calls == 1
    assert not peer.conn.streams


def test_data_past_the_connections_window_waits_for_its_update():
    peer = Peer(settings={fr.INITIAL_WINDOW_SIZE: 1 << 20})
    peer.frames()
    peer.send(peer.request(1, end_stream=True) + peer.request(3, end_stream=True))
    first, second = (r[0] for r in peer.app.requests)
    assert not first.send_data(b"a" * 70_000, end_stream=True)
    assert not second.send_data(b"b" * 10, end_stream=True)
    sent = sum(len(f[3]) for f in peer.frames() if f[0] == fr.DATA)
    assert sent == fr.DEFAULT_WINDOW
    peer.send(fr.window_update(0, 1 << 20))
    rest = [(f[2], len(f[3])) for f in peer.frames() if f[0] == fr.DATA]
    assert sum(n for s, n in rest if s == 1) == 70_000 - fr.DEFAULT_WINDOW
    assert sum(n for s, n in rest if s == 3) == 10
    assert not peer.conn.streams


def test_data_frames_keep_to_the_peers_frame_size():
    peer = Peer(settings={fr.INITIAL_WINDOW_SIZE: 1 << 20})
    peer.send(fr.window_update(0, 1 << 20))
    peer.frames()
    peer.send(peer.request(1, end_stream=True))
    stream = peer.app.requests[0][0]
    assert stream.send_data(b"z" * 40_000, end_stream=True)
    sizes = [len(f[3]) for f in peer.frames() if f[0] == fr.DATA]
    assert sizes == [16_384, 16_384, 40_000 - 2 * 16_384]


def test_a_smaller_initial_window_can_leave_a_stream_in_debt():
    peer = Peer()
    peer.frames()
    peer.send(peer.request(1, end_stream=True))
    stream = peer.app.requests[0][0]
    assert stream.send_data(b"x" * 1000)
    peer.frames()
    peer.send(fr.settings({fr.INITIAL_WINDOW_SIZE: 500}))
    assert stream.send_window == 500 - 1000
    assert not stream.send_data(b"y")
    peer.send(fr.window_update(1, 500))
    assert [f for f in peer.frames() if f[0] == fr.DATA] == []
    peer.send(fr.window_update(1, 1))
    assert [f[3] for f in peer.frames() if f[0] == fr.DATA] == [b"y"]


def test_streams_over_the_limit_are_refused_unheard():
    peer = Peer(Limits(max_concurrent_streams=2))
    peer.frames()
    peer.send(peer.request(1) + peer.request(3) + peer.request(5))
    assert [r[0].id for r in peer.app.requests] == [1, 3]
    assert resets(peer.frames()) == [(5, ErrorCode.REFUSED_STREAM)]
    # What the refused stream had in flight is dropped without complaint.
    peer.send(data(5, b"late", end_stream=True))
    assert peer.frames() == [] and not peer.conn.closed


def test_a_peer_that_resets_streams_as_fast_as_it_opens_them_is_cut_off():
    peer = Peer(Limits(control_budget=20, control_refill_per_s=0.0))
    peer.frames()
    stream_id = 1
    while not peer.conn.closed and stream_id < 1000:
        peer.send(peer.request(stream_id) + fr.rst_stream(stream_id, ErrorCode.CANCEL))
        stream_id += 2
    assert peer.conn.closed
    assert stream_id < 100
    last, code = peer.goaway()
    assert code == ErrorCode.ENHANCE_YOUR_CALM and last == stream_id - 2
    # Each stream the application had was told it ended, once: by the client's reset, or
    # (the last) by the connection's end.
    told = [h.resets for h in peer.app.handlers.values()]
    assert told[:-1] == [[ErrorCode.CANCEL]] * (len(told) - 1)
    assert told[-1] == [ErrorCode.ENHANCE_YOUR_CALM]


@pytest.mark.parametrize(
    "noise",
    [
        fr.frame(fr.PING, 0, 0, b"12345678"),
        fr.settings({}),
        fr.frame(fr.CONTINUATION, 0, 1, b""),
    ],
    ids=["PING", "SETTINGS", "empty CONTINUATION"],
)
def test_control_frames_without_end_spend_a_budget(noise):
    peer = Peer(Limits(control_budget=50, control_refill_per_s=0.0))
    peer.frames()
    if noise[3] == fr.CONTINUATION:
        # A header block that never ends, one empty CONTINUATION at a time.
        peer.send(fr.frame(fr.HEADERS, 0, 1, encode_headers(REQUEST)))
    for _ in range(200):
        peer.send(noise)
        if peer.conn.closed:
            break
    assert peer.conn.closed
    frames = peer.frames()
    assert struct.unpack(">II", frames[-1][3][:8])[1] == ErrorCode.ENHANCE_YOUR_CALM


def test_a_ping_after_each_answer_is_no_flood():
    """gRPC clients send a PING per burst of data they read, to size their windows."""
    peer = Peer(Limits(control_budget=50, control_refill_per_s=0.0))
    peer.frames()
    for stream_id in range(1, 1000, 2):
        peer.send(peer.request(stream_id, end_stream=True))
        stream = peer.app.requests[-1][0]
        stream.send_headers(encode_headers([(":status", "200")]), end_stream=True)
        peer.send(fr.frame(fr.PING, 0, 0, b"12345678"))
    assert not peer.conn.closed
    assert sum(f[0] == fr.PING for f in peer.frames()) == 500


def test_a_header_block_that_never_ends_is_cut_off_at_its_limit():
    peer = Peer(Limits(max_header_list_size=1024))
    peer.frames()
    peer.send(fr.frame(fr.HEADERS, 0, 1, encode_headers(REQUEST)))
    for _ in range(100):
        peer.send(fr.frame(fr.CONTINUATION, 0, 1, b"\x00" * 500))
        if peer.conn.closed:
            break
    assert peer.conn.closed
    assert peer.goaway()[1] == ErrorCode.ENHANCE_YOUR_CALM
    assert peer.app.requests == []


def test_undecodable_headers_end_the_connection():
    peer = Peer()
    peer.frames()
    peer.send(peer.request(1))
    peer.send(fr.frame(fr.HEADERS, fr.END_HEADERS, 3, b"\xff\xff\xff\xff\xff\xff\xff"))
    assert peer.conn.closed
    last, code = peer.goaway()
    assert code == ErrorCode.COMPRESSION_ERROR and last == 1
    assert peer.app.handlers[1].resets == [ErrorCode.COMPRESSION_ERROR]
    peer.send(peer.request(5))
    assert len(peer.app.requests) == 1 and peer.frames() == []


def test_headers_over_the_list_limit_refuse_the_stream_and_keep_the_table():
    peer = Peer(Limits(max_header_list_size=512))
    peer.frames()
    big = [*REQUEST, ("x-big", "v" * 600)]
    # Incrementally indexed, so the table must hold it afterwards.
    indexed = encode_headers(REQUEST) + b"\x40\x05x-big" + bytes([0x7F, 0xD9, 0x03]) + b"v" * 600
    peer.send(fr.frame(fr.HEADERS, fr.END_HEADERS | fr.END_STREAM, 1, indexed))
    assert peer.app.too_large == [1]
    assert resets(peer.frames()) == [(1, ErrorCode.REFUSED_STREAM)]
    # The next block may name the entry the refused one added: it is still there.
    peer.send(fr.frame(fr.HEADERS, fr.END_HEADERS, 3, encode_headers(REQUEST) + b"\xbe"))
    assert not peer.conn.closed
    assert peer.app.too_large == [1, 3]
    peer.send(peer.request(5))
    assert peer.app.requests[-1][1] == REQUEST
    assert big  # the refused list, for the reader


def test_a_flood_of_header_lists_over_the_limit_ends_the_connection():
    peer = Peer(Limits(oversized_header_budget=10, oversized_header_refill_per_s=0.0))
    peer.frames()
    # One entry, then blocks of 16,000 references to it: each far over the list's limit.
    peer.send(fr.frame(fr.HEADERS, fr.END_HEADERS, 1, encode_headers(REQUEST) + b"\x40\x01x\x01y"))
    bomb = b"\xbe" * 16_000
    stream_id = 3
    while not peer.conn.closed and stream_id < 100:
        peer.send(fr.frame(fr.HEADERS, fr.END_HEADERS | fr.END_STREAM, stream_id, bomb))
        stream_id += 2
    assert len(peer.app.too_large) == 10
    assert peer.goaway()[1] == ErrorCode.ENHANCE_YOUR_CALM
    assert "SETTINGS_MAX_HEADER_LIST_SIZE (16384 octets)" in str(peer.conn.error)


def test_shutting_down_refuses_new_streams_and_closes_once_the_open_ones_end():
    peer = Peer()
    peer.frames()
    peer.send(peer.request(1, end_stream=True))
    peer.conn.shut_down()
    assert peer.goaway() == (1, ErrorCode.NO_ERROR)
    peer.send(peer.request(3, end_stream=True))
    assert len(peer.app.requests) == 1
    assert resets(peer.frames()) == [(3, ErrorCode.REFUSED_STREAM)]
    assert not peer.conn.closed
    peer.app.requests[0][0].send_headers(encode_headers([(":status", "200")]), end_stream=True)
    assert peer.conn.closed


def test_an_answer_before_the_request_ends_stops_the_rest_of_it():
    peer = Peer()
    peer.frames()
    peer.send(peer.request(1) + data(1, b"part"))
    peer.app.requests[0][0].send_headers(encode_headers([(":status", "200")]), end_stream=True)
    assert resets(peer.frames()) == [(1, ErrorCode.NO_ERROR)]
    # What the client had already sent is dropped, and counted towards the window.
    peer.send(data(1, b"x" * 1000, end_stream=True))
    assert peer.frames() == [] and not peer.conn.closed
    assert peer.app.handlers[1].data == [(b"part", False)]


def test_data_after_the_client_ended_its_stream_is_a_stream_error():
    peer = Peer()
    peer.frames()
    peer.send(peer.request(1, end_stream=True))
    peer.send(data(1, b"more"))
    assert resets(peer.frames()) == [(1, ErrorCode.STREAM_CLOSED)]
    assert peer.app.handlers[1].resets == [ErrorCode.STREAM_CLOSED]


@pytest.mark.parametrize(
    "headers",
    [
        [(n.upper() if n == "te" else n, v) for n, v in REQUEST],
        [f for f in REQUEST if f[0] != ":path"],
        [*REQUEST, ("connection", "keep-alive")],
        [*REQUEST[:4], ("te", "gzip"), REQUEST[4]],
        [REQUEST[4], *REQUEST[:4]],
        [*REQUEST, ("", "x")],
        [*REQUEST, ("x-note", "one\r\ntwo")],
    ],
    ids=[
        "uppercase",
        "no :path",
        "connection header",
        "te not trailers",
        "pseudo after",
        "empty name",
        "line break in a value",
    ],
)
def test_malformed_requests_are_reset_unheard(headers):
    peer = Peer()
    peer.frames()
    peer.send(peer.request(1, headers=headers))
    assert peer.app.requests == []
    assert resets(peer.frames()) == [(1, ErrorCode.PROTOCOL_ERROR)]
    peer.send(peer.request(3))
    assert [r[0].id for r in peer.app.requests] == [3]


def test_a_grant_opens_the_streams_window_and_padding_is_given_back():
    peer = Peer()
    peer.frames()
    peer.send(peer.request(1))
    stream = peer.app.requests[0][0]
    stream.grant(100_000)
    assert [(f[0], f[2], fr.read_word(f[3])) for f in peer.frames()] == [
        (fr.WINDOW_UPDATE, 1, 100_000)
    ]
    padded = fr.frame(fr.DATA, fr.PADDED, 1, b"\x0a" + b"abc" + b"\x00" * 10)
    peer.send(padded)
    assert peer.app.handlers[1].data == [(b"abc", False)]
    assert [(f[2], fr.read_word(f[3])) for f in peer.frames()] == [(1, 11)]


def test_a_stream_that_sends_past_its_window_is_reset():
    peer = Peer()
    peer.frames()
    peer.send(peer.request(1) + peer.request(3))
    # Stream 3's reservation opens the connection's window; stream 1's stays as it was.
    assert peer.app.requests[1][0].reserve(1 << 20)
    big = fr.DEFAULT_WINDOW + 1
    peer.send(b"".join(data(1, b"x" * 16_384) for _ in range(big // 16_384)))
    peer.send(data(1, b"x" * (big % 16_384)))
    assert resets(peer.frames()) == [(1, ErrorCode.FLOW_CONTROL_ERROR)]
    assert not peer.conn.closed


def test_data_past_the_connections_window_ends_the_connection():
    peer = Peer()
    peer.frames()
    peer.send(peer.request(1) + peer.request(3))
    peer.send(data(1, b"x" * 16_000) * 2 + data(3, b"y" * 16_000) * 2 + data(3, b"y" * 1_535))
    assert not peer.conn.closed
    peer.send(data(3, b"y"))
    assert peer.goaway()[1] == ErrorCode.FLOW_CONTROL_ERROR


def window_updates(frames, stream_id=0):  # type: ignore[no-untyped-def]
    return [fr.read_word(f[3]) for f in frames if f[0] == fr.WINDOW_UPDATE and f[2] == stream_id]


def test_the_connection_window_comes_back_as_handlers_release_what_they_took():
    peer = Peer()
    peer.frames()
    peer.send(peer.request(1) + data(1, b"x" * 16_000) * 3)
    stream = peer.app.requests[0][0]
    # Held by the handler: the window stays shut.
    assert stream.held == peer.conn.held == 48_000
    assert window_updates(peer.frames()) == []
    stream.release(10_000)
    assert window_updates(peer.frames()) == []  # less than a quarter: it waits
    stream.release(38_000)
    assert window_updates(peer.frames()) == [48_000]
    assert peer.conn.held == 0


def test_what_no_handler_holds_comes_back_without_a_release():
    peer = Peer()
    peer.frames()
    padded = fr.frame(fr.DATA, fr.PADDED, 1, b"\xff" + b"abc" + b"\x00" * 255)
    peer.send(peer.request(1) + padded * 400)
    # 400 x 259 flow-controlled octets: past the 65,535, yet padding is no one's to hold.
    assert not peer.conn.closed
    assert peer.conn.held == 1_200
    given_back = sum(window_updates(peer.frames()))
    assert fr.DEFAULT_WINDOW + given_back - 1_200 >= 400 * 259 - 16_384
    # DATA on a stream reset here (in flight when it was) is dropped and given back too.
    peer.app.requests[0][0].reset(ErrorCode.CANCEL)
    peer.frames()
    peer.send(data(1, b"z" * 16_000) * 2)
    assert sum(window_updates(peer.frames())) >= 1_200 + 32_000 - 16_384


def test_a_reset_stream_gives_back_what_its_handler_held():
    peer = Peer()
    peer.frames()
    peer.send(peer.request(1) + data(1, b"x" * 15_000) * 4)
    peer.frames()
    peer.send(fr.rst_stream(1, ErrorCode.CANCEL))
    assert window_updates(peer.frames()) == [60_000]
    assert peer.conn.held == 0


def test_a_reservation_opens_the_connections_window_only_as_far_as_the_streams():
    peer = Peer()
    peer.frames()
    peer.send(peer.request(1))
    stream = peer.app.requests[0][0]
    assert stream.reserve(4 << 20)
    # Room for 4 MiB, but the stream's window lets the peer send its 65,535 only.
    assert window_updates(peer.frames()) == [fr.DEFAULT_WINDOW]
    stream.grant(1 << 20)
    sent = peer.frames()
    assert window_updates(sent, 1) == [1 << 20]
    assert window_updates(sent) == [1 << 20]
    peer.send(data(1, b"x" * 16_384) * 64)
    assert stream.held == 1 << 20
    # Taken and unreserved: the window shrinks back to the protocol's own.
    stream.release(stream.held)
    stream.unreserve()
    assert window_updates(peer.frames()) == []
    assert peer.conn.reserved == 0


def test_reservations_past_the_connections_budget_wait_their_turn():
    peer = Peer(Limits(buffer_budget=1 << 20))
    peer.frames()
    peer.send(peer.request(1) + peer.request(3) + peer.request(5))
    first, second, third = (r[0] for r in peer.app.requests)
    assert first.reserve(600_000)
    assert not second.reserve(600_000)
    # Small enough to fit, but behind the one waiting: it waits too.
    assert not third.reserve(100_000)
    assert peer.conn.reserved == 600_000
    first.unreserve()
    assert peer.app.handlers[3].rooms_reserved == 1
    assert peer.app.handlers[5].rooms_reserved == 1
    assert peer.conn.reserved == 700_000


def test_connections_sharing_a_budget_wait_for_each_other_and_give_it_all_back():
    budget = ReceiveBudget(1 << 20)
    a, b = Peer(budget=budget), Peer(budget=budget)
    for peer in (a, b):
        peer.frames()
        peer.send(peer.request(1))
    first = a.app.requests[0][0]
    assert first.reserve(800_000)
    first.grant(700_000)
    assert not b.app.requests[0][0].reserve(800_000)
    assert budget.used == 800_000 and budget.waiting == 1
    # Reset, but A's peer may still send what its connection's window allows: that much
    # stays claimed, and B still waits.
    a.send(fr.rst_stream(1, ErrorCode.CANCEL))
    assert budget.used == fr.DEFAULT_WINDOW + 700_000
    assert b.app.handlers[1].rooms_reserved == 0
    a.conn.connection_lost()
    assert b.app.handlers[1].rooms_reserved == 1
    assert budget.used == 800_000 and budget.waiting == 0
    b.conn.connection_lost()
    assert budget.used == 0


def test_the_decoder_is_the_one_the_peers_encoder_talks_to():
    # A request whose fields enter the table, then one that only names them.
    first = b"\x83\x86" + b"\x44\x0b/svc/Method" + b"\x41\x09localhost"
    first += b"\x40\x0ccontent-type\x10application/grpc" + b"\x40\x02te\x08trailers"
    peer = Peer()
    peer.frames()
    peer.send(fr.frame(fr.HEADERS, fr.END_HEADERS, 1, first))
    peer.send(fr.frame(fr.HEADERS, fr.END_HEADERS, 3, b"\x83\x86\xc1\xc0\xbf\xbe"))
    expected = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/svc/Method"),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]
    assert [r[1] for r in peer.app.requests] == [expected, expected]
    assert HeaderDecoder().decode(first) == expected


class Forgetful:
    """An application that keeps nothing of its streams: the connection alone holds them."""

    def request(self, stream: Stream, headers: list[tuple[str, str]], end_stream: bool) -> None:
        stream.reset(ErrorCode.REFUSED_STREAM)

    def headers_too_large(self, stream: Stream) -> None:
        stream.reset(ErrorCode.REFUSED_STREAM)


@pytest.mark.parametrize("fault", ["PUSH_PROMISE", "header lists over the limit"])
def test_a_connection_ended_by_the_peers_error_is_freed_as_soon_as_it_is_dropped(fault):
    # With the collector off, as between two of its passes in a busy broker: nothing of a
    # failed connection (the input chunk its error was raised over included) may wait for
    # one. Flooding clients made the broker hold hundreds of MiB of such chunks.
    conn = ServerConnection(Forgetful(), Limits(oversized_header_refill_per_s=0.0))
    conn.receive(fr.PREFACE + fr.settings({}))
    if fault == "PUSH_PROMISE":
        chunk = fr.frame(fr.PUSH_PROMISE, fr.END_HEADERS, 1, b"\x00\x00\x00\x02")
    else:
        entry = fr.frame(fr.HEADERS, fr.END_HEADERS, 1, encode_headers(REQUEST) + b"\x40\x01x\x01v")
        bomb = encode_headers(REQUEST) + b"\xbe" * 16_000
        flags = fr.END_HEADERS | fr.END_STREAM
        chunk = entry + b"".join(fr.frame(fr.HEADERS, flags, n, bomb) for n in range(3, 201, 2))
    gc.disable()
    try:
        conn.receive(chunk)
        assert conn.closed and conn.error is not None
        gone = weakref.ref(conn)
        del conn
        assert gone() is None, "a failed connection waits for the collector"
    finally:
        gc.enable()
