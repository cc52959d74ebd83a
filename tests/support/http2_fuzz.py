"""Seeded fuzzing of the HTTP/2 server core (frontdoor/http2/connection.py) and its HPACK decoder.

One case is one seed: the seed alone decides the bytes a client sends (a preface,
settings, requests encoded by python-hyper's ``hpack``, DATA, window updates, resets,
pings, frames of every type with random flags, then maybe mutated: bits flipped,
octets cut, repeated or inserted), how they are cut into reads, and what the
application answers. The same seed is the same case on every machine, so a failure
is reproduced by its seed alone.

What must hold, after every read:

* ``receive()`` never raises: a protocol error ends the connection with GOAWAY, a
  stream error resets the stream, and nothing else happens to a server.
* Everything written parses as HTTP/2 frames (python-hyper's ``hyperframe`` is the
  judge), of the types a server sends, no longer than the client's
  SETTINGS_MAX_FRAME_SIZE; after a GOAWAY with an error, nothing more is written.
* What the connection holds (octets of buffers, header fragments, queued output and
  tables; one unit per entry of its lists and dicts) stays under a bound set by its
  limits plus what the application itself queued: nothing grows with what the peer
  sends. Open streams never exceed SETTINGS_MAX_CONCURRENT_STREAMS.
* The HPACK decoder returns a header list within its limit or raises its own errors
  (HpackError, HeaderListTooLarge), its table within its capacity; with no list limit
  it gives python-hyper's decoder's answer on the same input.

The control budget is given no refill, so a case does not depend on the clock.

``tests/unit/frontdoor/http2/test_fuzz.py`` runs a bounded number of cases in the normal run;
``scripts/fuzz-http2`` runs as many as asked (``--help``).
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import struct
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import hpack
from hyperframe.exceptions import HyperframeError
from hyperframe.frame import Frame

from skiff_broker.frontdoor.http2 import frames as fr
from skiff_broker.frontdoor.http2.connection import Limits, ServerConnection, Stream
from skiff_broker.frontdoor.http2.frames import ConnectionFault, ErrorCode
from skiff_broker.frontdoor.http2.hpack import (
    HeaderDecoder,
    HeaderListTooLarge,
    HpackError,
    encode_headers,
)

# Raises the max_examples of the hypothesis tests in tests/unit/frontdoor/http2 (bounded_examples).
EXAMPLES_ENV = "SKIFF_HTTP2_EXAMPLES"

# The frame types a server sends (never PUSH_PROMISE: Skiff does not push).
SERVER_FRAME_TYPES = frozenset(
    (fr.DATA, fr.HEADERS, fr.CONTINUATION, fr.SETTINGS, fr.PING, fr.GOAWAY)
) | {fr.RST_STREAM, fr.WINDOW_UPDATE}
# Units a connection may hold beyond its frame and header-block limits: the settings,
# tables and the streams it remembers having reset (a bounded memory of its own).
FIXED_ALLOWANCE = 16_384
PER_STREAM_ALLOWANCE = 64


def bounded_examples(default: int) -> Any:
    """Hypothesis settings for a test of ``default`` cases: derandomized (the same cases
    each run), no deadline (the machine is shared), raised by SKIFF_HTTP2_EXAMPLES."""
    from hypothesis import HealthCheck, settings

    wanted = int(os.environ.get(EXAMPLES_ENV) or 0)
    return settings(
        max_examples=max(default, wanted),
        derandomize=True,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def mutated(data: bytes, rng: random.Random) -> bytes:
    """``data`` with up to four mutations: bits flipped, octets set, cut, repeated, added."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(6)
        at = rng.randint(0, len(out))
        if kind == 0 and out:
            at = min(at, len(out) - 1)
            out[at] ^= 1 << rng.randrange(8)
        elif kind == 1 and out:
            at = min(at, len(out) - 1)
            out[at] = rng.choice((0x00, 0x7F, 0x80, 0xFF, rng.randrange(256)))
        elif kind == 2:
            del out[at : at + rng.randint(1, 16)]
        elif kind == 3:
            out[at:at] = out[at : at + rng.randint(1, 32)]
        elif kind == 4:
            out[at:at] = rng.randbytes(rng.randint(1, 8))
        else:
            del out[at:]
    return bytes(out)


