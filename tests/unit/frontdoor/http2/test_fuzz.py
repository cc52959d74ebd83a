"""The seeded fuzz run (tests/support/http2_fuzz.py) in the normal test run, bounded.

The first few hundred seeds of each target run here, the same ones every time;
``scripts/fuzz-http2 --cases 200000`` runs many more. The harness is shown to have
teeth: a connection that raises, leaks what the peer sends, or writes a malformed frame
is caught within those seeds. Below, what the fuzz found, pinned.
"""

from __future__ import annotations

import pytest
from tests.support import http2_fuzz
from tests.support.http2_fuzz import FuzzFailure, fuzz_connection, fuzz_hpack

from skiff_broker.frontdoor.http2 import frames as fr
from skiff_broker.frontdoor.http2.connection import ServerConnection
from skiff_broker.frontdoor.http2.frames import ErrorCode
from skiff_broker.frontdoor.http2.hpack import encode_headers

CONNECTION_CASES = 300
HPACK_CASES = 600


def test_the_connection_survives_seeded_hostile_clients():
    for seed in range(CONNECTION_CASES):
        fuzz_connection(seed)


def test_the_hpack_decoder_survives_seeded_blocks_and_agrees_with_hpack():
    for seed in range(HPACK_CASES):
        fuzz_hpack(seed)


def first_failure(target) -> str:  # type: ignore[no-untyped-def]
    for seed in range(CONNECTION_CASES):
        try:
            target(seed)
        except FuzzFailure as failure:
            return str(failure)
    raise AssertionError("no seed found the planted fault")


def test_an_exception_escaping_the_connection_is_caught(monkeypatch):
    def broken(self, flags, stream_id, payload):  # type: ignore[no-untyped-def]
        raise KeyError("planted")

    monkeypatch.setattr(ServerConnection, "_ping", broken)
    assert "KeyError('planted') escaped" in first_failure(fuzz_connection)


def test_a_connection_keeping_what_the_peer_sends_is_caught(monkeypatch):
    original = ServerConnection.receive

    def hoarding(self, data):  # type: ignore[no-untyped-def]
        # Every read kept (a copy, as a buggy buffer would): reachable from the
        # connection, so counted as what it holds.
        self.__dict__.setdefault("hoard", []).append(bytes(data))
        original(self, data)

    monkeypatch.setattr(ServerConnection, "receive", hoarding)
    assert "units, over" in first_failure(fuzz_connection)


def test_a_malformed_frame_written_is_caught(monkeypatch):
    def zero_increment(stream_id: int, increment: int) -> bytes:
        return fr.frame(fr.WINDOW_UPDATE, 0, stream_id, b"\0\0\0\0")

    monkeypatch.setattr(fr, "window_update", zero_increment)
    assert "a malformed frame written" in first_failure(fuzz_connection)


def test_hpack_disagreement_is_caught(monkeypatch):
    from skiff_broker.frontdoor.http2 import hpack

    original = hpack.HeaderDecoder.decode

    def lowercasing(self, block):  # type: ignore[no-untyped-def]
        return [(n, v.lower()) for n, v in original(self, block)]

    monkeypatch.setattr(hpack.HeaderDecoder, "decode", lowercasing)
    assert "Skiff decodes" in first_failure(http2_fuzz.fuzz_hpack)


# -- found by the fuzz -------------------------------------------------------------------------


class _App:
    def __init__(self) -> None:
        self.streams = []  # type: ignore[var-annotated]

    def request(self, stream, headers, end_stream):  # type: ignore[no-untyped-def]
        self.streams.append(stream)

    def headers_too_large(self, stream):  # type: ignore[no-untyped-def]
        stream.reset(ErrorCode.REFUSED_STREAM)


@pytest.mark.parametrize("answered", ["answered", "reset"])
def test_request_trailers_in_flight_after_the_server_ended_the_stream_are_ignored(answered):
    """RFC 9113 5.1: frames on a stream the server reset are ignored. A server that answers
    before the request's end resets the rest of it (RST_STREAM NO_ERROR); the client's
    trailers may already be on the way, and must not end the whole connection."""
    app = _App()
    conn = ServerConnection(app)
    request = encode_headers(
        [(":method", "POST"), (":scheme", "http"), (":path", "/s/M"), ("te", "trailers")]
    )
    conn.receive(
        fr.PREFACE
        + fr.settings({})
        + fr.frame(fr.HEADERS, fr.END_HEADERS, 1, request)
        + fr.frame(fr.HEADERS, fr.END_HEADERS, 3, request)
    )
    first, other = app.streams
    if answered == "answered":
        first.send_headers(encode_headers([(":status", "200")]))
        first.send_trailers(encode_headers([("grpc-status", "3")]))
    else:
        first.reset(ErrorCode.CANCEL)
    conn.take_output()
    trailers = encode_headers([("x-checksum", "1")])
    conn.receive(
        fr.frame(fr.DATA, 0, 1, b"\0\0\0\0\0")
        + fr.frame(fr.HEADERS, fr.END_HEADERS | fr.END_STREAM, 1, trailers)
    )
    assert conn.take_output() == b"" and not conn.closed
    # The other stream goes on as before.
    other.send_headers(encode_headers([(":status", "200")]), end_stream=True)
    assert conn.take_output().startswith(fr.frame_header(fr.HEADERS, 5, 3, 1))
