"""An OTLP/HTTP receiver: what a broker exports, kept and written as span files.

``OtlpReceiver`` listens for OTLP/HTTP exports of traces (``POST /v1/traces``) and metrics
(``POST /v1/metrics``), in protobuf (``application/x-protobuf``, what the broker's
exporters send) or OTLP JSON (``application/json``), gzip- or deflate-compressed or not.
It keeps what arrives (or only counts it) and writes trace exports the way the
OpenTelemetry Collector's file exporter does: one export request per line, as OTLP JSON
(the protobuf JSON mapping with lowerCamelCase names, trace and span IDs as hex strings,
enums as integers), which is what ``skiff traces analyze`` reads. ``skiff traces
receive`` serves one and appends each trace export to its file as it arrives.

Invariants: a line is written only for an export that parsed, whole, and before the
export is answered 200, so an exporter told "received" finds its spans in the file; an
export that does not parse is answered 400 and changes nothing. It imports nothing of
the broker: the tests' receiver and the command share it.
"""

from __future__ import annotations

import base64
import gzip
import json
import threading
import zlib
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

TRACES_PATH = "/v1/traces"
METRICS_PATH = "/v1/metrics"
# OTLP JSON writes these byte fields as hex, not base64 as the plain protobuf mapping would.
_ID_FIELDS = frozenset({"traceId", "spanId", "parentSpanId"})


def to_otlp_json(message: Message) -> str:
    """One export request as a line of OTLP JSON, as the Collector's file exporter writes it."""
    data = json_format.MessageToDict(
        message, preserving_proto_field_name=False, use_integers_for_enums=True
    )
    return json.dumps(_ids_as(data, _base64_to_hex), separators=(",", ":"))


