"""An OTLP/HTTP receiver for tests and benchmarks: what a broker exports, kept in memory.

``OtlpReceiver()`` listens on 127.0.0.1 (a free port) for OTLP/HTTP protobuf
exports of traces (``POST /v1/traces``) and metrics (``POST /v1/metrics``), parses
them with opentelemetry-proto's ``ExportTraceServiceRequest`` /
``ExportMetricsServiceRequest`` and keeps them. Point a broker at it with
``OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint``.

``refuse_traces(status, times)`` answers the next trace exports with an error (and
counts every trace POST, keeping its headers), as a busy or misconfigured collector would.

``write_traces_json(path)`` / ``write_metrics_json(path)`` save what arrived the way
the OpenTelemetry Collector's file exporter does: one export request per line, as
OTLP JSON (the protobuf JSON mapping with lowerCamelCase names; trace and span ids
as hex strings and enums as integers, as the OTLP specification requires).

Run as ``python -m tests.support.otlp_receiver`` it serves until SIGTERM/SIGINT, keeping only
counts (``--keep`` keeps everything), prints ``listening on PORT`` and, at the end, the
counts as one JSON line.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import gzip
import json
import signal
import ssl
import sys
import threading
import zlib
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from tests.support.waiting import wait_for

# OTLP JSON writes these byte fields as hex, not base64 as the plain protobuf mapping would.
_ID_FIELDS = frozenset({"traceId", "spanId", "parentSpanId"})


def to_otlp_json(message: Message) -> str:
    """One export request as a line of OTLP JSON, as the Collector's file exporter writes it."""
    data = json_format.MessageToDict(
        message, preserving_proto_field_name=False, use_integers_for_enums=True
    )
    return json.dumps(_hex_ids(data), separators=(",", ":"))


