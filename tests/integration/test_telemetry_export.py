"""A real broker process exporting spans and histograms over OTLP/HTTP to a receiver the
test runs on 127.0.0.1, with trace context sent as gRPC metadata by a raw gRPC client."""

from __future__ import annotations

import collections
import json
import secrets
from pathlib import Path

import grpc
import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from tests.support.broker_process import create_topics, data_dir_of, running_broker
from tests.support.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.support.span_files import SpanFileRun, produce_span_file, span_file_env, traceparent

from skiff_broker.client.records import encode_record, topic_field
from skiff_broker.metadata.topic_table import TopicConfig
from skiff_broker.records.v1 import records_pb2 as rpb
from skiff_broker.records.v1 import records_pb2_grpc
from skiff_broker.store.message import encode_properties
from skiff_broker.telemetry import conventions as cv

SEND_SPAN = "apache.rocketmq.v2.MessagingService/SendMessage"
TOPICS = ("SpanTopicA", "SpanTopicB")
SAMPLED_PER_TOPIC = 20
OTHER_PER_TOPIC = 3


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> SpanFileRun:
    return produce_span_file(
        tmp_path_factory.mktemp("telemetry"),
        flush_type="SYNC_FLUSH",
        broker_name="broker-t",
        topics=TOPICS,
        sampled_per_topic=SAMPLED_PER_TOPIC,
        unsampled_per_topic=OTHER_PER_TOPIC,
        untraced_per_topic=OTHER_PER_TOPIC,
    )


def by_trace(run: SpanFileRun) -> dict[str, list[ReceivedSpan]]:
    traces: dict[str, list[ReceivedSpan]] = collections.defaultdict(list)
    for span in run.receiver.spans():
        traces[span.trace_id].append(span)
    return traces


def test_each_send_continues_the_callers_trace_down_to_its_append(run: SpanFileRun) -> None:
    traces = by_trace(run)
    sampled = [s for s in run.sent if s.sampled]
    assert len(sampled) == len(TOPICS) * SAMPLED_PER_TOPIC
    for sent in sampled:
        spans = traces[sent.trace_id]
        (server,) = [s for s in spans if s.name == SEND_SPAN]
        (append,) = [s for s in spans if s.name == cv.APPEND_SPAN]
        assert server.span.kind == Span.SPAN_KIND_SERVER
        # OpenTelemetry's messaging conventions, read from the request.
        assert server.attributes[cv.MESSAGING_SYSTEM] == "rocketmq"
        assert server.attributes[cv.MESSAGING_OPERATION_TYPE] == "send"
        assert server.attributes[cv.MESSAGING_OPERATION] == "send"
        assert server.attributes[cv.TOPIC] == sent.topic
        assert server.attributes[cv.MESSAGE_COUNT] == 1
        assert server.attributes[cv.MESSAGE_ID]
        assert server.parent_span_id == sent.span_id
        assert append.parent_span_id == server.span_id
        assert append.attributes == {
            cv.BROKER: "broker-t",
            cv.REPLICATION_MODE: "ASYNC",
            cv.MESSAGING_SYSTEM: "rocketmq",
            cv.FLUSH_TYPE: "SYNC_FLUSH",
            cv.MESSAGE_COUNT: 1,
            cv.TOPIC: sent.topic,
            cv.QUEUE_ID: append.attributes[cv.QUEUE_ID],
            cv.PUT_STATUS: "PUT_OK",
            cv.APPEND_BYTES: append.attributes[cv.APPEND_BYTES],
        }
        assert 0 <= int(append.attributes[cv.QUEUE_ID]) < 4
        assert append.attributes[cv.APPEND_BYTES] > len(b"body 0")
        assert append.resource["service.name"] == "skiff-broker"


def test_unsampled_and_untraced_sends_export_no_spans(run: SpanFileRun) -> None:
    sampled_traces = {s.trace_id for s in run.sent if s.sampled}
    # With a sampled caller every trace is continued; of new traces the test samples none.
    assert {s.trace_id for s in run.receiver.spans()} == sampled_traces
    assert len([s for s in run.sent if not s.sampled]) == 2 * len(TOPICS) * OTHER_PER_TOPIC


def test_group_commit_flush_spans_count_their_waiters(run: SpanFileRun) -> None:
    spans = run.receiver.spans()
    appends = {s.span_id: s for s in spans if s.name == cv.APPEND_SPAN}
    flushes = [s for s in spans if s.name == cv.FLUSH_SPAN]
    assert flushes
    for flush in flushes:
        assert flush.attributes[cv.FLUSH_TYPE] == "SYNC_FLUSH"
        assert flush.attributes[cv.BROKER] == "broker-t"
        assert flush.attributes[cv.REPLICATION_MODE] == "ASYNC"
        # A child of its first waiter's append, linked to the others it served.
        parent = appends[flush.parent_span_id]
        # That append was not durable yet when the flush began: the flush wrote it.
        assert flush.attributes[cv.FLUSH_BYTES] >= parent.attributes[cv.APPEND_BYTES] > 0
        assert flush.trace_id == parent.trace_id
        waiters = flush.attributes[cv.FLUSH_WAITERS]
        assert len(flush.links) == waiters - 1
        assert all(span_id in appends for _, span_id in flush.links)
    # Each sampled send waited for one flush at most (none if a flush that began before
    # it asked covered its record); unsampled sends never overlapped sampled ones here.
    named = [f.parent_span_id for f in flushes] + [s for f in flushes for _, s in f.links]
    assert len(named) == len(set(named))
    assert sum(f.attributes[cv.FLUSH_WAITERS] for f in flushes) == len(named)


