"""In-memory OpenTelemetry pipelines: the SDK's own span exporter, and the broker's
latency histograms read the way their periodic export reads them."""

from __future__ import annotations

import dataclasses

from opentelemetry.sdk.metrics.export import HistogramDataPoint, Metric
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, TraceIdRatioBased

from skiff_broker.telemetry import conventions as cv
from skiff_broker.telemetry.latency_histograms import HistogramSet
from skiff_broker.telemetry.root_sampling import PresetTraceIds, RootSampling


@dataclasses.dataclass
class Pipelines:
    tracer_provider: TracerProvider
    histograms: HistogramSet
    spans_out: InMemorySpanExporter

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        return [s for s in self.spans_out.get_finished_spans() if name is None or s.name == name]

    def metric(self, name: str) -> Metric | None:
        data = self.histograms.metrics_data(Resource.get_empty())
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
    return Pipelines(tracer_provider, HistogramSet(cv.STORE_SCOPE), spans_out)


def ratio_pipelines(ratio: float) -> tuple[Pipelines, RootSampling]:
    """The broker's default sampler at ``ratio``, and the decision of new traces that
    stands for it (as the broker wires them); the caller shuts the provider down."""
    ids = PresetTraceIds()
    spans_out = InMemorySpanExporter()
    tracer_provider = TracerProvider(
        sampler=ParentBased(TraceIdRatioBased(ratio)), id_generator=ids
    )
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans_out))
    pipes = Pipelines(tracer_provider, HistogramSet(cv.STORE_SCOPE), spans_out)
    return pipes, RootSampling(ratio, ids)
