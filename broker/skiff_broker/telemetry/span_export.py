"""OTLP span exporters whose requests are written by ``otlp_span_encoding``.

A sampled request's spans cost the broker more to encode with the SDK's encoder than to
record; these exporters send the same requests, written directly.

``OtlpHttpSpanExporter`` (``http/protobuf``, the default protocol) reads the settings the
SDK's OTLP/HTTP exporter reads, the traces-specific variable first:
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (the whole URL) or ``OTEL_EXPORTER_OTLP_ENDPOINT``
(a base URL, ``/v1/traces`` added; default ``http://localhost:4318``), ``..._HEADERS``
(``key=value`` pairs, comma-separated, values URL-encoded), ``..._TIMEOUT`` (seconds, as
the Python SDK reads it; default 10), ``..._COMPRESSION`` (``gzip``, ``deflate``,
``none``), ``..._CERTIFICATE`` (the CA bundle that verifies the receiver) and
``..._CLIENT_CERTIFICATE`` / ``..._CLIENT_KEY`` (mutual TLS). One export is one POST,
retried while its timeout lasts when the receiver says it is busy or unavailable (429,
502, 503, 504; its ``Retry-After`` is honoured) or cannot be reached, with exponential
backoff. A batch that cannot be delivered is dropped, and a log line says so: the
broker never waits for its telemetry.

``OtlpGrpcSpanExporter`` (``grpc``) is the SDK's gRPC exporter, configured by the same
variables as the SDK's; only its request is built from these bytes.
"""

from __future__ import annotations

import email.utils
import gzip
import logging
import os
import random
import threading
import time
import urllib.parse
import zlib
from collections.abc import Sequence
from typing import Any

import requests
import urllib3
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as SdkGrpcSpanExporter,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from ..rate_limited_log import RateLimitedLog
from .otlp_span_encoding import SpanEncoder

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "http://localhost:4318"
TRACES_PATH = "/v1/traces"
DEFAULT_TIMEOUT_S = 10.0
# What OTLP/HTTP calls a passing condition: try again later.
RETRYABLE_STATUS = frozenset({429, 502, 503, 504})
MAX_ATTEMPTS = 6
# What is read of a response: an OTLP answer is a few bytes.
MAX_RESPONSE_BYTES = 64 * 1024
_COMPRESSIONS = ("none", "gzip", "deflate")


def _setting(name: str) -> str:
    """``OTEL_EXPORTER_OTLP_TRACES_<name>``, else ``OTEL_EXPORTER_OTLP_<name>``, else ""."""
    return (
        os.environ.get(f"OTEL_EXPORTER_OTLP_TRACES_{name}", "").strip()
        or os.environ.get(f"OTEL_EXPORTER_OTLP_{name}", "").strip()
    )


def traces_endpoint() -> str:
    whole = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if whole:
        return whole
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip() or DEFAULT_ENDPOINT
    return base.rstrip("/") + TRACES_PATH


def parse_headers(text: str) -> dict[str, str]:
    """``key=value,key2=value2`` (values URL-encoded) as headers; a malformed entry is
    left out with a warning."""
    headers: dict[str, str] = {}
    for entry in text.split(","):
        if not entry.strip():
            continue
        key, equals, value = entry.partition("=")
        key = urllib.parse.unquote(key).strip().lower()
        if not equals or not key:
            log.warning("OTLP headers: %r is not key=value; leaving it out", entry.strip())
            continue
        headers[key] = urllib.parse.unquote(value).strip()
    return headers


def _timeout_s() -> float:
    raw = _setting("TIMEOUT")
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        timeout = float(raw)
    except ValueError:
        timeout = -1.0
    if timeout <= 0:
        log.warning(
            "OTLP timeout %r is not a positive number of seconds; using %g", raw, DEFAULT_TIMEOUT_S
        )
        return DEFAULT_TIMEOUT_S
    return timeout


def _compression() -> str:
    compression = _setting("COMPRESSION").lower() or "none"
    if compression not in _COMPRESSIONS:
        log.warning(
            "OTLP compression %r is not one of %s; sending uncompressed",
            compression,
            ", ".join(_COMPRESSIONS),
        )
        return "none"
    return compression


