"""Tracer and meter providers from the standard ``OTEL_*`` environment variables.

Telemetry is off unless an exporter is configured: ``OTEL_TRACES_EXPORTER`` /
``OTEL_METRICS_EXPORTER`` (``otlp``, ``console``, ``none``; comma-separated), or
an OTLP endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT`` or the signal's own
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``..._METRICS_ENDPOINT``), which implies
``otlp``. ``OTEL_SDK_DISABLED=true`` turns everything off.

The OTLP exporters read their endpoint, headers, timeout, compression and TLS
settings from the environment themselves: the broker's own for spans (``span_export``,
whose requests are written without the SDK's encoder), the SDK's for metrics. The
protocol (``grpc`` or ``http/protobuf``, the default) is chosen here from
``OTEL_EXPORTER_OTLP_PROTOCOL`` or the signal's own ``..._TRACES_PROTOCOL`` /
``..._METRICS_PROTOCOL``. The batch span processor and the periodic metric reader read
``OTEL_BSP_*`` and ``OTEL_METRIC_EXPORT_INTERVAL``.

Sampling: ``OTEL_TRACES_SAMPLER`` as the specification defines it. Unset, the
broker samples ``parentbased_traceidratio`` with the ratio from
``OTEL_TRACES_SAMPLER_ARG`` or :data:`DEFAULT_SAMPLE_RATIO`: a caller's sampled
trace is always continued, and of the rest that fraction is traced.
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
import os
from collections.abc import Callable, Iterable

import grpc
from opentelemetry import context as otel_context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    ParentBased,
    Sampler,
    TraceIdRatioBased,
)

from ..delivery.backlog import GroupBacklog
from ..store.observer import StoreObserver
from . import conventions as cv
from .broker_metrics import BrokerMetrics
from .latency_histograms import HistogramSet, PeriodicHistogramExport
from .metrics_endpoint import MetricsEndpoint, PrometheusReader
from .root_sampling import PresetTraceIds, RootSampling
from .server_interceptor import TracingInterceptor
from .store_observer import StoreTelemetry
from .traffic import NO_TRAFFIC, TrafficObserver

log = logging.getLogger(__name__)

DEFAULT_SERVICE_NAME = "skiff-broker"
# Chosen with bench/telemetry_bench.py (see bench/results/telemetry-cost.md): a sampled request
# costs the broker about 1.2 untraced requests more (its spans built, encoded and
# exported), so at 1% sampled traces add about 1%; unsampled ones cost what every
# request pays anyway (the SERVER span decision and the histogram samples).
DEFAULT_SAMPLE_RATIO = 0.01
_EXPORTERS = ("otlp", "console", "none")
_PROTOCOLS = ("http/protobuf", "grpc")
_OTHER_SAMPLERS = (
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
)


def _env(name: str) -> str:
    return os.environ.get(name, "").strip()


def _exporter_names(signal: str) -> tuple[str, ...]:
    """The exporters of ``signal`` ("traces" or "metrics"); empty means off."""
    configured = _env(f"OTEL_{signal.upper()}_EXPORTER").lower()
    if not configured:
        endpoint = _env("OTEL_EXPORTER_OTLP_ENDPOINT") or _env(
            f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT"
        )
        return ("otlp",) if endpoint else ()
    names = []
    for name in (part.strip() for part in configured.split(",")):
        if name not in _EXPORTERS:
            log.warning(
                "OTEL_%s_EXPORTER: %r is not one of %s; ignoring it",
                signal.upper(),
                name,
                ", ".join(_EXPORTERS),
            )
        elif name != "none" and name not in names:
            names.append(name)
    return tuple(names)


def _protocol(signal: str) -> str:
    protocol = (
        _env(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL")
        or _env("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).lower()
    if protocol not in _PROTOCOLS:
        log.warning(
            "OTLP protocol %r is not supported (use %s); using http/protobuf",
            protocol,
            " or ".join(_PROTOCOLS),
        )
        protocol = "http/protobuf"
    return protocol


def span_exporters_from_env() -> list[SpanExporter]:
    """The configured trace exporters; empty when traces are off."""
    if _sdk_disabled():
        return []
    return [_span_exporter(name) for name in _exporter_names("traces")]


def metric_exporters_from_env() -> list[MetricExporter]:
    """The configured metric exporters; empty when metrics are off."""
    if _sdk_disabled():
        return []
    return [_metric_exporter(name) for name in _exporter_names("metrics")]


def _sdk_disabled() -> bool:
    return _env("OTEL_SDK_DISABLED").lower() == "true"


def _span_exporter(name: str) -> SpanExporter:
    if name == "console":
        return ConsoleSpanExporter()
    # Imported when asked for: the gRPC exporter's modules take a while to load.
    from .span_export import OtlpGrpcSpanExporter, OtlpHttpSpanExporter

    if _protocol("traces") == "grpc":
        return OtlpGrpcSpanExporter()
    return OtlpHttpSpanExporter.from_env()


def _metric_exporter(name: str) -> MetricExporter:
    if name == "console":
        return ConsoleMetricExporter()
    if _protocol("metrics") == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
            OTLPMetricExporter as GrpcMetricExporter,
        )

        return GrpcMetricExporter()
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter as HttpMetricExporter,
    )

    return HttpMetricExporter()


def _ratio(default: float) -> float:
    raw = _env("OTEL_TRACES_SAMPLER_ARG")
    if not raw:
        return default
    try:
        ratio = float(raw)
    except ValueError:
        ratio = -1.0
    if not 0.0 <= ratio <= 1.0:
        log.warning("OTEL_TRACES_SAMPLER_ARG=%r is not a ratio from 0 to 1; using %g", raw, default)
        return default
    return ratio


def sampler_from_env() -> Sampler:
    return _sampler(parent_based_ratio_from_env())


def _sampler(ratio: float | None) -> Sampler:
    """The sampler OTEL_TRACES_SAMPLER names; ``ratio``: its parent-based ratio, if it is
    that one (``parent_based_ratio_from_env``)."""
    if ratio is not None:
        return ParentBased(TraceIdRatioBased(ratio))
    name = _env("OTEL_TRACES_SAMPLER").lower()
    if name == "always_on":
        return ALWAYS_ON
    if name == "always_off":
        return ALWAYS_OFF
    if name == "traceidratio":
        return TraceIdRatioBased(_ratio(1.0))
    if name == "parentbased_always_on":
        return ParentBased(ALWAYS_ON)
    return ParentBased(ALWAYS_OFF)


def parent_based_ratio_from_env() -> float | None:
    """The ratio of new traces sampled when the sampler is ``parentbased_traceidratio``
    (the default, and what an unknown name falls back to); None for the other samplers."""
    name = _env("OTEL_TRACES_SAMPLER").lower() or "parentbased_traceidratio"
    if name in _OTHER_SAMPLERS:
        return None
    if name != "parentbased_traceidratio":
        log.warning(
            "OTEL_TRACES_SAMPLER=%r is not a sampler this broker knows; "
            "using parentbased_traceidratio",
            name,
        )
    # The specification's default ratio is 1.0 when the sampler is named explicitly.
    explicit = _env("OTEL_TRACES_SAMPLER").lower() == "parentbased_traceidratio"
    return _ratio(1.0 if explicit else DEFAULT_SAMPLE_RATIO)


def resource_from_env(
    broker_name: str = "", replication_mode: str = cv.REPLICATION_NONE
) -> Resource:
    """OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME, with service.name skiff-broker by default.

    The broker's name and replication mode are resource attributes too: they are the
    same for everything one process exports (metric points carry them only there).
    """
    attributes: dict[str, str] = {}
    if "service.name" not in OTELResourceDetector().detect().attributes:
        attributes["service.name"] = DEFAULT_SERVICE_NAME
    if broker_name:
        attributes[cv.BROKER] = broker_name
        attributes[cv.REPLICATION_MODE] = replication_mode
    return Resource.create(attributes)


@dataclasses.dataclass
class Telemetry:
    """The broker's providers; both None when telemetry is off."""

    broker_name: str = ""
    tracer_provider: TracerProvider | None = None
    replication_mode: str = cv.REPLICATION_NONE
    # The ratio decision of new traces, made before the SDK is asked (see root_sampling);
    # None when the sampler is not the parent-based trace-id ratio one.
    root_sampling: RootSampling | None = None
    meter_provider: MeterProvider | None = None
    # The store's latency histograms, aggregated outside the SDK's instruments (see
    # latency_histograms) and exported by ``histogram_export``; None when metrics are off.
    histograms: HistogramSet | None = None
    histogram_export: PeriodicHistogramExport | None = None
    # The Prometheus endpoint (--metrics-listen); None when it is off.
    metrics_endpoint: MetricsEndpoint | None = None

    @property
    def enabled(self) -> bool:
        return self.tracer_provider is not None or self.meter_provider is not None

    def store_observer(self) -> StoreObserver | None:
        """What the store reports appends and flushes to; None when telemetry is off."""
        if not self.enabled:
            return None
        return StoreTelemetry(
            tracer_provider=self.tracer_provider,
            histograms=self.histograms,
            broker_name=self.broker_name,
            replication_mode=self.replication_mode,
            roots=self.root_sampling,
        )

    def traffic_observer(
        self, *, cluster: str, node_id: str, backlog: Callable[[], Iterable[GroupBacklog]]
    ) -> TrafficObserver:
        """What counts the messages in and out (RocketMQ's metrics); a no-op when metrics
        are off. ``backlog`` gives the consumer groups' backlogs when the gauges are read."""
        if self.meter_provider is None or self.histograms is None:
            return NO_TRAFFIC
        return BrokerMetrics(
            self.meter_provider.get_meter(cv.SERVER_SCOPE),
            self.histograms,
            cluster=cluster,
            node_id=node_id,
            backlog=backlog,
        )

    def start_metrics_endpoint(self) -> int:
        """Serve /metrics (if configured); its port, 0 when there is none."""
        if self.metrics_endpoint is None:
            return 0
        return self.metrics_endpoint.start()

    def call_context(self) -> contextvars.Context | None:
        """The context the gRPC server's calls start from (``RpcServer.call_context``):
        the one unsampled new trace current, so that calls left unsampled set nothing;
        None when the sampler is not the parent-based ratio one."""
        if self.root_sampling is None:
            return None
        context = contextvars.copy_context()
        # Never detached: the context is only ever copied, for calls.
        context.run(otel_context.attach, self.root_sampling.unsampled)
        return context

    def handler_tracer(
        self, call_context: contextvars.Context | None = None
    ) -> Callable[[grpc.RpcMethodHandler, str], grpc.RpcMethodHandler] | None:
        """What wraps a gRPC method handler (and its method path) in a SERVER span;
        ``call_context``: what the server's calls start from, if it was given one."""
        if self.tracer_provider is None:
            return None
        roots = self.root_sampling
        starts_unsampled = (
            roots is not None
            and call_context is not None
            and call_context.run(otel_context.get_current) is roots.unsampled
        )
        return TracingInterceptor(
            self.tracer_provider,
            self.broker_name,
            roots,
            calls_start_unsampled=starts_unsampled,
        ).trace

    def shutdown(self) -> None:
        """Export what is buffered and stop the exporters."""
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()
            self.tracer_provider = None
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.stop()
            self.metrics_endpoint = None
        if self.histogram_export is not None:
            # Before the meter provider shuts the exporters down.
            self.histogram_export.stop()
            self.histogram_export = None
        if self.meter_provider is not None:
            self.meter_provider.shutdown()
            self.meter_provider = None


