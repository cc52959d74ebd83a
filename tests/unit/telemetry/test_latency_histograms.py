"""The broker's own histogram aggregation against the SDK's, and its periodic export."""

from __future__ import annotations

import sys
import threading
from typing import Any

import numpy as np
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    InMemoryMetricReader,
    MetricExporter,
    MetricExportResult,
    MetricsData,
)
from opentelemetry.sdk.resources import Resource

from skiff_broker.telemetry import conventions as cv
from skiff_broker.telemetry.latency_histograms import (
    FOLD_AT,
    ExplicitBucketHistogram,
    HistogramSet,
    PeriodicHistogramExport,
)

# On, between and beyond the bucket bounds, for two attribute sets.
SAMPLES = [
    (0.0, "a"),
    (0.00005, "a"),
    (0.00007, "a"),
    (0.0001, "b"),
    (0.003, "a"),
    (0.003, "b"),
    (5.0, "a"),
    (11.0, "b"),
    (0.25, "a"),
]


def sdk_and_mine() -> tuple[InMemoryMetricReader, Any, ExplicitBucketHistogram]:
    """A reader of an SDK latency histogram, that histogram, and the broker's own."""
    reader = InMemoryMetricReader()
    sdk = MeterProvider(metric_readers=[reader]).get_meter("t")
    sdk_histogram = sdk.create_histogram(
        "latency", unit="s", explicit_bucket_boundaries_advisory=cv.LATENCY_BUCKETS_S
    )
    mine = HistogramSet("t").histogram(
        "latency", unit="s", description="", bounds=cv.LATENCY_BUCKETS_S, labels=("k",)
    )
    return reader, sdk_histogram, mine


def test_points_match_what_the_sdk_histogram_would_report() -> None:
    reader, sdk_histogram, mine = sdk_and_mine()
    for value, label in SAMPLES:
        sdk_histogram.record(value, {"k": label})
        mine.record(value, (label,))

    (expected_metric,) = reader.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics
    metric = mine.metric(now_ns=1)
    assert metric is not None and (metric.name, metric.unit) == ("latency", "s")
    assert metric.data.aggregation_temporality is AggregationTemporality.CUMULATIVE

    def by_label(points: Any) -> dict[str, tuple]:
        return {
            p.attributes["k"]: (
                p.count,
                round(p.sum, 9),
                list(p.bucket_counts),
                tuple(p.explicit_bounds),
                p.min,
                p.max,
            )
            for p in points
        }

    assert by_label(metric.data.data_points) == by_label(expected_metric.data.data_points)


def test_many_samples_match_the_sdk_across_folds() -> None:
    # More samples than wait before a fold: most are folded while recording.
    reader, sdk_histogram, mine = sdk_and_mine()
    values = [(i % 997) * 1e-5 for i in range(3 * FOLD_AT + 17)]
    held = mine.samples(("a",))
    for i, value in enumerate(values):
        sdk_histogram.record(value, {"k": "a"})
        if i % 2:
            mine.record(value, ("a",))
        else:
            # A recorder holding the point's list, as the store's append scopes do.
            held.append(value)
            if len(held) >= FOLD_AT:
                mine.fold(("a",))
    mine.record(0.002, ("a",), samples=FOLD_AT + 1)
    sdk_histogram.record(0.002, {"k": "a"})  # and FOLD_AT more below
    for _ in range(FOLD_AT):
        sdk_histogram.record(0.002, {"k": "a"})

    (expected,) = reader.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics
    (want,) = expected.data.data_points
    metric = mine.metric(now_ns=1)
    assert metric is not None
    (got,) = metric.data.data_points
    assert (got.count, list(got.bucket_counts), got.min, got.max) == (
        want.count,
        list(want.bucket_counts),
        want.min,
        want.max,
    )
    assert abs(got.sum - want.sum) < 1e-9


