"""The Prometheus endpoint: ``GET /metrics`` in the text exposition format.

It reads the same instruments as the OTLP export: the meter provider's (through the
OpenTelemetry SDK's Prometheus reader, one reader among the provider's readers) and
the broker's own histograms (``latency_histograms``), added to each scrape. Names are
the instruments' with dots made underscores and the unit appended
(``skiff.store.append.duration`` in seconds is ``skiff_store_append_duration_seconds``).

Each endpoint has a registry of its own, so brokers in one process never share one.
Scrapes are served on a thread of their own and never touch the event loop.
"""

from __future__ import annotations

import logging
import threading
from wsgiref.simple_server import WSGIServer

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics.export import MetricsData, ResourceMetrics, ScopeMetrics
from opentelemetry.sdk.resources import Resource
from prometheus_client import CollectorRegistry, start_http_server

from .latency_histograms import HistogramSet

log = logging.getLogger(__name__)


class PrometheusReader(PrometheusMetricReader):
    """The SDK's Prometheus reader, with the broker's histograms in every collection."""

    def __init__(self, histograms: HistogramSet, resource: Resource) -> None:
        self.registry = CollectorRegistry()
        # No otel_scope_* labels: the label sets stay RocketMQ's.
        super().__init__(scope_info_enabled=False, registry=self.registry)
        self._histograms = histograms
        self._resource = resource
        self._received = False
        # Scrapes are served on threads of their own; one collection at a time.
        self._collecting = threading.Lock()

    # The SDK declares collect final; it is wrapped all the same, because only here does
    # a collection with no SDK points still hand over the broker's histograms.
    def collect(self, timeout_millis: float = 10_000) -> None:  # type: ignore[misc]
        # The SDK hands nothing over while its instruments have no points; the broker's
        # histograms may have some all the same.
        with self._collecting:
            self._received = False
            super().collect(timeout_millis=timeout_millis)
            if not self._received:
                self._receive_metrics(None, timeout_millis)

    def _receive_metrics(
        self, metrics_data: MetricsData | None, timeout_millis: float = 10_000, **kwargs: object
    ) -> None:
        self._received = True
        own = self._histograms.metrics()
        if own:
            scope = ScopeMetrics(
                self._histograms.scope, own, self._histograms.scope.schema_url or ""
            )
            resource_metrics = list(metrics_data.resource_metrics) if metrics_data else []
            resource_metrics.append(
                ResourceMetrics(self._resource, [scope], self._resource.schema_url)
            )
            metrics_data = MetricsData(resource_metrics)
        if metrics_data is not None:
            super()._receive_metrics(metrics_data, timeout_millis, **kwargs)


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) as a host and a port; ValueError if it is not one."""
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(
            f"--metrics-listen must be HOST:PORT (or empty to turn it off), got {listen!r}"
        )
    return host.strip("[]"), int(port)


class MetricsEndpoint:
    """Serves ``reader``'s registry over HTTP on ``listen`` from :meth:`start` to :meth:`stop`."""

    def __init__(self, reader: PrometheusReader, listen: str) -> None:
        self._reader = reader
        self._host, self._port = parse_listen(listen)
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def registry(self) -> CollectorRegistry:
        """What a scrape reads (the docs' metrics reference is made from it)."""
        return self._reader.registry

    def start(self) -> int:
        """The port it listens on; OSError if it cannot listen."""
        try:
            server, thread = start_http_server(self._port, self._host, self._reader.registry)
        except OSError as exc:
            raise OSError(
                f"cannot serve metrics on {self._host}:{self._port}: {exc.strerror}; choose "
                "another --metrics-listen, or an empty one to serve no metrics"
            ) from None
        self._server, self._thread = server, thread
        self.port = server.server_address[1]
        log.info("metrics on http://%s:%d/metrics", self._host, self.port)
        return self.port

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None
