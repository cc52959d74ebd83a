"""The broker's OTLP/HTTP span exporter against a real HTTP receiver on loopback, and its
settings from the standard OTEL_EXPORTER_OTLP_* variables."""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from tests.support.certificate_authority import CertificateAuthority
from tests.support.otlp_receiver import OtlpReceiver

from skiff_broker.telemetry.span_export import (
    OtlpGrpcSpanExporter,
    OtlpHttpSpanExporter,
    parse_headers,
)

# Each test starts from no OTEL_* variable at all, whatever the machine has.
pytestmark = pytest.mark.usefixtures("no_otel_env")


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


def some_spans(count: int = 3) -> list[ReadableSpan]:
    finished = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "skiff-broker"}))
    provider.add_span_processor(SimpleSpanProcessor(finished))
    tracer = provider.get_tracer("skiff.server")
    for number in range(count):
        with tracer.start_as_current_span(
            "apache.rocketmq.v2.MessagingService/SendMessage",
            kind=SpanKind.SERVER,
            attributes={"messaging.message.id": f"id-{number}", "rpc.system": "grpc"},
        ):
            tracer.start_span("skiff.store.append").end()
    return list(finished.get_finished_spans())


def test_spans_arrive_as_the_sdk_would_encode_them(
    receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint + "/")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20t0ken,x-tenant=a")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip")
    exporter = OtlpHttpSpanExporter.from_env()
    spans = some_spans()
    try:
        assert exporter.export(spans) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    assert receiver.trace_requests() == [encode_spans(spans)]
    (headers,) = receiver.trace_headers
    assert headers["authorization"] == "Bearer t0ken"
    assert headers["x-tenant"] == "a"
    assert headers["content-encoding"] == "gzip"
    assert headers["content-type"] == "application/x-protobuf"


def test_a_busy_receiver_is_tried_again(receiver: OtlpReceiver) -> None:
    receiver.refuse_traces(503, times=1, retry_after="0")
    receiver.refuse_traces(429, times=1, retry_after="0")
    exporter = OtlpHttpSpanExporter(receiver.endpoint + "/v1/traces", timeout_s=30)
    try:
        assert exporter.export(some_spans(1)) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    assert receiver.trace_posts == 3
    assert receiver.span_count == 2


def test_a_refused_export_is_dropped_at_once_and_said(
    receiver: OtlpReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.refuse_traces(400, times=1)
    exporter = OtlpHttpSpanExporter(receiver.endpoint + "/v1/traces", timeout_s=30)
    with caplog.at_level(logging.WARNING):
        assert exporter.export(some_spans(1)) is SpanExportResult.FAILURE
    exporter.shutdown()
    assert receiver.trace_posts == 1
    assert "could not export 2 spans" in caplog.text
    assert "HTTP 400" in caplog.text


def test_an_unreachable_receiver_fails_the_export_within_its_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    exporter = OtlpHttpSpanExporter(f"http://127.0.0.1:{port}/v1/traces", timeout_s=0.5)
    with caplog.at_level(logging.WARNING):
        assert exporter.export(some_spans(1)) is SpanExportResult.FAILURE
    exporter.shutdown()
    assert "ConnectionError" in caplog.text


def test_shutdown_ends_a_wait_between_tries(receiver: OtlpReceiver) -> None:
    receiver.refuse_traces(503, times=1, retry_after="3600")
    exporter = OtlpHttpSpanExporter(receiver.endpoint + "/v1/traces", timeout_s=7200)
    results: list[SpanExportResult] = []
    exporting = threading.Thread(target=lambda: results.append(exporter.export(some_spans(1))))
    exporting.start()
    receiver.wait_for(lambda: receiver.trace_posts == 1, "the first try", deadline_s=30)
    exporter.shutdown()
    exporting.join(timeout=60)
    assert results == [SpanExportResult.FAILURE]
    assert exporter.export(some_spans(1)) is SpanExportResult.FAILURE
    assert receiver.trace_posts == 1


def test_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert OtlpHttpSpanExporter.from_env().endpoint == "http://localhost:4318/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "2.5")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "deflate")
    made = OtlpHttpSpanExporter.from_env()
    assert (made.endpoint, made.timeout_s, made.compression) == (
        "https://collector:4318/v1/traces",
        2.5,
        "deflate",
    )
    # The traces-specific variables win, and a whole traces endpoint is used as it is.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://traces:443/custom")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "4")
    made = OtlpHttpSpanExporter.from_env()
    assert (made.endpoint, made.timeout_s) == ("https://traces:443/custom", 4.0)


def test_unusable_settings_fall_back_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "soon")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd")
    with caplog.at_level(logging.WARNING):
        made = OtlpHttpSpanExporter.from_env()
    assert (made.timeout_s, made.compression) == (10.0, "none")
    assert "'soon' is not a positive number of seconds" in caplog.text
    assert "'zstd' is not one of none, gzip, deflate" in caplog.text