def _retry_after_s(response: requests.Response) -> float | None:
    """The receiver's ``Retry-After`` (seconds or an HTTP date), if it sent one."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


class OtlpHttpSpanExporter(SpanExporter):
    """Spans to an OTLP/HTTP receiver as protobuf, ``from_env`` or given explicitly."""

    def __init__(
        self,
        endpoint: str,
        *,
        headers: dict[str, str] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        compression: str = "none",
        certificate: str = "",
        client_certificate: str = "",
        client_key: str = "",
    ) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.compression = compression
        self._headers = {"content-type": "application/x-protobuf", **(headers or {})}
        if compression != "none":
            self._headers["content-encoding"] = compression
        self._verify: bool | str = certificate or True
        # A client certificate file may hold its key too.
        self._cert: tuple[str, str] | str | None = None
        if client_certificate:
            self._cert = (client_certificate, client_key) if client_key else client_certificate
        self._encoder = SpanEncoder()
        self._session = requests.Session()
        self._closed = threading.Event()
        self._failures = RateLimitedLog(60.0)

    @classmethod
    def from_env(cls) -> OtlpHttpSpanExporter:
        return cls(
            traces_endpoint(),
            headers=parse_headers(_setting("HEADERS")),
            timeout_s=_timeout_s(),
            compression=_compression(),
            certificate=_setting("CERTIFICATE"),
            client_certificate=_setting("CLIENT_CERTIFICATE"),
            client_key=_setting("CLIENT_KEY"),
        )

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._closed.is_set():
            return SpanExportResult.FAILURE
        try:
            body = self._encoder.encode(spans)
        except Exception:
            log.exception("could not encode %d spans; they are dropped", len(spans))
            return SpanExportResult.FAILURE
        problem = self._post(self._compress(body))
        if problem is None:
            return SpanExportResult.SUCCESS
        line = self._failures.line(
            f"could not export {len(spans)} spans to {self.endpoint}: {problem}"
        )
        if line is not None:
            log.warning("%s; they are dropped", line)
        return SpanExportResult.FAILURE

    def _compress(self, body: bytes) -> bytes:
        if self.compression == "gzip":
            return gzip.compress(body)
        if self.compression == "deflate":
            return zlib.compress(body)
        return body

    def _post(self, data: bytes) -> str | None:
        """Sends ``data``, again while it is worth it; None when the receiver took it, else
        what went wrong last."""
        deadline = time.monotonic() + self.timeout_s
        problem = "no time left to send"
        for attempt in range(MAX_ATTEMPTS):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            wait: float | None = None
            try:
                # Streamed, and read no further than a response needs: whatever the
                # receiver sends back, the broker holds at most that much of it.
                with self._session.post(
                    self.endpoint,
                    data=data,
                    headers=self._headers,
                    timeout=left,
                    verify=self._verify,
                    cert=self._cert,
                    stream=True,
                ) as response:
                    excerpt = response.raw.read(MAX_RESPONSE_BYTES, decode_content=True)
            except (
                requests.ConnectionError,
                requests.Timeout,
                urllib3.exceptions.HTTPError,
            ) as error:
                # Unreachable, or the connection broke or stalled mid-answer.
                problem = f"{type(error).__name__}: {error}"
            except (requests.RequestException, OSError) as error:
                return f"{type(error).__name__}: {error}"
            else:
                if response.ok:
                    return None
                text = excerpt[:200].decode(errors="replace")
                problem = f"HTTP {response.status_code} {text!r}"
                if response.status_code not in RETRYABLE_STATUS:
                    return problem
                wait = _retry_after_s(response)
            if wait is None:
                # 1, 2, 4, ... seconds, spread so that brokers do not retry in step.
                wait = 2**attempt * random.uniform(0.8, 1.2)
            if wait >= deadline - time.monotonic() or self._closed.wait(wait):
                break
        return problem

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True

    def shutdown(self) -> None:
        self._closed.set()
        self._session.close()


class OtlpGrpcSpanExporter(SdkGrpcSpanExporter):
    """The SDK's OTLP/gRPC span exporter, its request parsed from ``SpanEncoder`` bytes."""

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self._encoder = SpanEncoder()

    def _translate_data(self, data: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
        return ExportTraceServiceRequest.FromString(self._encoder.encode(data))