class FuzzFailure(AssertionError):
    """A case broke an invariant; the message names the seed that reproduces it."""


# -- what a client sends ------------------------------------------------------------------------

REQUEST = [
    (":method", "POST"),
    (":scheme", "http"),
    (":path", "/apache.rocketmq.v2.MessagingService/SendMessage"),
    (":authority", "127.0.0.1"),
    ("content-type", "application/grpc"),
    ("te", "trailers"),
]
SOUND_FIELDS = [
    ("grpc-timeout", "3S"),
    ("x-mq-client-id", "fuzz@1"),
    ("user-agent", "fuzz/1"),
    ("grpc-encoding", "identity"),
]
EXTRA_FIELDS = [
    ("content-length", "5"),
    ("content-length", "x"),
    ("Upper", "case"),
    ("connection", "close"),
    ("te", "gzip"),
    (":status", "200"),
    ("x-big", "v" * 3000),
    ("x-nul", "a\x00b"),
]


# A wild SETTINGS value; 0 stands for a random one as well.
WILD_SETTING_VALUES = (0, 0, 1, 2, 100, 16_385, fr.MAX_WINDOW, fr.MAX_WINDOW + 1, 1 << 24)


def _frame(frame_type: int, flags: int, stream_id: int, payload: bytes) -> bytes:
    return fr.frame_header(frame_type, flags, stream_id, len(payload)) + payload