def from_otlp_json(text: bytes, message: Message) -> None:
    """Parse OTLP JSON (IDs in hex) into ``message``; ValueError if it is not OTLP JSON."""
    try:
        data = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    try:
        json_format.ParseDict(_ids_as(data, _hex_to_base64), message, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise ValueError(f"not an OTLP export request: {exc}") from None


def _base64_to_hex(value: str) -> str:
    return base64.b64decode(value).hex()


def _hex_to_base64(value: str) -> str:
    try:
        return base64.b64encode(bytes.fromhex(value)).decode()
    except ValueError:
        raise ValueError(f"{value!r} is not a hex trace or span ID") from None


def _ids_as(value: Any, convert: Any) -> Any:
    if isinstance(value, dict):
        return {
            key: convert(item)
            if key in _ID_FIELDS and isinstance(item, str)
            else _ids_as(item, convert)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_ids_as(item, convert) for item in value]
    return value


def _span_count(request: trace_service_pb2.ExportTraceServiceRequest) -> int:
    return sum(
        len(scope.spans) for resource in request.resource_spans for scope in resource.scope_spans
    )


class OtlpReceiver:
    """Receives OTLP/HTTP exports on ``host``:``port`` (0: a free one) from :meth:`start`
    to :meth:`stop`.

    ``keep=False`` only counts what arrives (for long runs); ``traces_file``: append each
    trace export to this file as one OTLP JSON line as it arrives; ``tls``: serve HTTPS
    with this server context.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        keep: bool = True,
        traces_file: Path | None = None,
        tls: Any = None,
    ) -> None:
        self._keep = keep
        self._lock = threading.Lock()
        # Notified whenever an export arrives, for those who wait on one.
        self.arrived = threading.Condition(self._lock)
        self._traces: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self._metrics: list[metrics_service_pb2.ExportMetricsServiceRequest] = []
        self.span_count = 0
        self.trace_requests_received = 0
        self.metric_requests = 0
        self.rejected = 0
        self._traces_out: IO[str] | None = None
        if traces_file is not None:
            traces_file.parent.mkdir(parents=True, exist_ok=True)
            self._traces_out = open(traces_file, "a", encoding="utf-8")  # noqa: SIM115
        self._server = ThreadingHTTPServer((host, port), self._handler_class())
        self._server.daemon_threads = True
        self._scheme = "http"
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
            self._scheme = "https"
        self._thread: threading.Thread | None = None

    @property
    def host(self) -> str:
        return str(self._server.server_address[0])

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def endpoint(self) -> str:
        """The value for OTEL_EXPORTER_OTLP_ENDPOINT (the exporter adds /v1/traces etc.)."""
        return f"{self._scheme}://{self.host}:{self.port}"

    def start(self) -> OtlpReceiver:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="otlp-receiver", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()
        with self._lock:
            if self._traces_out is not None:
                self._traces_out.close()
                self._traces_out = None

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what arrived -------------------------------------------------------

    def trace_requests(self) -> list[trace_service_pb2.ExportTraceServiceRequest]:
        with self._lock:
            return list(self._traces)

    def metrics_requests(self) -> list[metrics_service_pb2.ExportMetricsServiceRequest]:
        with self._lock:
            return list(self._metrics)

    def write_traces_json(self, path: Path) -> Path:
        """Every trace export kept, one OTLP JSON object per line."""
        return _write_lines(path, self.trace_requests())

    def write_metrics_json(self, path: Path) -> Path:
        return _write_lines(path, self.metrics_requests())

    # -- receiving ----------------------------------------------------------

    def refusal(self, headers: dict[str, str]) -> tuple[int, str | None] | None:
        """(status, Retry-After) to answer a trace export with instead of taking it; None
        takes it. A receiver that stands in for a busy collector says otherwise."""
        return None

    def receive(self, path: str, body: bytes, content_type: str) -> Message | None:
        """Parse and keep one export; its (empty) response, or None for a path that is not
        OTLP's. ValueError or DecodeError if the body is not an export request."""
        request: Message
        response: Message
        if path == TRACES_PATH:
            request = trace_service_pb2.ExportTraceServiceRequest()
            response = trace_service_pb2.ExportTraceServiceResponse()
        elif path == METRICS_PATH:
            request = metrics_service_pb2.ExportMetricsServiceRequest()
            response = metrics_service_pb2.ExportMetricsServiceResponse()
        else:
            return None
        if content_type.split(";")[0].strip().lower() == "application/json":
            from_otlp_json(body, request)
        else:
            request.ParseFromString(body)
        with self.arrived:
            if isinstance(request, trace_service_pb2.ExportTraceServiceRequest):
                self.trace_requests_received += 1
                self.span_count += _span_count(request)
                if self._traces_out is not None:
                    self._traces_out.write(to_otlp_json(request) + "\n")
                    self._traces_out.flush()
                if self._keep:
                    self._traces.append(request)
            else:
                assert isinstance(request, metrics_service_pb2.ExportMetricsServiceRequest)
                self.metric_requests += 1
                if self._keep:
                    self._metrics.append(request)
            self.arrived.notify_all()
        return response

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                if self.path == TRACES_PATH:
                    headers = {key.lower(): value for key, value in self.headers.items()}
                    refused = receiver.refusal(headers)
                    if refused is not None:
                        status, retry_after = refused
                        extra = {"Retry-After": retry_after} if retry_after is not None else {}
                        self._answer(status, b"refused", "text/plain", extra)
                        return
                encoding = (self.headers.get("Content-Encoding") or "").lower()
                content_type = self.headers.get("Content-Type") or "application/x-protobuf"
                try:
                    if encoding == "gzip":
                        body = gzip.decompress(body)
                    elif encoding == "deflate":
                        body = zlib.decompress(body)
                    response = receiver.receive(self.path, body, content_type)
                except (DecodeError, OSError, ValueError, zlib.error) as exc:
                    with receiver._lock:
                        receiver.rejected += 1
                    self._answer(400, f"not an OTLP export: {exc}".encode(), "text/plain")
                    return
                if response is None:
                    self._answer(
                        404, b"not an OTLP path: use /v1/traces or /v1/metrics", "text/plain"
                    )
                    return
                if content_type.startswith("application/json"):
                    self._answer(200, b"{}", "application/json")
                else:
                    self._answer(200, response.SerializeToString(), "application/x-protobuf")

            def _answer(
                self,
                code: int,
                body: bytes,
                content_type: str,
                extra: dict[str, str] | None = None,
            ) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                for name, value in (extra or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                # Quiet: exporters post every few hundred milliseconds.
                pass

        return Handler


def _write_lines(path: Path, requests: Iterable[Message]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as out:
        for request in requests:
            out.write(to_otlp_json(request))
            out.write("\n")
    return path