def final_points(run: SpanFileRun, name: str) -> dict[tuple, object]:
    """The last exported point per attribute set (cumulative: it holds every sample)."""
    from tests.support.otlp_receiver import attributes

    points = {}
    for point, resource in run.receiver.histogram_points(name):
        # Broker name and replication mode come with the resource, once per export.
        assert resource[cv.BROKER] == "broker-t"
        assert resource[cv.REPLICATION_MODE] == "ASYNC"
        assert resource["service.name"] == "skiff-broker"
        points[tuple(sorted(attributes(point.attributes).items()))] = point
    return points


def test_histograms_are_exported_in_seconds_with_explicit_buckets(run: SpanFileRun) -> None:
    appends = final_points(run, cv.APPEND_DURATION)
    assert run.receiver.unit_of(cv.APPEND_DURATION) == "s"
    per_topic = {}
    for key, point in appends.items():
        labels = dict(key)
        assert labels[cv.FLUSH_TYPE] == "SYNC_FLUSH"
        assert labels[cv.PUT_STATUS] == "PUT_OK"
        assert tuple(point.explicit_bounds) == cv.LATENCY_BUCKETS_S
        assert sum(point.bucket_counts) == point.count
        per_topic[labels[cv.TOPIC]] = point.count
    # Every send is counted, traced or not.
    sends = collections.Counter(s.topic for s in run.sent)
    assert per_topic == dict(sends)

    flushes = final_points(run, cv.FLUSH_DURATION)
    assert run.receiver.unit_of(cv.FLUSH_DURATION) == "s"
    (flush_point,) = flushes.values()
    assert tuple(flush_point.explicit_bounds) == cv.LATENCY_BUCKETS_S
    assert flush_point.count >= len([s for s in run.receiver.spans() if s.name == cv.FLUSH_SPAN])


def test_the_span_file_is_otlp_json_lines(run: SpanFileRun) -> None:
    lines = Path(run.traces_path).read_text().splitlines()
    assert len(lines) == len(run.receiver.trace_requests())
    spans = []
    for line in lines:
        request = json.loads(line)
        assert list(request) == ["resourceSpans"]
        for resource_spans in request["resourceSpans"]:
            for scope_spans in resource_spans["scopeSpans"]:
                spans += scope_spans["spans"]
    assert len(spans) == run.receiver.span_count
    sent = next(s for s in run.sent if s.sampled)
    (server,) = [s for s in spans if s["traceId"] == sent.trace_id and s["name"] == SEND_SPAN]
    assert server["parentSpanId"] == sent.span_id
    assert server["kind"] == Span.SPAN_KIND_SERVER
    assert int(server["endTimeUnixNano"]) >= int(server["startTimeUnixNano"]) > 0
    (append,) = [s for s in spans if s.get("parentSpanId") == server["spanId"]]
    assert {"key": cv.TOPIC, "value": {"stringValue": sent.topic}} in append["attributes"]
    assert {"key": cv.MESSAGE_COUNT, "value": {"intValue": "1"}} in append["attributes"]

    metric_lines = Path(run.metrics_path).read_text().splitlines()
    assert metric_lines and all("resourceMetrics" in json.loads(line) for line in metric_lines)


RECORD_APPEND_SPAN = "skiff.records.v1.RecordService/Append"


def test_record_appends_are_traced_like_sends(tmp_path: Path) -> None:
    """A record append continues a sampled caller's trace down to the store's append, and
    one without trace context records nothing at ratio 0 (not even a root append span)."""
    topic = "RecordSpans"
    create_topics(data_dir_of(tmp_path), TopicConfig(topic, 2, 2))
    record = encode_record(topic_field(topic), b"x", encode_properties({"UNIQ_KEY": "ID"}), 1)
    callers = [(secrets.token_hex(16), secrets.token_hex(8)) for _ in range(3)]
    with OtlpReceiver() as receiver:
        env = {**span_file_env(receiver.endpoint), "OTEL_METRICS_EXPORTER": "none"}
        with (
            running_broker(tmp_path, env=env) as broker,
            grpc.insecure_channel(broker.endpoint) as channel,
        ):
            stub = records_pb2_grpc.RecordServiceStub(channel)
            for trace_id, span_id in callers:
                metadata = (("traceparent", traceparent(trace_id, span_id, sampled=True)),)
                stub.Append(rpb.AppendRequest(topic=topic, records=record), metadata=metadata)
            for _ in range(3):
                stub.Append(rpb.AppendRequest(topic=topic, records=record))
    spans = receiver.spans()
    assert {s.trace_id for s in spans} == {trace_id for trace_id, _ in callers}
    for trace_id, span_id in callers:
        (server,) = [s for s in spans if s.trace_id == trace_id and s.name == RECORD_APPEND_SPAN]
        (append,) = [s for s in spans if s.trace_id == trace_id and s.name == cv.APPEND_SPAN]
        assert server.span.kind == Span.SPAN_KIND_SERVER
        assert server.parent_span_id == span_id
        assert append.parent_span_id == server.span_id
        assert append.attributes[cv.TOPIC] == topic