def telemetry_from_env(
    broker_name: str = "", replication_mode: str = cv.REPLICATION_NONE, metrics_listen: str = ""
) -> Telemetry:
    """Telemetry from the ``OTEL_*`` variables, plus a Prometheus endpoint on
    ``metrics_listen`` (HOST:PORT; empty: none) reading the same instruments."""
    span_exporters = span_exporters_from_env()
    metric_exporters = metric_exporters_from_env()
    telemetry = Telemetry(broker_name, replication_mode=replication_mode)
    if not span_exporters and not metric_exporters and not metrics_listen:
        return telemetry
    resource = resource_from_env(broker_name, replication_mode)
    if span_exporters:
        ids = PresetTraceIds()
        ratio = parent_based_ratio_from_env()
        if ratio is not None:
            telemetry.root_sampling = RootSampling(ratio, ids)
        sampler = _sampler(ratio)
        provider = TracerProvider(sampler=sampler, resource=resource, id_generator=ids)
        for exporter in span_exporters:
            provider.add_span_processor(BatchSpanProcessor(exporter))
        telemetry.tracer_provider = provider
        log.info(
            "exporting traces to %s, sampler %s",
            ", ".join(_describe(name, "traces") for name in _exporter_names("traces")),
            sampler.get_description(),
        )
    if metric_exporters or metrics_listen:
        # One set of instruments: the SDK's (counters, gauges) in the meter provider, the
        # broker's own histograms beside it; the OTLP/console exports and the Prometheus
        # endpoint each read both.
        histograms = HistogramSet(cv.STORE_SCOPE)
        readers: list[MetricReader] = [
            PeriodicExportingMetricReader(exporter) for exporter in metric_exporters
        ]
        if metrics_listen:
            prometheus = PrometheusReader(histograms, resource)
            readers.append(prometheus)
            telemetry.metrics_endpoint = MetricsEndpoint(prometheus, metrics_listen)
        telemetry.meter_provider = MeterProvider(metric_readers=readers, resource=resource)
        telemetry.histograms = histograms
    # The histograms are there whenever there are exporters (set just above).
    if metric_exporters and telemetry.histograms is not None:
        telemetry.histogram_export = PeriodicHistogramExport(
            telemetry.histograms,
            metric_exporters,
            resource,
            interval_s=_milliseconds("OTEL_METRIC_EXPORT_INTERVAL", 60_000) / 1000,
            timeout_s=_milliseconds("OTEL_METRIC_EXPORT_TIMEOUT", 30_000) / 1000,
        )
        telemetry.histogram_export.start()
        log.info(
            "exporting metrics to %s",
            ", ".join(_describe(name, "metrics") for name in _exporter_names("metrics")),
        )
    return telemetry


def _milliseconds(name: str, default: float) -> float:
    raw = _env(name)
    try:
        value = float(raw) if raw else default
    except ValueError:
        value = -1.0
    if value <= 0:
        log.warning("%s=%r is not a positive number of milliseconds; using %g", name, raw, default)
        return default
    return value


def _describe(name: str, signal: str) -> str:
    if name != "otlp":
        return name
    endpoint = _env(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT") or _env(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    return f"otlp ({_protocol(signal)}{', ' + endpoint if endpoint else ''})"
