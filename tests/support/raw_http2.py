"""A hostile gRPC client written frame by frame: it sends what no well-behaved client would.

Built on the broker's own HTTP/2 frame helpers (``skiff_broker.frontdoor.http2.frames``) and its
HPACK encoder; the server's frames are read back whole, with their headers decoded. Over a
blocking socket, so that tests drive a broker process from threads or a test's own loop
from a thread.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from dataclasses import dataclass, field

from skiff_broker.frontdoor.http2 import frames as fr
from skiff_broker.frontdoor.http2.hpack import HeaderDecoder, encode_headers

# gRPC status codes as numbers.
DEADLINE_EXCEEDED = 4


def grpc_request_headers(path: str, authority: str = "localhost") -> list[tuple[str, str]]:
    return [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", authority),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]


def message_prefix(length: int, compressed: bool = False) -> bytes:
    """A gRPC message's length prefix announcing ``length`` octets."""
    return struct.pack(">BI", int(compressed), length)


@dataclass
class StreamSeen:
    """What the server sent on one stream."""

    headers: list[list[tuple[str, str]]] = field(default_factory=list)
    data: int = 0
    window_granted: int = 0
    # What the server's windows let this client send on the stream still.
    send_window: int = fr.DEFAULT_WINDOW
    reset: int | None = None
    ended: bool = False

    def header(self, name: str) -> str | None:
        for block in self.headers:
            for key, value in block:
                if key == name:
                    return value
        return None


class RawClient:
    """One HTTP/2 connection, its frames written by the test."""

    def __init__(self, address: str, *, timeout_s: float = 30.0) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self._buffer = b""
        self._decoder = HeaderDecoder(max_header_list_size=1 << 20)
        self.streams: dict[int, StreamSeen] = {}
        self.window_granted = 0  # connection-level WINDOW_UPDATEs received
        self.send_window = fr.DEFAULT_WINDOW
        self.goaway: tuple[int, bytes] | None = None  # (error code, debug data)
        self.closed = False
        self.send_failed = False
        self.next_stream = 1
        self.send(fr.PREFACE + fr.settings({}))

    def send(self, data: bytes) -> None:
        """Write ``data``; a connection the server closed is noted, not raised (what it
        sent before closing is still read)."""
        if self.closed or self.send_failed:
            return
        try:
            self.sock.sendall(data)
        except OSError:
            self.send_failed = True

    def open_call(self, path: str, end_stream: bool = False) -> int:
        stream_id = self.next_stream
        self.next_stream += 2
        flags = fr.END_HEADERS | (fr.END_STREAM if end_stream else 0)
        self.send(
            fr.frame(fr.HEADERS, flags, stream_id, encode_headers(grpc_request_headers(path)))
        )
        self.streams[stream_id] = StreamSeen()
        return stream_id

    def data_frames(self, stream_id: int, payload: bytes, end_stream: bool = False) -> bytes:
        """``payload`` as DATA frames of at most 16 KiB."""
        chunks = [payload[i : i + 16_384] for i in range(0, len(payload), 16_384)] or [b""]
        out = []
        for i, chunk in enumerate(chunks):
            last = end_stream and i == len(chunks) - 1
            out.append(fr.frame(fr.DATA, fr.END_STREAM if last else 0, stream_id, chunk))
        return b"".join(out)

    def push(self, stream_id: int, payload: bytes) -> int:
        """Send as much of ``payload`` as the server's windows allow now; how much that was."""
        seen = self.streams[stream_id]
        room = min(len(payload), seen.send_window, self.send_window)
        if room <= 0 or seen.reset is not None or seen.ended or self.closed or self.send_failed:
            return 0
        self.send(self.data_frames(stream_id, payload[:room]))
        seen.send_window -= room
        self.send_window -= room
        return room

    def read_for(self, seconds: float) -> None:
        """Read and note frames for about ``seconds`` (or until the connection closes)."""
        end = time.monotonic() + seconds
        while not self.closed:
            remaining = end - time.monotonic()
            if remaining <= 0:
                return
            self._read_once(remaining)

    def read_until(self, condition, deadline_s: float = 60.0) -> bool:  # type: ignore[no-untyped-def]
        end = time.monotonic() + deadline_s
        while not condition():
            remaining = end - time.monotonic()
            if self.closed or remaining <= 0:
                return bool(condition())
            self._read_once(min(remaining, 0.5))
        return True

    def _read_once(self, timeout_s: float) -> None:
        self.sock.settimeout(timeout_s)
        try:
            chunk = self.sock.recv(1 << 16)
        except TimeoutError:
            return
        except OSError:
            self.closed = True
            return
        if not chunk:
            self.closed = True
            return
        self._buffer += chunk
        self._parse()

    def _parse(self) -> None:
        buffer = self._buffer
        pos = 0
        while len(buffer) - pos >= 9:
            word, flags, stream_id = fr.HEADER.unpack_from(buffer, pos)
            length = word >> 8
            if len(buffer) - pos - 9 < length:
                break
            payload = buffer[pos + 9 : pos + 9 + length]
            pos += 9 + length
            self._frame(word & 0xFF, flags, stream_id & fr.STREAM_MASK, payload)
        self._buffer = buffer[pos:]

    def _frame(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        seen = self.streams.get(stream_id)
        if kind == fr.SETTINGS and not flags & fr.ACK:
            self.send(fr.SETTINGS_ACK)
        elif kind == fr.PING and not flags & fr.ACK:
            self.send(fr.ping_ack(payload))
        elif kind == fr.WINDOW_UPDATE:
            increment = fr.read_word(payload) & fr.STREAM_MASK
            if stream_id == 0:
                self.window_granted += increment
                self.send_window += increment
            elif seen is not None:
                seen.window_granted += increment
                seen.send_window += increment
        elif kind == fr.GOAWAY:
            self.goaway = (fr.read_word(payload[4:8]), payload[8:])
        elif seen is None:
            return
        elif kind == fr.HEADERS:
            seen.headers.append(self._decoder.decode(payload))
            seen.ended = seen.ended or bool(flags & fr.END_STREAM)
        elif kind == fr.DATA:
            # Answers are read as they come: the server's windows are given back.
            if payload:
                self.send(
                    fr.window_update(0, len(payload)) + fr.window_update(stream_id, len(payload))
                )
            seen.data += len(payload)
            seen.ended = seen.ended or bool(flags & fr.END_STREAM)
        elif kind == fr.RST_STREAM:
            seen.reset = fr.read_word(payload)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