class _Client:
    """Frames a client sends: mostly what a real one would, some share (``wild``, chosen per
    case) of frames no client should send. One encoder, so later header blocks refer to
    its dynamic table."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.wild = rng.choice((0.0, 0.02, 0.1, 0.5))
        self.encoder = hpack.Encoder()
        self.next_id = 1
        self.used: list[int] = []

    def is_wild(self) -> bool:
        return self.rng.random() < self.wild

    def new_stream(self) -> int:
        rng = self.rng
        if self.is_wild():
            return rng.choice(
                (0, 2, max(self.next_id - 2, 0), fr.STREAM_MASK, rng.randrange(1 << 32))
            )
        stream_id = self.next_id
        self.next_id += rng.choice((2, 2, 2, 4, 100))
        self.used.append(stream_id)
        return stream_id

    def old_stream(self) -> int:
        """A stream the client opened (mostly a recent one), or, when wild, any."""
        rng = self.rng
        if not self.used or self.is_wild():
            return rng.choice((0, self.next_id, rng.randrange(1 << 31)))
        return self.used[-1] if rng.random() < 0.5 else rng.choice(self.used)

    def settings(self) -> bytes:
        rng = self.rng
        if rng.random() < 0.2:
            return fr.SETTINGS_ACK
        values: dict[int, int] = {}
        wild = self.is_wild()
        for _ in range(rng.randint(0, 4)):
            if wild:
                key = rng.randrange(1 << 16) if rng.random() < 0.2 else rng.randint(1, 6)
                values[key] = rng.choice(WILD_SETTING_VALUES) or rng.randrange(1 << 32)
                continue
            key = rng.randint(1, 6)
            values[key] = {
                fr.HEADER_TABLE_SIZE: rng.choice((0, 4096, 65_536)),
                fr.ENABLE_PUSH: rng.choice((0, 1)),
                fr.MAX_CONCURRENT_STREAMS: rng.choice((0, 100, 1 << 31)),
                fr.INITIAL_WINDOW_SIZE: rng.choice((0, 1, 100, fr.DEFAULT_WINDOW, 1 << 20)),
                fr.MAX_FRAME_SIZE: rng.choice((16_384, 65_536, fr.MAX_FRAME_SIZE_LIMIT)),
                fr.MAX_HEADER_LIST_SIZE: rng.choice((0, 8192, 1 << 20)),
            }[key]
        return fr.settings(values)

    def header_block(self) -> bytes:
        rng = self.rng
        if self.is_wild():
            return rng.randbytes(rng.randint(0, 30))
        headers = list(REQUEST)
        if self.is_wild():
            headers = rng.sample(REQUEST, 3)
        headers += rng.sample(EXTRA_FIELDS if self.is_wild() else SOUND_FIELDS, rng.choice((0, 1)))
        if rng.random() < 0.05:
            self.encoder.header_table_size = rng.choice(
                (0, 64, 4096, 8192 if self.is_wild() else 0)
            )
        sensitive = rng.random() < 0.2
        return self.encoder.encode(
            [(n, v, sensitive) for n, v in headers], huffman=rng.random() < 0.5
        )

    def headers(self, trailers: bool = False) -> bytes:
        """A request's HEADERS (or trailers), maybe padded, with priority, in pieces."""
        rng = self.rng
        stream_id = self.old_stream() if trailers else self.new_stream()
        block = self.header_block() if not trailers else hpack.Encoder().encode([("x-t", "1")])
        flags = fr.END_STREAM if trailers or rng.random() < 0.3 else 0
        prefix = b""
        if rng.random() < 0.2:
            flags |= fr.PRIORITY_FLAG
            depends_on = stream_id if self.is_wild() else rng.choice((0, 1, 1 << 31))
            prefix = struct.pack(">IB", depends_on, rng.randrange(256))
        pieces = [block]
        if len(block) > 1 and rng.random() < 0.3:
            cut = sorted(rng.sample(range(1, len(block)), min(len(block) - 1, rng.randint(1, 3))))
            pieces = [block[a:b] for a, b in zip([0, *cut], [*cut, len(block)], strict=True)]
        first_flags, payload = self.padded(flags, prefix + pieces[0])
        end = fr.END_HEADERS if len(pieces) == 1 else 0
        out = [_frame(fr.HEADERS, first_flags | end, stream_id, payload)]
        for i, piece in enumerate(pieces[1:], 2):
            end = fr.END_HEADERS if i == len(pieces) else 0
            out.append(_frame(fr.CONTINUATION, end, stream_id, piece))
        return b"".join(out)

    def padded(self, flags: int, payload: bytes) -> tuple[int, bytes]:
        rng = self.rng
        if rng.random() < 0.7:
            return flags, payload
        if self.is_wild():
            pad = min(rng.choice((len(payload) + 1, 255)), 255)
        else:
            pad = rng.choice((0, 1, rng.randint(0, 40)))
        return flags | fr.PADDED, bytes([pad]) + payload + b"\0" * pad

    def data(self) -> bytes:
        rng = self.rng
        size = rng.choice((0, 1, 5, 100, 1000, rng.randint(0, 16_000)))
        end = fr.END_STREAM if rng.random() < 0.3 else 0
        flags, payload = self.padded(end, rng.randbytes(size))
        return _frame(fr.DATA, flags, self.old_stream(), payload)

    def frame(self) -> bytes:
        rng = self.rng
        if not self.used:
            return self.headers()
        if self.is_wild():
            return self.wild_frame()
        kind = rng.choices(range(10), weights=(20, 35, 10, 4, 4, 3, 6, 2, 2, 2))[0]
        if kind == 0:
            return self.headers()
        if kind == 1:
            return self.data()
        if kind == 2:
            stream_id = 0 if rng.random() < 0.4 else self.old_stream()
            return fr.window_update(stream_id, rng.choice((1, 1000, 65_535, 1 << 20)))
        if kind == 3:
            return fr.rst_stream(self.old_stream(), rng.choice((ErrorCode.CANCEL, 0, 99)))
        if kind == 4:
            return _frame(fr.PING, fr.ACK if rng.random() < 0.2 else 0, 0, rng.randbytes(8))
        if kind == 5:
            return self.settings()
        if kind == 6:
            return self.headers(trailers=True)
        if kind == 7:
            return _frame(fr.PRIORITY, 0, self.old_stream(), struct.pack(">IB", 0, 16))
        if kind == 8:
            return _frame(rng.randint(10, 255), rng.randrange(256), self.old_stream(), b"ext")
        return fr.goaway(self.next_id, rng.choice((ErrorCode.NO_ERROR, ErrorCode.CANCEL)), b"bye")

    def wild_frame(self) -> bytes:
        """A frame no client should send: wrong lengths, streams and values, or any bytes."""
        rng = self.rng
        kind = rng.randrange(8)
        if kind == 0:
            increment = rng.choice((0, fr.MAX_WINDOW, rng.randrange(1 << 32)))
            return fr.window_update(rng.choice((0, self.old_stream())), increment)
        if kind == 1:
            return _frame(fr.PING, 0, rng.choice((0, 1)), rng.randbytes(rng.randint(0, 12)))
        if kind == 2:
            return _frame(fr.PUSH_PROMISE, fr.END_HEADERS, 1, b"\0\0\0\2")
        if kind == 3:
            return _frame(fr.PRIORITY, 0, self.old_stream(), rng.randbytes(rng.choice((4, 6))))
        if kind == 4:
            return _frame(
                rng.choice((fr.RST_STREAM, fr.WINDOW_UPDATE, fr.SETTINGS)), 0, 0, b"12345"
            )
        if kind == 5:
            return self.settings()
        if kind == 6:
            return _frame(fr.CONTINUATION, fr.END_HEADERS, self.old_stream(), b"\x82")
        return _frame(
            rng.randrange(10),
            rng.randrange(256),
            self.old_stream(),
            rng.randbytes(rng.choice((0, 4, 5, 8, rng.randint(0, 64)))),
        )