def _hex_ids(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            key: base64.b64decode(item).hex() if key in _ID_FIELDS else _hex_ids(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_hex_ids(item) for item in value]
    return value


def any_value(value: AnyValue) -> Any:
    """An attribute's value as plain Python."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return attributes(value.kvlist_value.values)
    return getattr(value, kind) if kind else None


def attributes(pairs: Iterable[KeyValue]) -> dict[str, Any]:
    return {pair.key: any_value(pair.value) for pair in pairs}


@dataclasses.dataclass(frozen=True)
class ReceivedSpan:
    """One exported span with the resource and scope it came with."""

    span: Span
    resource: dict[str, Any]
    scope: str

    @property
    def name(self) -> str:
        return self.span.name

    @property
    def trace_id(self) -> str:
        return self.span.trace_id.hex()

    @property
    def span_id(self) -> str:
        return self.span.span_id.hex()

    @property
    def parent_span_id(self) -> str:
        return self.span.parent_span_id.hex()

    @property
    def attributes(self) -> dict[str, Any]:
        return attributes(self.span.attributes)

    @property
    def links(self) -> list[tuple[str, str]]:
        """(trace id, span id) of each link, in hex."""
        return [(link.trace_id.hex(), link.span_id.hex()) for link in self.span.links]


class OtlpReceiver:
    def __init__(self, *, keep: bool = True, tls: ssl.SSLContext | None = None) -> None:
        """``keep=False`` only counts what arrives (for long benchmark runs); ``tls``: serve
        HTTPS with this server context."""
        self._keep = keep
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._traces: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self._metrics: list[metrics_service_pb2.ExportMetricsServiceRequest] = []
        self.span_count = 0
        self.metric_requests = 0
        self.rejected = 0
        # Trace exports to answer with an error first: (status, Retry-After or None).
        self._refusals: list[tuple[int, str | None]] = []
        self.trace_posts = 0
        self.trace_headers: list[dict[str, str]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._scheme = "http"
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
            self._scheme = "https"
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def endpoint(self) -> str:
        """The value for OTEL_EXPORTER_OTLP_ENDPOINT (the exporter adds /v1/traces etc.)."""
        return f"{self._scheme}://127.0.0.1:{self.port}"

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

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def refuse_traces(self, status: int, times: int, retry_after: str | None = None) -> None:
        """Answer the next ``times`` trace exports with ``status`` (and ``Retry-After``)."""
        with self._lock:
            self._refusals += [(status, retry_after)] * times

    def _refusal(self, headers: dict[str, str]) -> tuple[int, str | None] | None:
        with self._lock:
            self.trace_posts += 1
            if self._keep:
                self.trace_headers.append(headers)
            return self._refusals.pop(0) if self._refusals else None

    # -- what arrived -------------------------------------------------------

    def trace_requests(self) -> list[trace_service_pb2.ExportTraceServiceRequest]:
        with self._lock:
            return list(self._traces)

    def metrics_requests(self) -> list[metrics_service_pb2.ExportMetricsServiceRequest]:
        with self._lock:
            return list(self._metrics)

    def spans(self) -> list[ReceivedSpan]:
        found = []
        for request in self.trace_requests():
            for resource_spans in request.resource_spans:
                resource = attributes(resource_spans.resource.attributes)
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        found.append(ReceivedSpan(span, resource, scope_spans.scope.name))
        return found

    def histogram_points(self, name: str) -> list[tuple[Any, dict[str, Any]]]:
        """(HistogramDataPoint, resource attributes) of every export of metric ``name``."""
        points = []
        for request in self.metrics_requests():
            for resource_metrics in request.resource_metrics:
                resource = attributes(resource_metrics.resource.attributes)
                for scope_metrics in resource_metrics.scope_metrics:
                    for metric in scope_metrics.metrics:
                        if metric.name == name and metric.HasField("histogram"):
                            points += [(p, resource) for p in metric.histogram.data_points]
        return points

    def unit_of(self, name: str) -> str | None:
        for request in self.metrics_requests():
            for resource_metrics in request.resource_metrics:
                for scope_metrics in resource_metrics.scope_metrics:
                    for metric in scope_metrics.metrics:
                        if metric.name == name:
                            return metric.unit
        return None

    def wait_for(self, condition: Callable[[], Any], what: str, deadline_s: float) -> Any:
        """``waiting.wait_for``, calling ``condition`` again as soon as data arrives."""
        return wait_for(condition, what, deadline_s=deadline_s, pause=self._wait_for_arrival)

    def _wait_for_arrival(self, longest_s: float) -> None:
        with self._arrived:
            self._arrived.wait(longest_s)

    # -- saving -------------------------------------------------------------

    def write_traces_json(self, path: Path) -> Path:
        """Every trace export received, one OTLP JSON object per line."""
        return _write_lines(path, self.trace_requests())

    def write_metrics_json(self, path: Path) -> Path:
        return _write_lines(path, self.metrics_requests())

    # -- HTTP ---------------------------------------------------------------

    def _receive(self, path: str, body: bytes) -> Message | None:
        """Parse and keep one export; its (empty) response, or None if not understood."""
        if path == "/v1/traces":
            request: Message = trace_service_pb2.ExportTraceServiceRequest()
            response: Message = trace_service_pb2.ExportTraceServiceResponse()
        elif path == "/v1/metrics":
            request = metrics_service_pb2.ExportMetricsServiceRequest()
            response = metrics_service_pb2.ExportMetricsServiceResponse()
        else:
            return None
        request.ParseFromString(body)
        with self._arrived:
            if isinstance(request, trace_service_pb2.ExportTraceServiceRequest):
                self.span_count += sum(
                    len(scope.spans)
                    for resource in request.resource_spans
                    for scope in resource.scope_spans
                )
                if self._keep:
                    self._traces.append(request)
            else:
                self.metric_requests += 1
                if self._keep:
                    self._metrics.append(request)
            self._arrived.notify_all()
        return response

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                if self.path == "/v1/traces":
                    headers = {key.lower(): value for key, value in self.headers.items()}
                    refusal = receiver._refusal(headers)
                    if refusal is not None:
                        status, retry_after = refusal
                        extra = {"Retry-After": retry_after} if retry_after is not None else {}
                        self._answer(status, b"refused by the test", "text/plain", extra)
                        return
                encoding = (self.headers.get("Content-Encoding") or "").lower()
                try:
                    if encoding == "gzip":
                        body = gzip.decompress(body)
                    elif encoding == "deflate":
                        body = zlib.decompress(body)
                    response = receiver._receive(self.path, body)
                except (DecodeError, OSError, zlib.error) as exc:
                    with receiver._lock:
                        receiver.rejected += 1
                    self._answer(400, str(exc).encode(), "text/plain")
                    return
                if response is None:
                    self._answer(404, b"not an OTLP path", "text/plain")
                    return
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep what arrives, not just counts")
    parser.add_argument("--traces-json", type=Path, help="at exit, write traces here (--keep)")
    args = parser.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with OtlpReceiver(keep=args.keep or args.traces_json is not None) as receiver:
        print(f"listening on {receiver.port}", flush=True)
        while not stop.wait(0.5):
            pass
        if args.traces_json is not None:
            receiver.write_traces_json(args.traces_json)
        counts = {
            "spans": receiver.span_count,
            "metric_requests": receiver.metric_requests,
            "rejected": receiver.rejected,
        }
    print(json.dumps(counts), flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
