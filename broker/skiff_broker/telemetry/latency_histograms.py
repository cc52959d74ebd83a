"""Latency histograms aggregated by the broker itself and exported through the SDK.

The SDK's ``Histogram.record`` costs several microseconds per call (attribute
handling, view matching, exemplar sampling), more than the append it measures. Here
a sample is one list append; numpy sorts the values into buckets a thousand at a
time.
The cumulative points become ordinary SDK ``Metric`` objects (the data model the
SDK's own readers produce), which :class:`PeriodicHistogramExport` hands to the
configured ``MetricExporter`` s (OTLP, console) every export interval and at shutdown.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
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
        self.counts = np.zeros(buckets, dtype=np.int64)
        self.sum = 0.0
        self.min = float("inf")
        self.max = float("-inf")


# Pending values of a point folded into its buckets at once: a bound on what waits
# (some 32 KiB a point), and enough that numpy's per-call cost is spread thin: a fold
# of 256 values took 9 µs here, of 1,024 21 µs.
FOLD_AT = 1024


class ExplicitBucketHistogram:
    """A cumulative histogram per attribute set, with the SDK's bucket semantics:
    bucket ``i`` counts values in ``(bounds[i-1], bounds[i]]``, the last one the rest.

    A point is named by a tuple of label values, one for each of ``labels``; its
    attributes (those labels and ``constant``) are built once, when it first appears.

    Recording only appends to the point's list of pending values; the values are
    folded into the buckets, sum, min and max with numpy once :data:`FOLD_AT` of them
    wait, and whenever the points are read. So a sample costs a list append, not a
    bucket search and a lock. Invariants: recorders take no lock, because they only
    ever add at a list's end (``append``/``extend``, each item added atomically under
    the GIL); only a fold removes values, and only those it has taken, from the front,
    under ``_lock``, which also serializes the folds; a read folds first, so it sees
    every value recorded before it.
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
        self._bounds = np.array(self.bounds, dtype=np.float64)
        self._constant = dict(constant or {})
        self._points: dict[tuple[Any, ...], _Point] = {}
        self._pending: dict[tuple[Any, ...], list[float]] = {}
        # Appends record on the event loop and on executor threads alike.
        self._lock = threading.Lock()

    def record(self, value: float, key: tuple[Any, ...], samples: int = 1) -> None:
        """Adds ``samples`` samples of ``value`` to the point of ``key``, the values of
        ``labels`` in their order."""
        pending = self._pending.get(key)
        if pending is None:
            pending = self._add_point(key)
        if samples == 1:
            pending.append(value)
        else:
            pending.extend([value] * samples)
        if len(pending) >= FOLD_AT:
            self._fold(key, pending)

    def samples(self, key: tuple[Any, ...]) -> list[float]:
        """The list the point of ``key`` gathers its pending values in, for a recorder of
        one point that holds on to it: appending a value to it, then calling
        ``fold(key)`` once it holds :data:`FOLD_AT`, records the value as ``record``
        does, one call and one lookup cheaper. The list is the point's for good."""
        pending = self._pending.get(key)
        return self._add_point(key) if pending is None else pending

    def fold(self, key: tuple[Any, ...]) -> None:
        """Folds the pending values of ``key``'s point into its buckets now."""
        self._fold(key, self._pending[key])

    def record_each(self, values: Sequence[float] | np.ndarray, key: tuple[Any, ...]) -> None:
        """Adds one sample of each of ``values`` to the point of ``key`` (an append's
        message sizes); an array is folded in at once."""
        if not len(values):
            return  # no point appears for nothing
        pending = self._pending.get(key)
        if pending is None:
            pending = self._add_point(key)
        if isinstance(values, np.ndarray):
            with self._lock:
                self._fold_values(self._points[key], values.astype(np.float64))
            return
        pending.extend(values)
        if len(pending) >= FOLD_AT:
            self._fold(key, pending)

    def totals(self) -> list[tuple[dict[str, Any], int, float]]:
        """Each point's attributes, number of samples and their sum, so far."""
        with self._lock:
            self._fold_all()
            return [(p.attributes, int(p.counts.sum()), p.sum) for p in list(self._points.values())]

    def _add_point(self, key: tuple[Any, ...]) -> list[float]:
        with self._lock:
            if key not in self._points:
                attributes = {**self._constant, **dict(zip(self.labels, key, strict=True))}
                self._points[key] = _Point(attributes, len(self.bounds) + 1)
            # The point exists before its list can be seen: a fold always finds it.
            return self._pending.setdefault(key, [])

    def _fold(self, key: tuple[Any, ...], pending: list[float]) -> None:
        with self._lock:
            self._fold_locked(self._points[key], pending)

    def _fold_all(self) -> None:
        for key, pending in list(self._pending.items()):
            if pending:
                self._fold_locked(self._points[key], pending)

    def _fold_locked(self, point: _Point, pending: list[float]) -> None:
        taken = len(pending)
        if not taken:
            return  # another fold took them
        values = np.array(pending[:taken], dtype=np.float64)
        del pending[:taken]  # only what was taken: recorders may have added since
        self._fold_values(point, values)

    def _fold_values(self, point: _Point, values: np.ndarray) -> None:
        # searchsorted's "left" is bisect_left: the first bound >= value, as the SDK buckets.
        point.counts += np.bincount(
            np.searchsorted(self._bounds, values), minlength=len(point.counts)
        )
        point.sum += float(values.sum())
        point.min = min(point.min, float(values.min()))
        point.max = max(point.max, float(values.max()))

    def metric(self, now_ns: int) -> Metric | None:
        """The cumulative points so far; None before the first sample."""
        with self._lock:
            self._fold_all()
            points = [
                HistogramDataPoint(
                    attributes=dict(p.attributes),
                    start_time_unix_nano=p.start_ns,
                    time_unix_nano=now_ns,
                    count=int(p.counts.sum()),
                    sum=p.sum,
                    bucket_counts=p.counts.tolist(),
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

    def histograms(self) -> list[ExplicitBucketHistogram]:
        """The histograms made so far."""
        return list(self._histograms.values())

    def metrics(self) -> list[Metric]:
        now_ns = time.time_ns()
        found = (h.metric(now_ns) for h in list(self._histograms.values()))
        return [m for m in found if m is not None]

    def metrics_data(self, resource: Resource) -> MetricsData | None:
        """Everything recorded so far, cumulative; None before the first sample."""
        metrics = self.metrics()
        if not metrics:
            return None
        # An InstrumentationScope's schema URL is "" when it has none, never None.
        scope = ScopeMetrics(self.scope, metrics, self.scope.schema_url or "")
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