def test_samples_recorded_by_threads_while_read_are_each_counted_once() -> None:
    histogram = HistogramSet("t").histogram(
        "size", unit="By", description="", bounds=cv.MESSAGE_SIZE_BUCKETS, labels=("k",)
    )
    threads, per_thread = 4, 20_000
    reads: list[int] = []
    done = threading.Event()

    def record(n: int) -> None:
        for i in range(per_thread):
            if i % 3:
                histogram.record(n, ("a",))
            else:
                histogram.record_each([n, n], ("a",))

    def read() -> None:
        while not done.is_set():
            reads.append(sum(count for _, count, _ in histogram.totals()))

    # Threads switch every microsecond instead of every 5 ms: a recorder often runs
    # in the middle of a fold.
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        reader = threading.Thread(target=read)
        reader.start()
        recorders = [threading.Thread(target=record, args=(n,)) for n in range(1, threads + 1)]
        for thread in recorders:
            thread.start()
        for thread in recorders:
            thread.join()
        done.set()
        reader.join()
    finally:
        sys.setswitchinterval(switch_interval)

    per_thread_samples = per_thread + len(range(0, per_thread, 3))
    ((attributes, count, total),) = histogram.totals()
    assert attributes == {"k": "a"}
    assert count == threads * per_thread_samples
    assert total == sum(n * per_thread_samples for n in range(1, threads + 1))
    assert reads == sorted(reads), "a read saw fewer samples than one before it"


def test_recording_values_together_is_recording_each() -> None:
    def histogram() -> Any:
        return HistogramSet("t").histogram(
            "size", unit="By", description="", bounds=cv.MESSAGE_SIZE_BUCKETS, labels=("k",)
        )

    one_by_one, together = histogram(), histogram()
    sizes = {"a": [1, 1024, 1025, 4 * 1024 * 1024, 100, 9_000_000], "b": [0, 7]}
    for label, values in sizes.items():
        for value in values:
            one_by_one.record(value, (label,))
        together.record_each(values[:3], (label,))
        # A usual run's sizes come as an array, big-endian as they were read.
        together.record_each(np.array(values[3:], dtype=">u4"), (label,))
    together.record_each([], ("c",))
    together.record_each(np.array([], dtype=">u4"), ("d",))

    def points(histogram: Any) -> list[tuple]:
        metric = histogram.metric(now_ns=1)
        return sorted(
            (p.attributes["k"], p.count, p.sum, list(p.bucket_counts), p.min, p.max)
            for p in metric.data.data_points
        )

    assert points(together) == points(one_by_one)
    assert len(points(together)) == 2


def test_nothing_recorded_means_nothing_to_export() -> None:
    histograms = HistogramSet(cv.STORE_SCOPE)
    histograms.histogram("latency", unit="s", description="", bounds=(1.0,), labels=())
    assert histograms.metrics_data(Resource.get_empty()) is None


class CollectingExporter(MetricExporter):
    """Keeps what it is handed (the real exporters need a receiver: see the integration test)."""

    def __init__(self) -> None:
        super().__init__()
        self.exported: list[MetricsData] = []
        self.exported_once = threading.Event()

    def export(self, metrics_data: MetricsData, **kwargs: Any) -> MetricExportResult:
        self.exported.append(metrics_data)
        self.exported_once.set()
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        pass


def test_export_runs_every_interval_and_at_stop_under_the_resource() -> None:
    histograms = HistogramSet(cv.STORE_SCOPE)
    latency = histograms.histogram(
        "latency", unit="s", description="d", bounds=(1.0,), labels=("k",), constant={"c": "1"}
    )
    latency.record(0.5, ("x",))
    exporter = CollectingExporter()
    resource = Resource.create({"service.name": "skiff-test"})
    export = PeriodicHistogramExport(histograms, [exporter], resource, interval_s=0.01, timeout_s=5)
    export.start()
    try:
        assert exporter.exported_once.wait(30), "no periodic export"
        latency.record(2.0, ("x",))
    finally:
        export.stop()

    last = exporter.exported[-1]
    (resource_metrics,) = last.resource_metrics
    assert resource_metrics.resource.attributes["service.name"] == "skiff-test"
    (scope_metrics,) = resource_metrics.scope_metrics
    assert scope_metrics.scope.name == cv.STORE_SCOPE
    (point,) = scope_metrics.metrics[0].data.data_points
    assert dict(point.attributes) == {"c": "1", "k": "x"}
    # Cumulative: the last export holds both samples.
    assert (point.count, list(point.bucket_counts), point.sum) == (2, [1, 1], 2.5)
    assert point.start_time_unix_nano <= point.time_unix_nano