def client_input(rng: random.Random) -> list[bytes]:
    """One case's bytes, as the reads the server gets."""
    client = _Client(rng)
    opening = fr.PREFACE if rng.random() < 0.98 else mutated(fr.PREFACE, rng)
    if rng.random() < 0.98:
        opening += client.settings() if rng.random() < 0.8 else fr.settings({})
    # Some cases are long: what a connection holds must not grow with what it is sent.
    count = rng.randint(0, 60) if rng.random() < 0.9 else rng.randint(200, 400)
    stream = opening + b"".join(client.frame() for _ in range(count))
    if rng.random() < 0.3:
        stream = mutated(stream, rng)
    reads = []
    pos = 0
    while pos < len(stream):
        size = rng.choice((1, 9, 64, 4096, len(stream)))
        reads.append(stream[pos : pos + size])
        pos += size
    return reads


# -- the application ----------------------------------------------------------------------------

RESPONSE_HEADERS = encode_headers([(":status", "200"), ("content-type", "application/grpc")])
TRAILERS = encode_headers([("grpc-status", "0")])


class _Handler:
    def __init__(self, app: _App, stream: Stream) -> None:
        self.app = app
        self.stream = stream

    def data_received(self, data: bytes, end_stream: bool) -> None:
        rng = self.app.rng
        if data and rng.random() < 0.8:
            self.stream.grant(len(data))
        if end_stream or rng.random() < 0.1:
            self.app.later.append(self.stream)

    def reset(self, code: int) -> None:
        self.app.resets += 1

    def writable(self) -> None:
        if self.app.rng.random() < 0.5:
            self.app.answer(self.stream)


