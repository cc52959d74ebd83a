"""Telemetry configured from the standard OTEL_* variables, and off without them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
    OTLPMetricExporter as GrpcMetricExporter,
)
from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
    OTLPMetricExporter as HttpMetricExporter,
)
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter
from opentelemetry.sdk.trace.export import ConsoleSpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased

from skiff_broker.telemetry import Telemetry, telemetry_from_env
from skiff_broker.telemetry.server_interceptor import TracingInterceptor
from skiff_broker.telemetry.setup import (
    DEFAULT_SAMPLE_RATIO,
    metric_exporters_from_env,
    resource_from_env,
    sampler_from_env,
    span_exporters_from_env,
)
from skiff_broker.telemetry.span_export import OtlpGrpcSpanExporter, OtlpHttpSpanExporter
from skiff_broker.telemetry.store_observer import StoreTelemetry

ENDPOINT = "http://127.0.0.1:4318"


# Each test starts from no OTEL_* variable at all, whatever the machine has.
pytestmark = pytest.mark.usefixtures("no_otel_env")


@pytest.fixture
def telemetry() -> Iterator[list[Telemetry]]:
    made: list[Telemetry] = []
    yield made
    for item in made:
        item.shutdown()


def test_off_without_an_exporter(telemetry: list[Telemetry]) -> None:
    telemetry.append(telemetry_from_env())
    assert not telemetry[0].enabled
    assert telemetry[0].store_observer() is None
    assert telemetry[0].handler_tracer() is None


def test_an_otlp_endpoint_turns_traces_and_metrics_on(
    monkeypatch: pytest.MonkeyPatch, telemetry: list[Telemetry]
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", ENDPOINT)
    telemetry.append(telemetry_from_env("broker-x"))
    made = telemetry[0]
    assert made.tracer_provider is not None and made.meter_provider is not None
    assert isinstance(made.store_observer(), StoreTelemetry)
    tracer = made.handler_tracer()
    assert tracer is not None and isinstance(tracer.__self__, TracingInterceptor)
    resource = made.tracer_provider.resource.attributes
    assert resource["service.name"] == "skiff-broker"
    assert resource["skiff.broker"] == "broker-x"
    assert resource["skiff.replication_mode"] == "NONE"
    # The specification's default protocol.
    assert [type(e) for e in span_exporters_from_env()] == [OtlpHttpSpanExporter]
    assert [type(e) for e in metric_exporters_from_env()] == [HttpMetricExporter]


def test_the_replication_mode_is_a_resource_attribute(
    monkeypatch: pytest.MonkeyPatch, telemetry: list[Telemetry]
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", ENDPOINT)
    telemetry.append(telemetry_from_env("broker-x", replication_mode="SYNC"))
    made = telemetry[0]
    assert made.tracer_provider is not None
    assert made.tracer_provider.resource.attributes["skiff.replication_mode"] == "SYNC"
    assert made.replication_mode == "SYNC"


def test_a_signal_endpoint_turns_on_only_that_signal(
    monkeypatch: pytest.MonkeyPatch, telemetry: list[Telemetry]
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", ENDPOINT + "/v1/metrics")
    telemetry.append(telemetry_from_env())
    assert telemetry[0].tracer_provider is None
    assert telemetry[0].meter_provider is not None
    assert telemetry[0].handler_tracer() is None
    assert isinstance(telemetry[0].store_observer(), StoreTelemetry)


def test_exporter_none_turns_a_signal_off(
    monkeypatch: pytest.MonkeyPatch, telemetry: list[Telemetry]
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", ENDPOINT)
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    telemetry.append(telemetry_from_env())
    assert telemetry[0].tracer_provider is not None
    assert telemetry[0].meter_provider is None


def test_sdk_disabled_wins(monkeypatch: pytest.MonkeyPatch, telemetry: list[Telemetry]) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", ENDPOINT)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "TRUE")
    telemetry.append(telemetry_from_env())
    assert not telemetry[0].enabled


def test_console_exporters_need_no_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console, otlp")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "console")
    assert [type(e) for e in span_exporters_from_env()] == [
        ConsoleSpanExporter,
        OtlpHttpSpanExporter,
    ]
    assert [type(e) for e in metric_exporters_from_env()] == [ConsoleMetricExporter]


def test_an_unknown_exporter_is_ignored_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    assert span_exporters_from_env() == []
    assert "'zipkin' is not one of otlp, console, none" in caplog.text


def test_grpc_protocol_per_signal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf")
    assert [type(e) for e in span_exporters_from_env()] == [OtlpGrpcSpanExporter]
    assert [type(e) for e in metric_exporters_from_env()] == [HttpMetricExporter]
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "grpc")
    assert [type(e) for e in metric_exporters_from_env()] == [GrpcMetricExporter]


def test_the_default_sampler_is_parent_based_ratio() -> None:
    sampler = sampler_from_env()
    assert isinstance(sampler, ParentBased)
    assert f"TraceIdRatioBased{{{DEFAULT_SAMPLE_RATIO}}}" in sampler.get_description()


def test_the_sampler_argument_sets_the_default_samplers_ratio(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.25")
    assert "TraceIdRatioBased{0.25}" in sampler_from_env().get_description()


def test_a_bad_sampler_argument_falls_back_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "2")
    assert f"TraceIdRatioBased{{{DEFAULT_SAMPLE_RATIO}}}" in sampler_from_env().get_description()
    assert "OTEL_TRACES_SAMPLER_ARG='2' is not a ratio from 0 to 1" in caplog.text


@pytest.mark.parametrize(
    ("name", "argument", "description"),
    [
        ("always_on", "", "AlwaysOnSampler"),
        ("always_off", "", "AlwaysOffSampler"),
        ("traceidratio", "0.5", "TraceIdRatioBased{0.5}"),
        ("parentbased_always_on", "", "ParentBased{root:AlwaysOnSampler"),
        ("parentbased_always_off", "", "ParentBased{root:AlwaysOffSampler"),
        # Named explicitly without an argument: the specification's ratio, 1.
        ("parentbased_traceidratio", "", "ParentBased{root:TraceIdRatioBased{1.0}"),
    ],
)
def test_named_samplers(
    monkeypatch: pytest.MonkeyPatch, name: str, argument: str, description: str
) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", name)
    if argument:
        monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", argument)
    assert sampler_from_env().get_description().startswith(description)


def test_an_unknown_sampler_falls_back_to_the_default(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "jaeger_remote")
    description = sampler_from_env().get_description()
    assert description.startswith(f"ParentBased{{root:TraceIdRatioBased{{{DEFAULT_SAMPLE_RATIO}}}")
    assert "'jaeger_remote' is not a sampler this broker knows" in caplog.text


def test_service_name_and_resource_attributes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test,team=mq")
    attributes = resource_from_env().attributes
    assert attributes["service.name"] == "skiff-broker"
    assert attributes["deployment.environment"] == "test"
    assert attributes["team"] == "mq"
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attributes")
    assert resource_from_env().attributes["service.name"] == "from-attributes"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-variable")
    assert resource_from_env().attributes["service.name"] == "from-variable"


def test_the_default_sampler_decides_new_traces_before_the_sdk(
    monkeypatch: pytest.MonkeyPatch, telemetry: list[Telemetry]
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    telemetry.append(telemetry_from_env())
    assert telemetry[0].root_sampling is not None
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on")
    telemetry.append(telemetry_from_env())
    assert telemetry[1].root_sampling is None