def test_header_lists() -> None:
    assert parse_headers("a=1, B = two%2Cthree ,c=") == {"a": "1", "b": "two,three", "c": ""}
    assert parse_headers("") == {}


def test_a_malformed_header_is_left_out_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert parse_headers("good=1,bad") == {"good": "1"}
    assert "'bad' is not key=value" in caplog.text


def test_the_grpc_exporter_delivers_the_sdks_request() -> None:
    received: list[ExportTraceServiceRequest] = []

    def export(request: ExportTraceServiceRequest, context: grpc.ServicerContext) -> Any:
        received.append(request)
        return ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "opentelemetry.proto.collector.trace.v1.TraceService",
                {
                    "Export": grpc.unary_unary_rpc_method_handler(
                        export,
                        request_deserializer=ExportTraceServiceRequest.FromString,
                        response_serializer=ExportTraceServiceResponse.SerializeToString,
                    )
                },
            ),
        )
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    spans = some_spans()
    exporter = OtlpGrpcSpanExporter(endpoint=f"http://127.0.0.1:{port}", insecure=True)
    try:
        assert exporter.export(spans) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
        server.stop(None)
    assert received == [encode_spans(spans)]


def test_a_receiver_that_answers_without_end_is_read_no_further_than_needed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A hostile or broken receiver: a refusal whose body claims a gigabyte, of which it
    # sends 128 KiB and then nothing, keeping the connection open.
    listener = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def answer() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(1 << 20)
            connection.sendall(
                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 1000000000\r\n\r\n"
                + b"x" * (128 * 1024)
            )
            done.wait(60)

    answering = threading.Thread(target=answer)
    answering.start()
    port = listener.getsockname()[1]
    exporter = OtlpHttpSpanExporter(f"http://127.0.0.1:{port}/v1/traces", timeout_s=3600)
    try:
        with caplog.at_level(logging.WARNING):
            assert exporter.export(some_spans(1)) is SpanExportResult.FAILURE
    finally:
        exporter.shutdown()
        done.set()
        answering.join()
        listener.close()
    assert "HTTP 400 'xxxx" in caplog.text


def test_mutual_tls_with_the_certificates_the_variables_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    authority = CertificateAuthority(tmp_path)
    server_cert, server_key = authority.issue("collector", names=("127.0.0.1",))
    client_cert, client_key = authority.issue("broker")
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(authority.ca_file))
    tls.load_cert_chain(server_cert, server_key)
    tls.verify_mode = ssl.CERT_REQUIRED
    with OtlpReceiver(tls=tls) as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "5")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", str(authority.ca_file))
        without_client_cert = OtlpHttpSpanExporter.from_env()
        with caplog.at_level(logging.WARNING):
            assert without_client_cert.export(some_spans(1)) is SpanExportResult.FAILURE
        without_client_cert.shutdown()
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", str(client_cert))
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_CLIENT_KEY", str(client_key))
        exporter = OtlpHttpSpanExporter.from_env()
        try:
            assert exporter.export(some_spans(1)) is SpanExportResult.SUCCESS
        finally:
            exporter.shutdown()
        assert receiver.span_count == 2