class _App:
    """Answers as the gRPC layer might: at once, later, in pieces, or by a reset."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.later: collections.deque[Stream] = collections.deque()
        self.queued = 0  # octets of frame payloads the application handed to streams
        self.resets = 0

    def request(self, stream: Stream, headers: list[tuple[str, str]], end_stream: bool) -> None:
        for name, value in headers:
            if type(name) is not str or type(value) is not str:
                raise FuzzFailure(f"a header field that is not text: {(name, value)!r}")
        stream.handler = _Handler(self, stream)
        action = self.rng.random()
        if action < 0.3:
            self.answer(stream)
        elif action < 0.4:
            stream.reset(self.rng.choice((ErrorCode.CANCEL, ErrorCode.INTERNAL_ERROR)))
        elif action < 0.6:
            stream.grant(self.rng.choice((1, 1000, 1 << 20)))
            self.later.append(stream)
        else:
            self.later.append(stream)

    def headers_too_large(self, stream: Stream) -> None:
        if self.rng.random() < 0.5:
            stream.send_headers(encode_headers([(":status", "431")]), end_stream=True)
        else:
            stream.reset(ErrorCode.REFUSED_STREAM)

    def answer(self, stream: Stream) -> None:
        rng = self.rng
        if stream.local_closed:
            return  # answered already: the stream takes no more
        body = b"\0" * rng.choice((0, 5, 1000, 70_000))
        if rng.random() < 0.3:
            framed = (
                _frame(fr.HEADERS, fr.END_HEADERS, stream.id, RESPONSE_HEADERS)
                + _frame(fr.DATA, 0, stream.id, body[:100])
                + _frame(fr.HEADERS, fr.END_HEADERS | fr.END_STREAM, stream.id, TRAILERS)
            )
            if stream.send_response(framed, len(body[:100])):
                self.queued += len(RESPONSE_HEADERS) + len(body[:100]) + len(TRAILERS)
                return
        stream.send_headers(RESPONSE_HEADERS)
        self.queued += len(RESPONSE_HEADERS) + len(body)
        if body:
            stream.send_data(body, end_stream=rng.random() < 0.2)
        if not stream.local_closed:
            stream.send_trailers(TRAILERS)
            self.queued += len(TRAILERS)

    def tick(self) -> None:
        """Between reads: some of the streams left waiting are answered now."""
        for _ in range(len(self.later)):
            stream = self.later.popleft()
            if self.rng.random() < 0.5:
                self.answer(stream)
            else:
                self.later.append(stream)


# -- the checks ---------------------------------------------------------------------------------


def held_units(root: object) -> int:
    """What ``root`` holds: octets of its byte and text strings, one unit per entry of its
    containers, through the http2 package's own objects (not the application's)."""
    seen: set[int] = set()
    total = 0
    todo: list[object] = [root]
    while todo:
        item = todo.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, bytes | bytearray | str):
            total += len(item)
        elif isinstance(item, memoryview):
            total += item.nbytes
        elif isinstance(item, dict):
            total += len(item)
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset | collections.deque):
            total += len(item)
            todo.extend(item)
        elif any(
            cls.__module__.startswith("skiff_broker.frontdoor.http2") for cls in type(item).__mro__
        ):
            todo.extend(_attributes(item))
    return total


def _attributes(item: object) -> Iterator[object]:
    yield from getattr(item, "__dict__", {}).values()
    for cls in type(item).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if hasattr(item, name):
                yield getattr(item, name)


def _bound(conn: ServerConnection) -> int:
    """What a connection may hold: a partial frame (or preface), a header block being
    gathered, its fixed state, and what each open stream needs."""
    limits = conn.limits
    return (
        fr.HEADER_SIZE
        + limits.max_frame_size
        + len(fr.PREFACE)
        + limits.max_header_block
        + FIXED_ALLOWANCE
        + PER_STREAM_ALLOWANCE * len(conn.streams)
    )


class _WatchedConnection(ServerConnection):
    """A server connection that remembers the largest SETTINGS_MAX_FRAME_SIZE its peer
    ever set: frames written while it was in effect may be that long, even when a later
    SETTINGS in the same read lowered it."""

    largest_frame = fr.DEFAULT_FRAME_SIZE

    @property  # type: ignore[override]
    def peer_max_frame_size(self) -> int:
        return self._peer_max_frame_size

    @peer_max_frame_size.setter
    def peer_max_frame_size(self, value: int) -> None:
        self._peer_max_frame_size = value
        self.largest_frame = max(self.largest_frame, value)


class _Watch:
    """Checks one connection's output and state after each read."""

    def __init__(self, conn: _WatchedConnection, app: _App) -> None:
        self.conn = conn
        self.app = app
        self.ended_with: int | None = None  # the error code of a GOAWAY sent
        self.written = 0  # octets of DATA, HEADERS and CONTINUATION payloads written

    def check(self) -> None:
        conn = self.conn
        self._output(conn.take_output())
        if len(conn.streams) > conn.limits.max_concurrent_streams:
            raise FuzzFailure(f"{len(conn.streams)} open streams, over the limit")
        for stream in conn.streams.values():
            if getattr(stream, "recv_window", 0) > fr.MAX_WINDOW:
                raise FuzzFailure(f"stream {stream.id} granted a window over 2^31-1")
        held = held_units(conn)
        # What the application queued and is not yet written may wait on the streams.
        bound = _bound(conn) + max(0, self.app.queued - self.written)
        if held > bound:
            raise FuzzFailure(f"the connection holds {held} units, over {bound}")
        if conn.error is not None and not isinstance(conn.error.code, ErrorCode):
            raise FuzzFailure(f"a connection error with code {conn.error.code!r}")

    def _output(self, out: bytes) -> None:
        pos = 0
        while pos < len(out):
            if self.ended_with not in (None, ErrorCode.NO_ERROR):
                raise FuzzFailure(f"output after GOAWAY {self.ended_with}: {out[pos:][:40]!r}")
            if len(out) - pos < fr.HEADER_SIZE:
                raise FuzzFailure(f"a partial frame header written: {out[pos:]!r}")
            frame, length = Frame.parse_frame_header(memoryview(out[pos : pos + fr.HEADER_SIZE]))
            body = out[pos + fr.HEADER_SIZE : pos + fr.HEADER_SIZE + length]
            if len(body) < length:
                raise FuzzFailure(f"a frame cut short: {out[pos:][:40]!r}")
            if frame.type not in SERVER_FRAME_TYPES:
                raise FuzzFailure(f"a frame of type {frame.type} written")
            if length > self.conn.largest_frame:
                raise FuzzFailure(f"a frame of {length} octets, over {self.conn.largest_frame}")
            try:
                frame.parse_body(memoryview(body))
            except HyperframeError as error:
                problem = f"a malformed frame written: {error}: {out[pos:][:40]!r}"
                raise FuzzFailure(problem) from None
            if frame.type in (fr.DATA, fr.HEADERS, fr.CONTINUATION):
                self.written += length
            if frame.type == fr.GOAWAY:
                self.ended_with = frame.error_code  # type: ignore[attr-defined]
            pos += fr.HEADER_SIZE + length


