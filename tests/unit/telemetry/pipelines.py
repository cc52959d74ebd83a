"""In-memory OpenTelemetry pipelines: the SDK's own span exporter and metric reader."""

from __future__ import annotations

import dataclasses

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader, Metric
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased


@dataclasses.dataclass
class Pipelines:
    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    spans_out: InMemorySpanExporter
    reader: InMemoryMetricReader

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        return [s for s in self.spans_out.get_finished_spans() if name is None or s.name == name]

    def metric(self, name: str) -> Metric | None:
        data = self.reader.get_metrics_data()
        for resource_metrics in data.resource_metrics if data else ():
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    if metric.name == name:
                        return metric
        return None

    def points(self, name: str) -> list[HistogramDataPoint]:
        metric = self.metric(name)
        return list(metric.data.data_points) if metric is not None else []


def in_memory_pipelines() -> Pipelines:
    """Every span sampled unless its parent is not (the broker's sampler at ratio 1)."""
    spans_out = InMemorySpanExporter()
    tracer_provider = TracerProvider(sampler=ParentBased(ALWAYS_ON))
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans_out))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    return Pipelines(tracer_provider, meter_provider, spans_out, reader)
