"""New traces decided before the SDK is asked: untraced calls to the broker's gRPC server on
127.0.0.1, traced by the interceptor or as the broker wires its own server, spans read from
the SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
import random
import threading

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import SpanKind
from tests.support.rpc_serving import serving

from skiff_broker.frontdoor.grpc.server import RpcServer
from skiff_broker.telemetry.root_sampling import PresetTraceIds, RootSampling
from skiff_broker.telemetry.server_interceptor import TracingInterceptor
from skiff_broker.telemetry.setup import Telemetry

SERVICE = "test.Probe"


def untraced_calls(
    ratio: float, calls: int, *, server: str = "intercepted"
) -> tuple[list[trace.SpanContext], InMemorySpanExporter]:
    """The span context each call's handler saw, and the spans exported, at ``ratio``.

    Each handler also starts a child span, as the store does for an append. ``server``:
    "as-the-broker" sets the server up as the broker sets up its own: calls start in
    the unsampled context (``Telemetry.call_context``) and the handler is wrapped once
    (``Telemetry.handler_tracer``); "wrapped" wraps it once for a server whose calls
    start in whatever context it runs in; "intercepted" has the interceptor wrap it per
    call.
    """
    spans_out = InMemorySpanExporter()
    ids = PresetTraceIds()
    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(ratio)), id_generator=ids)
    provider.add_span_processor(SimpleSpanProcessor(spans_out))
    telemetry = Telemetry("broker-t", provider, root_sampling=RootSampling(ratio, ids))
    tracer = provider.get_tracer("test")
    seen: list[trace.SpanContext] = []

    async def probe(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        seen.append(trace.get_current_span().get_span_context())
        tracer.start_span("child").end()
        return b""

    call_context = telemetry.call_context() if server == "as-the-broker" else None

    def register(rpc_server: RpcServer) -> None:
        handler = grpc.unary_unary_rpc_method_handler(probe)
        if server != "intercepted":
            trace_handler = telemetry.handler_tracer(call_context)
            assert trace_handler is not None
            handler = trace_handler(handler, f"/{SERVICE}/Unary")
        rpc_server.add_registered_method_handlers(SERVICE, {"Unary": handler})

    async def run() -> None:
        async with (
            serving(
                register,
                interceptors=[TracingInterceptor(provider, "broker-t", telemetry.root_sampling)]
                if server == "intercepted"
                else (),
                call_context=call_context,
            ) as port,
            grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel,
        ):
            for _ in range(calls):
                await channel.unary_unary(f"/{SERVICE}/Unary")(b"hi")

    try:
        asyncio.run(run())
    finally:
        provider.shutdown()
    return seen, spans_out


SERVERS = ["intercepted", "as-the-broker", "wrapped"]


def server_spans(spans_out: InMemorySpanExporter) -> list[ReadableSpan]:
    """The SERVER spans exported, after checking that each has exactly one child: the
    handler's work followed the call's decision, whichever it was."""
    spans = spans_out.get_finished_spans()
    servers = [s for s in spans if s.kind is SpanKind.SERVER]
    children = [s for s in spans if s.kind is not SpanKind.SERVER]
    assert sorted(c.parent.span_id for c in children if c.parent is not None) == sorted(
        s.context.span_id for s in servers
    )
    assert len(children) == len(servers)
    return servers


@pytest.mark.parametrize("server", SERVERS)
def test_new_traces_are_sampled_at_the_ratio_and_keep_the_id_decided_on(
    server: str,
) -> None:
    # Seeded: the SDK draws its ids from the random module. Deciding twice (once here,
    # once more in the SDK on a fresh id) would sample a quarter of them, not half.
    random.seed(16)
    seen, spans_out = untraced_calls(0.5, 200, server=server)
    exported = server_spans(spans_out)
    assert 80 <= len(exported) <= 120
    bound = TraceIdRatioBased(0.5).bound
    sampled = [c for c in seen if c.trace_flags.sampled]
    assert [(s.context.trace_id, s.context.span_id) for s in exported] == [
        (c.trace_id, c.span_id) for c in sampled
    ]
    assert all(s.parent is None for s in exported)
    assert all(s.context.trace_id & TraceIdRatioBased.TRACE_ID_LIMIT < bound for s in exported)


@pytest.mark.parametrize("server", SERVERS)
def test_an_unsampled_new_trace_is_current_and_valid_but_records_nothing(
    server: str,
) -> None:
    seen, spans_out = untraced_calls(0.0, 20, server=server)
    assert spans_out.get_finished_spans() == ()
    # Valid and unsampled, so that what runs under it follows the decision.
    assert len(seen) == 20
    assert all(c.is_valid and not c.trace_flags.sampled for c in seen)


@pytest.mark.parametrize("server", SERVERS)
def test_at_ratio_one_every_request_is_a_recorded_root(server: str) -> None:
    seen, spans_out = untraced_calls(1.0, 10, server=server)
    exported = server_spans(spans_out)
    assert [s.context.span_id for s in exported] == [c.span_id for c in seen]
    assert all(s.parent is None for s in exported)


def test_a_preset_trace_id_goes_to_its_own_thread_once() -> None:
    ids = PresetTraceIds()
    ids.preset(0x1234)
    elsewhere: list[int] = []
    thread = threading.Thread(target=lambda: elsewhere.append(ids.generate_trace_id()))
    thread.start()
    thread.join()
    assert elsewhere[0] != 0x1234
    assert ids.generate_trace_id() == 0x1234
    assert ids.generate_trace_id() != 0x1234