def fuzz_connection(seed: int) -> None:
    """One case of the connection; FuzzFailure (naming the seed) if an invariant breaks."""
    rng = random.Random(seed)
    reads = client_input(rng)
    limits = Limits(
        max_concurrent_streams=rng.choice((1, 4, 100, 1000)),
        max_header_list_size=rng.choice((200, 1024, 16_384, 16_384)),
        control_budget=rng.choice((3, 50, 2_000)),
        control_refill_per_s=0.0,
    )
    app = _App(random.Random(seed ^ 0x5EED))
    _run_case(seed, reads, lambda: _connection_case(reads, limits, app, rng))


def _connection_case(reads: list[bytes], limits: Limits, app: _App, rng: random.Random) -> None:
    conn = _WatchedConnection(app, limits)
    watch = _Watch(conn, app)
    watch.check()
    for data in reads:
        conn.receive(data)
        watch.check()
        app.tick()
        if rng.random() < 0.02:
            conn.shut_down()
        watch.check()
    conn.connection_lost()
    watch.check()
    if conn.streams:
        raise FuzzFailure(f"{len(conn.streams)} streams left after the connection was lost")


def fuzz_hpack(seed: int) -> None:
    """One case of the HPACK decoder; FuzzFailure (naming the seed) if an invariant breaks."""
    rng = random.Random(seed)
    _run_case(seed, [], lambda: _hpack_case(rng))


def _hpack_case(rng: random.Random) -> None:
    max_table_size = rng.choice((0, 1, 100, 4096))
    unlimited = rng.random() < 0.5
    list_limit = 1 << 24 if unlimited else rng.choice((0, 50, 300, 4096))
    decoder = HeaderDecoder(max_table_size=max_table_size, max_header_list_size=list_limit)
    oracle = hpack.Decoder(max_header_list_size=list_limit)
    oracle.max_allowed_table_size = oracle.header_table_size = max_table_size
    encoder = hpack.Encoder()
    for _ in range(rng.randint(1, 6)):
        if rng.random() < 0.2:
            block = rng.randbytes(rng.randint(0, 64))
        else:
            if rng.random() < 0.2:
                encoder.header_table_size = rng.randint(0, max_table_size + 1)
            headers = [
                (rng.choice(("x-a", "te", ":path", "cookie")), rng.randbytes(rng.randint(0, 300)))
                for _ in range(rng.randint(0, 8))
            ]
            block = encoder.encode(headers, huffman=rng.random() < 0.5)
            if rng.random() < 0.6:
                block = mutated(block, rng)
        try:
            headers_out = decoder.decode(block)
        except (HpackError, HeaderListTooLarge):
            headers_out = None
        if decoder.dynamic_table_size > decoder.table_capacity or (
            decoder.table_capacity > max_table_size
        ):
            raise FuzzFailure(f"table of {decoder.dynamic_table_size} octets: {block.hex()}")
        if headers_out is not None:
            if sum(len(n) + len(v) + 32 for n, v in headers_out) > list_limit:
                raise FuzzFailure(f"a list over {list_limit} returned for {block.hex()}")
            if any(type(n) is not str or type(v) is not str for n, v in headers_out):
                raise FuzzFailure(f"a field that is not text from {block.hex()}")
        if not unlimited:
            if headers_out is None:
                return
            continue
        try:
            expected = [(bytes(n), bytes(v)) for n, v in oracle.decode(block, raw=True)]
        except hpack.HPACKError:
            expected = None
        got = (
            None
            if headers_out is None
            else [(n.encode("latin-1"), v.encode("latin-1")) for n, v in headers_out]
        )
        if got != expected:
            raise FuzzFailure(f"{block.hex()}: Skiff decodes {got!r}, hpack {expected!r}")
        if got is None:
            return


