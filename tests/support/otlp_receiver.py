"""The tests' OTLP/HTTP receiver: the product's (``skiff_broker.otlp_receiver``, which
``skiff traces receive`` serves), with what tests ask of it besides.

``OtlpReceiver()`` listens on 127.0.0.1 (a free port) and keeps every export; point a
broker at it with ``OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint``. On top of the
product's receiver it offers ``spans()`` and ``histogram_points()`` as plain Python,
``wait_for`` that wakes as soon as data arrives, and ``refuse_traces(status, times)``,
which answers the next trace exports with an error (counting every trace POST and
keeping its headers), as a busy or misconfigured collector would.

``write_traces_json(path)`` / ``write_metrics_json(path)`` save what arrived the way the
OpenTelemetry Collector's file exporter does (one OTLP JSON export request per line).

Run as ``python -m tests.support.otlp_receiver`` it serves until SIGTERM/SIGINT, keeping only
counts (``--keep`` keeps everything), prints ``listening on PORT`` and, at the end, the
counts as one JSON line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import ssl
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from tests.support.waiting import wait_for

from skiff_broker import otlp_receiver
from skiff_broker.otlp_receiver import to_otlp_json

__all__ = ["OtlpReceiver", "ReceivedSpan", "any_value", "attributes", "to_otlp_json"]


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


class OtlpReceiver(otlp_receiver.OtlpReceiver):
    def __init__(self, *, keep: bool = True, tls: ssl.SSLContext | None = None) -> None:
        """``keep=False`` only counts what arrives (for long benchmark runs); ``tls``: serve
        HTTPS with this server context."""
        super().__init__("127.0.0.1", 0, keep=keep, tls=tls)
        # Trace exports to answer with an error first: (status, Retry-After or None).
        self._refusals: list[tuple[int, str | None]] = []
        self.trace_posts = 0
        self.trace_headers: list[dict[str, str]] = []

    def refuse_traces(self, status: int, times: int, retry_after: str | None = None) -> None:
        """Answer the next ``times`` trace exports with ``status`` (and ``Retry-After``)."""
        with self._lock:
            self._refusals += [(status, retry_after)] * times

    def refusal(self, headers: dict[str, str]) -> tuple[int, str | None] | None:
        with self._lock:
            self.trace_posts += 1
            if self._keep:
                self.trace_headers.append(headers)
            return self._refusals.pop(0) if self._refusals else None

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
        with self.arrived:
            self.arrived.wait(longest_s)


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
