"""Span files from a real broker, as the OpenTelemetry Collector's file exporter writes them.

``produce_span_file(tmp_path, ...)`` starts a broker process that exports to an
:class:`~tests.support.otlp_receiver.OtlpReceiver`, sends messages over raw gRPC, each
request carrying a W3C ``traceparent`` of its own, stops the broker (which
exports everything it still holds) and writes what arrived as OTLP JSON lines:
``<tmp_path>/otlp/traces.jsonl`` and ``metrics.jsonl``. Tests of code that reads
exported spans (append/flush latency per broker, topic, flush type) call it to
get a realistic input.

Import it as ``tests.support.span_files`` (the suite runs from the repository root).
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import uuid
from collections.abc import Sequence
from pathlib import Path

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub
from tests.support.broker_process import create_topics, data_dir_of, running_broker
from tests.support.otlp_receiver import OtlpReceiver

from skiff_broker.metadata.topic_table import TopicConfig

SEND_DEADLINE_S = 30.0


@dataclasses.dataclass(frozen=True)
class SentRequest:
    """One SendMessage call: its topic and the trace context it carried (hex; "" if none)."""

    topic: str
    trace_id: str
    span_id: str
    sampled: bool


@dataclasses.dataclass
class SpanFileRun:
    traces_path: Path
    metrics_path: Path
    broker_name: str
    flush_type: str
    sent: list[SentRequest]
    # Stopped, but still holding everything it received.
    receiver: OtlpReceiver


def traceparent(trace_id: str, span_id: str, sampled: bool) -> str:
    return f"00-{trace_id}-{span_id}-{'01' if sampled else '00'}"


def send_request(topic: str, body: bytes) -> spb.SendMessageRequest:
    return spb.SendMessageRequest(
        messages=[
            pb.Message(
                topic=pb.Resource(name=topic),
                body=body,
                system_properties=pb.SystemProperties(
                    message_id=uuid.uuid4().hex.upper(), message_type=pb.MessageType.NORMAL
                ),
            )
        ]
    )


async def send_traced(
    endpoint: str, topic: str, count: int, *, sampled: bool | None, concurrency: int = 1
) -> list[SentRequest]:
    """``count`` single-message sends from ``concurrency`` clients at once.

    ``sampled=None`` sends no trace context at all.
    """
    sent: list[SentRequest] = []

    async def client(n: int) -> None:
        async with grpc.aio.insecure_channel(endpoint) as channel:
            stub = MessagingServiceStub(channel)
            for i in range(n):
                trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
                metadata = ()
                if sampled is not None:
                    metadata = (("traceparent", traceparent(trace_id, span_id, sampled)),)
                response = await stub.SendMessage(
                    send_request(topic, b"body %d" % i),
                    metadata=metadata,
                    timeout=SEND_DEADLINE_S,
                )
                assert response.status.code == pb.Code.OK, response.status
                if sampled is None:
                    trace_id = span_id = ""
                sent.append(SentRequest(topic, trace_id, span_id, bool(sampled)))

    shares = [
        count // concurrency + (1 if i < count % concurrency else 0) for i in range(concurrency)
    ]
    await asyncio.gather(*(client(n) for n in shares if n))
    return sent


def span_file_env(endpoint: str) -> dict[str, str]:
    """A broker's OTEL_* settings for these runs: OTLP/HTTP to ``endpoint``, new traces
    sampled at ratio 0 (only a sampled caller's trace is recorded), quick exports."""
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_SERVICE_NAME": "",
        "OTEL_RESOURCE_ATTRIBUTES": "",
        "OTEL_TRACES_SAMPLER": "",
        "OTEL_TRACES_SAMPLER_ARG": "0",
        "OTEL_BSP_SCHEDULE_DELAY": "200",
        "OTEL_METRIC_EXPORT_INTERVAL": "500",
    }


def produce_span_file(
    tmp_path: Path,
    *,
    flush_type: str = "SYNC_FLUSH",
    broker_name: str = "broker-a",
    topics: Sequence[str] = ("SpanTopicA", "SpanTopicB"),
    sampled_per_topic: int = 20,
    unsampled_per_topic: int = 3,
    untraced_per_topic: int = 3,
    concurrency: int = 4,
) -> SpanFileRun:
    """Run a broker, send traced messages, and save the spans it exported.

    Per topic: ``sampled_per_topic`` sends with a sampled traceparent (from
    ``concurrency`` clients at once, so group commits serve several waiters), then
    ``unsampled_per_topic`` with an unsampled one and ``untraced_per_topic`` with
    none. The broker samples new traces at ratio 0 here, so exactly the sampled
    requests' traces are exported; the histograms count every send.
    """
    create_topics(data_dir_of(tmp_path), *(TopicConfig(t, 4, 4) for t in topics))
    with OtlpReceiver() as receiver:
        env = span_file_env(receiver.endpoint)
        args = ("--flush-type", flush_type, "--broker-name", broker_name)
        sent: list[SentRequest] = []
        with running_broker(tmp_path, *args, env=env) as broker:

            async def send_all() -> None:
                for topic in topics:
                    sent.extend(
                        await send_traced(
                            broker.endpoint,
                            topic,
                            sampled_per_topic,
                            sampled=True,
                            concurrency=concurrency,
                        )
                    )
                    sent.extend(
                        await send_traced(
                            broker.endpoint, topic, unsampled_per_topic, sampled=False
                        )
                    )
                    sent.extend(
                        await send_traced(broker.endpoint, topic, untraced_per_topic, sampled=None)
                    )

            asyncio.run(send_all())
        # A clean stop exports what the broker still held: everything is here now.
    out = tmp_path / "otlp"
    return SpanFileRun(
        traces_path=receiver.write_traces_json(out / "traces.jsonl"),
        metrics_path=receiver.write_metrics_json(out / "metrics.jsonl"),
        broker_name=broker_name,
        flush_type=flush_type,
        sent=sent,
        receiver=receiver,
    )