def _run_case(seed: int, reads: list[bytes], case: Callable[[], None]) -> None:
    try:
        case()
    except FuzzFailure as failure:
        raise FuzzFailure(f"seed {seed}: {failure}") from None
    except (ConnectionFault, HpackError, HeaderListTooLarge) as error:
        raise FuzzFailure(f"seed {seed}: a protocol error escaped: {error!r}") from error
    except Exception as error:
        where = traceback.format_exc(limit=-3)
        raise FuzzFailure(f"seed {seed}: {error!r} escaped\n{where}") from error


TARGETS: dict[str, Callable[[int], None]] = {
    "connection": fuzz_connection,
    "hpack": fuzz_hpack,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/fuzz-http2",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Fuzz Skiff's HTTP/2 server core (broker/skiff_broker/frontdoor/http2/connection.py) and its
HPACK decoder (frontdoor/http2/hpack.py) with seeded cases.

connection: a client's bytes (preface, settings, requests, DATA, window updates,
  resets, pings, frames of any type, flags and length; then maybe mutated), cut into
  reads, against a server connection whose application answers, grants and resets.
  After every read: nothing but the protocol's own errors, only well-formed frames
  written (python-hyper's hyperframe parses them), nothing held beyond the limits.
hpack: header blocks from python-hyper's hpack encoder, mutated, and random octets:
  only HpackError or HeaderListTooLarge, the table within its capacity, and with no
  list limit the same answer as hpack's decoder.

Each case is decided by its seed alone: a failure prints the seed and the command
that reproduces it. The normal test run covers the first few hundred seeds
(tests/unit/frontdoor/http2/test_fuzz.py).""",
        epilog="""\
examples:
  scripts/fuzz-http2 --cases 200000
  scripts/fuzz-http2 --cases 50000 --seed "$RANDOM$RANDOM" --oracles 5000
  scripts/fuzz-http2 --target hpack --seed 123456 --cases 1""",
    )
    parser.add_argument(
        "--cases", type=int, default=20_000, help="cases per target (default: 20000)"
    )
    parser.add_argument("--seed", type=int, default=0, help="the first case's seed (default: 0)")
    parser.add_argument(
        "--target", choices=[*TARGETS, "all"], default="all", help="what to fuzz (default: all)"
    )
    parser.add_argument(
        "--oracles",
        type=int,
        default=0,
        metavar="N",
        help=(
            "then run the differential tests against python-hyper's hpack and hyperframe "
            f"(tests/unit/frontdoor/http2/test_*_oracle.py) with N hypothesis examples each "
            f"({EXAMPLES_ENV}=N)"
        ),
    )
    parser.add_argument("--keep-going", action="store_true", help="report every failure")
    args = parser.parse_args(argv)
    failures = 0
    for name, target in TARGETS.items():
        if args.target not in (name, "all"):
            continue
        started = time.monotonic()
        for seed in range(args.seed, args.seed + args.cases):
            try:
                target(seed)
            except FuzzFailure as failure:
                failures += 1
                print(f"{name}: {failure}", file=sys.stderr)
                print(f"  reproduce: scripts/fuzz-http2 --target {name} --seed {seed} --cases 1")
                if not args.keep_going:
                    return 1
            done = seed - args.seed + 1
            if done % 10_000 == 0:
                print(f"{name}: {done} cases", flush=True)
        took = time.monotonic() - started
        print(f"{name}: {args.cases} cases from seed {args.seed} in {took:.1f} s", flush=True)
    if args.oracles:
        import subprocess

        env = {**os.environ, EXAMPLES_ENV: str(args.oracles)}
        oracle_tests = [
            "tests/unit/frontdoor/http2/test_hpack_oracle.py",
            "tests/unit/frontdoor/http2/test_frames_oracle.py",
        ]
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", *oracle_tests], env=env)
        failures += done.returncode != 0
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
