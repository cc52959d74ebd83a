"""What gRPC's headers and trailers say over HTTP/2 (the gRPC "PROTOCOL-HTTP2" spec).

A request's headers name the method (``:path``), its deadline (``grpc-timeout``), how its
messages are compressed (``grpc-encoding``) and the caller's metadata; a response opens
with ``:status 200`` and ``content-type: application/grpc`` and ends with trailers carrying
``grpc-status`` and a percent-encoded ``grpc-message``. Metadata whose key ends in
``-bin`` travels base64-encoded and is bytes to the application; other values are text.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import grpc

from ..http2.hpack import encode_headers


class Metadatum(NamedTuple):
    """One metadata entry, as grpc.aio hands them out (``.key``, ``.value``)."""

    key: str
    value: str | bytes


# Headers that are the protocol's own, not the caller's metadata (grpc.aio leaves them out).
_NOT_METADATA = frozenset(
    ("content-type", "te", "grpc-timeout", "grpc-encoding", "grpc-accept-encoding")
)
_TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}

CODE_NUMBERS: dict[grpc.StatusCode, int] = {code: code.value[0] for code in grpc.StatusCode}

_RESPONSE_FIELDS = [(":status", "200"), ("content-type", "application/grpc")]
RESPONSE_HEADERS = encode_headers(_RESPONSE_FIELDS)
OK_TRAILERS = encode_headers([("grpc-status", "0")])


class RequestHeaders:
    """The parts of a request's header list the server acts on."""

    __slots__ = ("content_type", "encoding", "headers", "method", "path", "timeout", "traceparent")

    # Header lists are short (a dozen fields): a scan costs less than a dict per request.

    def __init__(self, headers: list[tuple[str, str]]) -> None:
        self.headers = headers
        self.path = ""
        self.method = ""
        self.content_type = ""
        self.encoding = ""
        # Seconds; None: no deadline. An unreadable value is treated as none (grpc does too).
        self.timeout: float | None = None
        # The caller's W3C trace context, looked for on every call where telemetry is on:
        # kept here, where every header is looked at anyway, instead of a scan per call.
        self.traceparent: str | None = None
        for name, value in headers:
            if name[0] == ":":
                if name == ":path":
                    self.path = value
                elif name == ":method":
                    self.method = value
            elif name == "content-type":
                self.content_type = value
            elif name == "grpc-timeout":
                self.timeout = parse_timeout(value)
            elif name == "grpc-encoding":
                self.encoding = value
            elif name == "traceparent" and self.traceparent is None:
                self.traceparent = value

    def value(self, key: str) -> str | None:
        """The first value of the (lowercase, not ``-bin``) header ``key``, or None."""
        for name, value in self.headers:
            if name == key:
                return value
        return None

    def metadata(self) -> tuple[Metadatum, ...]:
        """The caller's metadata, in order; ``-bin`` values decoded to bytes."""
        found = []
        for name, value in self.headers:
            if name[0] == ":" or name in _NOT_METADATA:
                continue
            if name.endswith("-bin"):
                try:
                    found.append(Metadatum(name, _unbase64(value)))
                except (binascii.Error, ValueError):
                    continue  # not base64: dropped, as grpc drops it
            else:
                found.append(Metadatum(name, value))
        return tuple(found)


def parse_timeout(value: str) -> float | None:
    """``grpc-timeout`` (at most 8 digits and a unit) in seconds, or None if unreadable."""
    digits, unit = value[:-1], value[-1:]
    if not digits.isdigit() or len(digits) > 8 or unit not in _TIMEOUT_UNITS:
        return None
    return int(digits) * _TIMEOUT_UNITS[unit]


def _unbase64(value: str) -> bytes:
    # Senders may leave out the padding.
    return base64.b64decode(value + "=" * (-len(value) % 4), validate=True)


def percent_encode(message: str) -> str:
    """``grpc-message``: UTF-8, with octets outside printable ASCII and '%' as %XX."""
    data = message.encode("utf-8", "replace")
    if all(0x20 <= b <= 0x7E and b != 0x25 for b in data):
        return message
    return "".join(chr(b) if 0x20 <= b <= 0x7E and b != 0x25 else f"%{b:02X}" for b in data)


def metadata_headers(metadata: Sequence[Any] | None) -> list[tuple[str, str]]:
    """Application metadata as header fields (keys lowercase, ``-bin`` values base64)."""
    fields = []
    for key, value in metadata or ():
        key = key.lower()
        if key.endswith("-bin"):
            raw = value if isinstance(value, bytes) else str(value).encode()
            fields.append((key, base64.b64encode(raw).decode("ascii").rstrip("=")))
        else:
            text = value.decode("latin-1") if isinstance(value, bytes) else str(value)
            fields.append((key, text))
    return fields


def _status_fields(
    code: int, message: str, metadata: Iterable[Any] | None
) -> list[tuple[str, str]]:
    fields = [("grpc-status", str(code))]
    if message:
        fields.append(("grpc-message", percent_encode(message)))
    fields.extend(metadata_headers(list(metadata or ())))
    return fields


def trailers(code: int, message: str, metadata: Iterable[Any] | None = None) -> bytes:
    """The trailer block ending a response that already sent its headers."""
    if code == 0 and not message and not metadata:
        return OK_TRAILERS
    return encode_headers(_status_fields(code, message, metadata))


def trailers_only(code: int, message: str, metadata: Iterable[Any] | None = None) -> bytes:
    """A response with no message: headers and status in one block (END_STREAM)."""
    return encode_headers(_RESPONSE_FIELDS + _status_fields(code, message, metadata))


def response_headers(metadata: Sequence[Any] | None) -> bytes:
    """The response's headers, with the application's initial metadata if it sent any."""
    if not metadata:
        return RESPONSE_HEADERS
    return encode_headers(_RESPONSE_FIELDS + metadata_headers(metadata))
