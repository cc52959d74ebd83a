"""The broker's OTLP span encoding against the SDK's encoder: the same request, field for
field, for every shape of span the SDK can finish."""

from __future__ import annotations

import copy

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.span import TraceState

from skiff_broker.telemetry import otlp_span_encoding
from skiff_broker.telemetry.otlp_span_encoding import SpanEncoder

REMOTE = SpanContext(
    0x0AF7651916CD43DD8448EB211C80319C,
    0xB7AD6B7169203331,
    is_remote=True,
    trace_flags=TraceFlags(TraceFlags.SAMPLED),
    trace_state=TraceState([("vendor", "value"), ("other", "x")]),
)


def finished(resource: Resource, limits: SpanLimits | None = None) -> tuple:
    spans = InMemorySpanExporter()
    provider = TracerProvider(resource=resource, span_limits=limits)
    provider.add_span_processor(SimpleSpanProcessor(spans))
    return provider, spans


def every_kind_of_span() -> list[ReadableSpan]:
    broker, spans = finished(
        Resource.create({"service.name": "skiff-broker", "skiff.broker": "b-0"}, "https://s/1")
    )
    other, other_spans = finished(Resource.create({"service.name": "elsewhere"}))
    server = broker.get_tracer("skiff.server", "1.2", schema_url="https://s/2")
    store = broker.get_tracer("skiff.store", attributes={"scope.kind": "store"})

    with server.start_as_current_span(
        "apache.rocketmq.v2.MessagingService/SendMessage",
        kind=SpanKind.SERVER,
        attributes={
            "rpc.system": "grpc",
            "messaging.batch.message_count": 1,
            "rpc.grpc.status_code": -3,
            "big": 2**62,
            "ratio": 0.25,
            "flag": True,
            "off": False,
            "tags": ("a", "b"),
            "numbers": (1, 2, 3),
            "empty": (),
            "unicode": "zürich ✓",
        },
    ) as parent:
        with store.start_as_current_span("append") as child:
            child.add_event("flushed", {"bytes": 4096, "ok": True}, timestamp=123)
            child.add_event("bare")
            child.set_status(Status(StatusCode.ERROR, "disk full"))
        parent.set_status(Status(StatusCode.OK))
    with server.start_as_current_span(
        "continued",
        context=trace.set_span_in_context(trace.NonRecordingSpan(REMOTE)),
        kind=SpanKind.CONSUMER,
        links=[Link(REMOTE, {"why": "batched"}), Link(parent.get_span_context())],
    ):
        pass
    for kind in (SpanKind.CLIENT, SpanKind.PRODUCER, SpanKind.INTERNAL):
        other.get_tracer("t").start_span(f"kind-{kind.name}", kind=kind).end()
    # Past the limits: dropped counts, also of events and links of which none is kept.
    limited, limited_spans = finished(
        Resource.get_empty(), SpanLimits(max_span_attributes=2, max_events=0, max_links=0)
    )
    crowded = limited.get_tracer("t").start_span(
        "crowded", attributes={"a": 1, "b": 2, "c": 3}, links=[Link(REMOTE)]
    )
    crowded.add_event("lost")
    crowded.end()
    return [
        *spans.get_finished_spans(),
        *other_spans.get_finished_spans(),
        *limited_spans.get_finished_spans(),
    ]


def parsed(data: bytes) -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest.FromString(data)


def test_every_kind_of_span_encodes_as_the_sdk_encodes_it() -> None:
    spans = every_kind_of_span()
    mine = parsed(SpanEncoder().encode(spans))
    assert mine == encode_spans(spans)
    # Not vacuous: the shapes are there.
    assert len(mine.resource_spans) == 3
    assert sum(len(s.spans) for r in mine.resource_spans for s in r.scope_spans) == len(spans)


def test_reused_encodings_give_the_same_bytes_and_leave_the_spans_alone() -> None:
    spans = every_kind_of_span()
    before = [copy.deepcopy(s.to_json()) for s in spans]
    encoder = SpanEncoder()
    first = encoder.encode(spans)
    assert encoder.encode(spans) == first
    assert encoder.encode(spans[::-1]) != first  # order is kept, not sorted
    assert [s.to_json() for s in spans] == before


def test_one_off_values_do_not_grow_the_cache_without_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(otlp_span_encoding, "MAX_CACHED_ATTRIBUTES", 16)
    provider, exported = finished(Resource.get_empty())
    tracer = provider.get_tracer("t")
    for number in range(100):
        tracer.start_span("send", attributes={"messaging.message.id": f"id-{number}"}).end()
    spans = exported.get_finished_spans()
    encoder = SpanEncoder()
    assert parsed(encoder.encode(spans)) == encode_spans(spans)
    assert len(encoder._attributes) <= 16


def test_nothing_to_send_is_an_empty_request() -> None:
    assert SpanEncoder().encode([]) == b""
    assert parsed(b"") == encode_spans([])
