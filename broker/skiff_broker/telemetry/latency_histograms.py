"""Latency histograms aggregated by the broker itself and exported through the SDK.

The SDK's ``Histogram.record`` costs several microseconds per call (attribute
handling, view matching, exemplar sampling), more than the append it measures. Here
a sample is one bisect into the explicit buckets and a few additions under one lock.
The cumulative points become ordinary SDK ``Metric`` objects (the data model the
SDK's own readers produce), which :class:`PeriodicHistogramExport` hands to the
configured ``MetricExporter`` s (OTLP, console) every export interval and at shutdown.
"""

from __future__ import annotations

import bisect
import logging
import operator
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExporter,
    MetricsData,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from ..store.service_thread import ServiceThread

log = logging.getLogger(__name__)


class _Point:
    __slots__ = ("attributes", "counts", "max", "min", "start_ns", "sum")

    def __init__(self, attributes: Mapping[str, Any], buckets: int) -> None:
        self.attributes = dict(attributes)
        self.start_ns = time.time_ns()
        self.counts = [0] * buckets
        self.sum = 0.0
        self.min = float("inf")
        self.max = float("-inf")


class ExplicitBucketHistogram:
    """A cumulative histogram per attribute set, with the SDK's bucket semantics:
    bucket ``i`` counts values in ``(bounds[i-1], bounds[i]]``, the last one the rest.

    A point is named by a tuple of label values, one for each of ``labels``; its
    attributes (those labels and ``constant``) are built once, when it first appears.
    """

    def __init__(
        self,
        name: str,
        unit: str,
        description: str,
        bounds: Sequence[float],
        labels: Sequence[str],
        constant: Mapping[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.unit = unit
        self.description = description
        self.bounds = tuple(bounds)
        self.labels = tuple(labels)
        self._constant = dict(constant or {})
        self._points: dict[tuple[Any, ...], _Point] = {}
        # Appends record on the event loop and on executor threads alike.
        self._lock = threading.Lock()

    def record(self, value: float, key: tuple[Any, ...], samples: int = 1) -> None:
        """Adds ``samples`` samples of ``value`` to the point of ``key``, the values of
        ``labels`` in their order."""
        bucket = bisect.bisect_left(self.bounds, value)
        with self._lock:
            point = self._points.get(key)
            if point is None:
                point = self._points[key] = self._new_point(key)
            point.counts[bucket] += samples
            point.sum += value * samples
            if value < point.min:
                point.min = value
            if value > point.max:
                point.max = value

    def record_each(self, values: Sequence[float], key: tuple[Any, ...]) -> None:
        """Adds one sample of each of ``values`` to the point of ``key``: what ``record``
        does for each, with one call and one lock for the lot (an append's message sizes).
        """
        if not values:
            return
        bounds = self.bounds
        counted = [0] * (len(bounds) + 1)
        for value in values:
            counted[bisect.bisect_left(bounds, value)] += 1
        total = sum(values)
        low = min(values)
        high = max(values)
        with self._lock:
            point = self._points.get(key)
            if point is None:
                point = self._points[key] = self._new_point(key)
            point.counts = list(map(operator.add, point.counts, counted))
            point.sum += total
            if low < point.min:
                point.min = low
            if high > point.max:
                point.max = high

    def _new_point(self, key: tuple[Any, ...]) -> _Point:
        attributes = {**self._constant, **dict(zip(self.labels, key, strict=True))}
        return _Point(attributes, len(self.bounds) + 1)

    def metric(self, now_ns: int) -> Metric | None:
        """The cumulative points so far; None before the first sample."""
        with self._lock:
            points = [
                HistogramDataPoint(
                    attributes=dict(p.attributes),
                    start_time_unix_nano=p.start_ns,
                    time_unix_nano=now_ns,
                    count=sum(p.counts),
                    sum=p.sum,
                    bucket_counts=list(p.counts),
                    explicit_bounds=self.bounds,
                    min=p.min,
                    max=p.max,
                )
                for p in self._points.values()
            ]
        if not points:
            return None
        return Metric(
            name=self.name,
            description=self.description,
            unit=self.unit,
            data=Histogram(
                data_points=points, aggregation_temporality=AggregationTemporality.CUMULATIVE
            ),
        )


class HistogramSet:
    """The histograms of one instrumentation scope."""

    def __init__(self, scope_name: str) -> None:
        self.scope = InstrumentationScope(scope_name)
        self._histograms: dict[str, ExplicitBucketHistogram] = {}

    def histogram(
        self,
        name: str,
        *,
        unit: str,
        description: str,
        bounds: Sequence[float],
        labels: Sequence[str],
        constant: Mapping[str, Any] | None = None,
    ) -> ExplicitBucketHistogram:
        """The histogram called ``name``, made on first use (one per name, like a meter)."""
        known = self._histograms.get(name)
        if known is None:
            known = self._histograms[name] = ExplicitBucketHistogram(
                name, unit, description, bounds, labels, constant
            )
        return known

    def metrics(self) -> list[Metric]:
        now_ns = time.time_ns()
        found = (h.metric(now_ns) for h in list(self._histograms.values()))
        return [m for m in found if m is not None]

    def metrics_data(self, resource: Resource) -> MetricsData | None:
        """Everything recorded so far, cumulative; None before the first sample."""
        metrics = self.metrics()
        if not metrics:
            return None
        scope = ScopeMetrics(self.scope, metrics, self.scope.schema_url)
        return MetricsData([ResourceMetrics(resource, [scope], resource.schema_url)])


class PeriodicHistogramExport(ServiceThread):
    """Exports a :class:`HistogramSet` every ``interval_s`` on a thread of its own (as the
    SDK's periodic reader does for its instruments), and once more when stopped."""

    name = "skiff-histogram-export"

    def __init__(
        self,
        histograms: HistogramSet,
        exporters: Sequence[MetricExporter],
        resource: Resource,
        interval_s: float,
        timeout_s: float,
    ) -> None:
        super().__init__(interval_s)
        self._histograms = histograms
        self._exporters = list(exporters)
        self._resource = resource
        self._timeout_ms = timeout_s * 1000

    def step(self) -> None:
        self.export()

    def on_stop(self) -> None:
        """The last export; the exporters themselves are shut down by their owner."""
        self.export()

    def export(self) -> None:
        data = self._histograms.metrics_data(self._resource)
        if data is None:
            return
        for exporter in self._exporters:
            try:
                exporter.export(data, timeout_millis=self._timeout_ms)
            except Exception:
                # An exporter's trouble must not end the exports (nor the broker).
                log.exception("exporting histograms with %s failed", type(exporter).__name__)
