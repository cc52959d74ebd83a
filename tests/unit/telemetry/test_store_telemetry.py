"""Append and flush spans and latency histograms from a real MessageStore (real files,
flush threads and fdatasync), collected with the SDK's in-memory exporter and reader."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, StatusCode, TraceFlags
from tests.support.store_settings import SMALL_STORE
from tests.support.waiting import wait_for
from tests.unit.telemetry.pipelines import Pipelines, ratio_pipelines

from skiff_broker.delivery.send_coalescing import SendCoalescer
from skiff_broker.store.config import FlushType, StoreConfig
from skiff_broker.store.message import Message
from skiff_broker.store.message_store import MessageStore
from skiff_broker.store.observer import MAX_FLUSH_CONTEXTS, FlushReport
from skiff_broker.store.results import PutStatus
from skiff_broker.telemetry import conventions as cv
from skiff_broker.telemetry.store_observer import StoreTelemetry

BROKER = "broker-t"
TOPIC = "telemetry-test"
DEADLINE_S = 30.0


def make_config(tmp_path: Path, **overrides: Any) -> StoreConfig:
    settings: dict[str, Any] = {
        "data_dir": str(tmp_path / "store"),
        **SMALL_STORE,
        **overrides,
    }
    config = StoreConfig(**settings)
    config.validate()
    return config


def message(body: bytes = b"hello", queue_id: int = 0, topic: str = TOPIC) -> Message:
    return Message(topic=topic, body=body, queue_id=queue_id)


@pytest.fixture
def open_store(tmp_path: Path, pipelines: Pipelines) -> Iterator[Callable[..., MessageStore]]:
    """``open_store(observer=None, **config)`` -> a started store reporting to ``pipelines``."""
    stores: list[MessageStore] = []

    def start(observer: StoreTelemetry | None = None, **overrides: Any) -> MessageStore:
        if observer is None:
            observer = telemetry_for(pipelines)
        store = MessageStore(make_config(tmp_path, **overrides), observer=observer)
        store.start()
        stores.append(store)
        return store

    yield start
    for store in stores:
        store.shutdown()


def telemetry_for(pipelines: Pipelines) -> StoreTelemetry:
    return StoreTelemetry(
        tracer_provider=pipelines.tracer_provider,
        histograms=pipelines.histograms,
        broker_name=BROKER,
    )


def test_one_span_per_batch_under_the_callers_span(open_store, pipelines: Pipelines) -> None:
    store = open_store(flush_type=FlushType.SYNC_FLUSH)
    tracer = pipelines.tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("rpc") as rpc:
        result = store.put_messages([message(b"x" * 100, queue_id=3) for _ in range(10)])
    assert result.status is PutStatus.PUT_OK

    (append,) = pipelines.spans(cv.APPEND_SPAN)
    assert append.parent is not None
    assert append.parent.span_id == rpc.get_span_context().span_id
    assert append.context.trace_id == rpc.get_span_context().trace_id
    assert append.kind is SpanKind.INTERNAL
    assert dict(append.attributes) == {
        cv.BROKER: BROKER,
        cv.REPLICATION_MODE: "NONE",
        cv.MESSAGING_SYSTEM: "rocketmq",
        cv.FLUSH_TYPE: "SYNC_FLUSH",
        cv.MESSAGE_COUNT: 10,
        cv.TOPIC: TOPIC,
        cv.QUEUE_ID: "3",
        cv.PUT_STATUS: "PUT_OK",
        cv.APPEND_BYTES: result.append.wrote_bytes,
    }
    assert append.status.status_code is StatusCode.UNSET
    (point,) = pipelines.points(cv.APPEND_DURATION)
    assert point.count == 1


def test_async_appenders_get_one_span_each_and_the_flush_names_them(
    open_store, pipelines: Pipelines
) -> None:
    store = open_store(flush_type=FlushType.SYNC_FLUSH)
    appenders = 50

    async def run() -> None:
        results = await asyncio.gather(
            *(store.put_messages_async([message(b"m%d" % i)]) for i in range(appenders))
        )
        assert all(r.status is PutStatus.PUT_OK for r in results)

    asyncio.run(run())
    # The flush thread reports a flush after releasing its waiters: let it finish.
    store.shutdown()

    appends = pipelines.spans(cv.APPEND_SPAN)
    assert len(appends) == appenders
    append_ids = {s.context.span_id for s in appends}
    flushes = pipelines.spans(cv.FLUSH_SPAN)
    # An appender whose record a flush already covered when it asked does not wait.
    assert 1 <= sum(f.attributes[cv.FLUSH_WAITERS] for f in flushes) <= appenders
    named: list[int] = []
    for flush in flushes:
        waiters = flush.attributes[cv.FLUSH_WAITERS]
        assert flush.attributes[cv.FLUSH_TYPE] == "SYNC_FLUSH"
        assert flush.attributes[cv.BROKER] == BROKER
        if waiters == 0:
            continue
        # Parent: the first waiter's append span; links: the others (all traced here).
        assert flush.parent is not None and flush.parent.span_id in append_ids
        assert len(flush.links) == min(waiters, MAX_FLUSH_CONTEXTS) - 1
        assert {link.context.span_id for link in flush.links} <= append_ids
        named += [flush.parent.span_id, *(link.context.span_id for link in flush.links)]
    # Each appender waits for one flush at most.
    assert len(named) == len(set(named))
    # One flush histogram sample per flush.
    (flush_point,) = pipelines.points(cv.FLUSH_DURATION)
    assert flush_point.count == len(flushes)


def named_by_flushes(pipelines: Pipelines) -> list[int]:
    """The span ids of the appends the flushes served: each flush's parent, then links."""
    flushes = pipelines.spans(cv.FLUSH_SPAN)
    named = [f.parent.span_id for f in flushes if f.parent is not None]
    return named + [link.context.span_id for f in flushes for link in f.links]


def test_coalesced_sends_each_get_their_own_append_span_and_latency_sample(
    open_store, pipelines: Pipelines
) -> None:
    store = open_store(flush_type=FlushType.SYNC_FLUSH)
    tracer = pipelines.tracer_provider.get_tracer("test")
    coalescer = SendCoalescer(store)
    calls = {"a": 2, "b": 1, "c": 3}
    rpc_spans: dict[str, int] = {}

    async def send(name: str, queue_id: int) -> None:
        with tracer.start_as_current_span(f"rpc {name}") as rpc:
            rpc_spans[name] = rpc.get_span_context().span_id
            batch = [message(b"%s%d" % (name.encode(), i), queue_id) for i in range(calls[name])]
            result, _ = await coalescer.put(TOPIC, batch)
            assert result.ok

    async def run() -> None:
        # One loop turn: the first call appends alone, the other two share an append.
        await asyncio.gather(send("a", 0), send("b", 1), send("c", 2))

    asyncio.run(run())
    store.shutdown()

    appends = pipelines.spans(cv.APPEND_SPAN)
    by_parent = {s.parent.span_id: s for s in appends if s.parent is not None}
    assert len(appends) == len(by_parent) == 3
    for queue_id, (name, count) in enumerate(calls.items()):
        append = by_parent[rpc_spans[name]]
        assert append.attributes[cv.MESSAGE_COUNT] == count
        assert append.attributes[cv.QUEUE_ID] == str(queue_id)
        assert append.attributes[cv.PUT_STATUS] == "PUT_OK"
        bodies = sum(len(b"%s%d" % (name.encode(), i)) for i in range(count))
        assert bodies < append.attributes[cv.APPEND_BYTES] < bodies + count * 200
    (point,) = pipelines.points(cv.APPEND_DURATION)
    assert point.count == len(calls)
    # The flush names each caller it served, shared append or not.
    named = named_by_flushes(pipelines)
    assert len(named) == len(set(named))
    assert set(named) <= {s.context.span_id for s in appends}


# Six calls: four untraced ones share the append with the traced one; three calls: one.
@pytest.mark.parametrize("calls", [6, 3])
def test_coalesced_untraced_sends_each_count_in_the_latency_histogram_without_spans(
    open_store, pipelines: Pipelines, calls: int
) -> None:
    store = open_store(flush_type=FlushType.SYNC_FLUSH)
    tracer = pipelines.tracer_provider.get_tracer("test")
    coalescer = SendCoalescer(store)
    traced_rpc: list[int] = []

    async def send(index: int, traced: bool) -> None:
        if traced:
            with tracer.start_as_current_span("rpc traced") as rpc:
                traced_rpc.append(rpc.get_span_context().span_id)
                assert (await coalescer.put(TOPIC, [message(b"t%d" % index)]))[0].ok
            return
        # An untraced request under the broker's default ratio: an unsampled parent.
        unsampled = NonRecordingSpan(SpanContext(0xABC + index, 0xDEF + index, is_remote=False))
        with trace.use_span(unsampled):
            assert (await coalescer.put(TOPIC, [message(b"u%d" % index)]))[0].ok

    async def run() -> None:
        # One loop turn: the first call appends alone, the others share an append.
        await asyncio.gather(*(send(i, traced=i == calls - 1) for i in range(calls)))

    asyncio.run(run())
    store.shutdown()

    # Only the traced call has an append span, under its own request's span.
    (append,) = pipelines.spans(cv.APPEND_SPAN)
    assert append.parent is not None and [append.parent.span_id] == traced_rpc
    assert append.attributes[cv.MESSAGE_COUNT] == 1
    # Every call waited for an append and a flush: one latency sample each.
    (point,) = pipelines.points(cv.APPEND_DURATION)
    assert point.count == calls
    assert sum(point.bucket_counts) == calls
    # The flush that served the traced call names it; the untraced ones are nobody's.
    assert named_by_flushes(pipelines) == [append.context.span_id]


def test_a_refused_shared_append_is_an_error_span_and_sample_for_each_caller(
    open_store, pipelines: Pipelines
) -> None:
    store = open_store(flush_type=FlushType.SYNC_FLUSH)
    tracer = pipelines.tracer_provider.get_tracer("test")
    coalescer = SendCoalescer(store)
    topic = "no/slashes"
    # Call "b" spans two queues: its span names no queue.
    calls = {"a": [0], "b": [1, 2], "c": [3], "u": [0]}
    rpc_spans: dict[str, int] = {}

    async def send(name: str) -> None:
        batch = [message(b"%s%d" % (name.encode(), q), q, topic) for q in calls[name]]
        if name == "u":
            unsampled = NonRecordingSpan(SpanContext(0xABC, 0xDEF, is_remote=False))
            with trace.use_span(unsampled):
                result, _ = await coalescer.put(topic, batch)
        else:
            with tracer.start_as_current_span(f"rpc {name}") as rpc:
                rpc_spans[name] = rpc.get_span_context().span_id
                result, _ = await coalescer.put(topic, batch)
        assert result.status is PutStatus.MESSAGE_ILLEGAL

    async def run() -> None:
        # One loop turn: "a" appends alone, "b", "c" and the untraced "u" share an append.
        await asyncio.gather(*(send(name) for name in calls))

    asyncio.run(run())
    appends = pipelines.spans(cv.APPEND_SPAN)
    by_parent = {s.parent.span_id: s for s in appends if s.parent is not None}
    assert len(appends) == len(by_parent) == 3
    for name, queues in calls.items():
        if name == "u":
            continue
        append = by_parent[rpc_spans[name]]
        assert append.status.status_code is StatusCode.ERROR
        assert "must not contain '/'" in append.status.description
        assert append.attributes[cv.PUT_STATUS] == "MESSAGE_ILLEGAL"
        assert append.attributes[cv.APPEND_BYTES] == 0
        assert append.attributes[cv.MESSAGE_COUNT] == len(queues)
        assert append.attributes[cv.TOPIC] == topic
        if len(queues) == 1:
            assert append.attributes[cv.QUEUE_ID] == str(queues[0])
        else:
            assert cv.QUEUE_ID not in append.attributes
    # One sample per call, each with the refusal's status.
    (point,) = pipelines.points(cv.APPEND_DURATION)
    assert point.attributes[cv.PUT_STATUS] == "MESSAGE_ILLEGAL"
    assert point.attributes[cv.TOPIC] == topic
    assert point.count == len(calls)
    assert pipelines.spans(cv.FLUSH_SPAN) == []


class GatedTelemetry(StoreTelemetry):
    """Holds the flush thread in its first report, so appenders pile up behind it."""

    def __init__(self, pipelines: Pipelines) -> None:
        super().__init__(
            tracer_provider=pipelines.tracer_provider,
            histograms=pipelines.histograms,
            broker_name=BROKER,
        )
        self.holding = threading.Event()
        self.release = threading.Event()

    def flush_finished(self, report: FlushReport) -> None:
        super().flush_finished(report)
        if not self.holding.is_set():
            self.holding.set()
            self.release.wait(DEADLINE_S)


@pytest.mark.parametrize("waiting", [5, MAX_FLUSH_CONTEXTS + 8])
def test_one_group_commit_flush_serves_every_waiter(
    open_store, pipelines: Pipelines, waiting: int
) -> None:
    gated = GatedTelemetry(pipelines)
    store = open_store(observer=gated, flush_type=FlushType.SYNC_FLUSH)
    # The first put's flush holds the flush thread in its report...
    assert store.put_messages([message(b"first")]).ok
    assert gated.holding.wait(DEADLINE_S)

    async def run() -> None:
        tasks = [
            # Queue ids tell the waiters' order apart in their spans.
            asyncio.create_task(store.put_messages_async([message(queue_id=i + 1)]))
            for i in range(waiting)
        ]
        # ...so that every task appends and asks for a flush before any flush runs.
        await asyncio.sleep(0)
        gated.release.set()
        results = await asyncio.gather(*tasks)
        assert all(r.ok for r in results)

    asyncio.run(run())
    # The flush thread reports a flush after releasing its waiters: let it finish.
    store.shutdown()

    by_start = sorted(
        pipelines.spans(cv.APPEND_SPAN), key=lambda s: int(s.attributes[cv.QUEUE_ID])
    )[1:]
    assert [s.attributes[cv.QUEUE_ID] for s in by_start] == [str(i + 1) for i in range(waiting)]
    flushes = pipelines.spans(cv.FLUSH_SPAN)
    (group,) = [f for f in flushes if f.attributes[cv.FLUSH_WAITERS] == waiting]
    assert group.parent is not None
    assert group.parent.span_id == by_start[0].context.span_id
    assert group.context.trace_id == by_start[0].context.trace_id
    linked = [link.context.span_id for link in group.links]
    assert len(linked) == min(waiting, MAX_FLUSH_CONTEXTS) - 1
    assert linked == [s.context.span_id for s in by_start[1 : len(linked) + 1]]
    # Every waiter's record is in the flushed bytes.
    assert group.attributes[cv.FLUSH_BYTES] >= sum(s.attributes[cv.APPEND_BYTES] for s in by_start)
    assert group.attributes[cv.FLUSH_PAGES] >= 1
    assert group.end_time > group.start_time


def test_no_span_under_an_unsampled_parent_but_a_histogram_sample(
    open_store, pipelines: Pipelines
) -> None:
    store = open_store(flush_type=FlushType.SYNC_FLUSH)
    unsampled = SpanContext(
        trace_id=0x1234, span_id=0x5678, is_remote=True, trace_flags=TraceFlags(0)
    )
    with trace.use_span(NonRecordingSpan(unsampled)):
        for _ in range(3):
            assert store.put_messages([message()]).ok
    assert pipelines.spans(cv.APPEND_SPAN) == []
    (point,) = pipelines.points(cv.APPEND_DURATION)
    assert point.count == 3


def test_no_span_in_the_servers_unsampled_context_but_a_histogram_sample(open_store) -> None:
    pipelines, roots = ratio_pipelines(0.5)
    observer = StoreTelemetry(
        tracer_provider=pipelines.tracer_provider,
        histograms=pipelines.histograms,
        broker_name=BROKER,
        roots=roots,
    )
    store = open_store(observer=observer, flush_type=FlushType.SYNC_FLUSH)
    token = otel_context.attach(roots.unsampled)
    try:
        # Nothing to hand a shared append: the caller's share is not traced either.
        assert observer.caller_token() is None
        for _ in range(3):
            assert store.put_messages([message()]).ok
    finally:
        otel_context.detach(token)
        pipelines.tracer_provider.shutdown()
    assert pipelines.spans(cv.APPEND_SPAN) == []
    (point,) = pipelines.points(cv.APPEND_DURATION)
    assert point.count == 3
    assert point.attributes[cv.PUT_STATUS] == "PUT_OK"


def test_histograms_are_in_seconds_with_explicit_buckets(open_store, pipelines: Pipelines) -> None:
    store = open_store(flush_type=FlushType.SYNC_FLUSH)
    puts = 20
    started = time.perf_counter()
    for _ in range(puts):
        assert store.put_messages([message()]).ok
    elapsed = time.perf_counter() - started
    # The flush thread reports a flush after releasing its waiters: let it finish.
    store.shutdown()
    elapsed_with_shutdown = time.perf_counter() - started

    append_metric = pipelines.metric(cv.APPEND_DURATION)
    assert append_metric is not None and append_metric.unit == "s"
    (point,) = append_metric.data.data_points
    assert tuple(point.explicit_bounds) == cv.LATENCY_BUCKETS_S
    assert len(point.bucket_counts) == len(cv.LATENCY_BUCKETS_S) + 1
    assert point.count == sum(point.bucket_counts) == puts
    # Sequential puts: their durations add up to less than the wall time around them,
    # which they would not if they were recorded in milliseconds.
    assert 0 < point.sum <= elapsed
    assert dict(point.attributes) == {
        cv.TOPIC: TOPIC,
        cv.FLUSH_TYPE: "SYNC_FLUSH",
        cv.PUT_STATUS: "PUT_OK",
    }

    flush_metric = pipelines.metric(cv.FLUSH_DURATION)
    assert flush_metric is not None and flush_metric.unit == "s"
    (flush_point,) = flush_metric.data.data_points
    assert tuple(flush_point.explicit_bounds) == cv.LATENCY_BUCKETS_S
    # Every put waited for a flush of its own: nothing else was appending.
    assert flush_point.count == puts
    assert 0 < flush_point.sum <= elapsed_with_shutdown
    assert flush_point.attributes[cv.FLUSH_TYPE] == "SYNC_FLUSH"


def test_async_flush_spans_are_roots_without_waiters(open_store, pipelines: Pipelines) -> None:
    store = open_store(
        flush_type=FlushType.ASYNC_FLUSH,
        flush_interval_commit_log=0.01,
        flush_commit_log_least_pages=0,
    )
    result = store.put_messages([message(b"y" * 5000)])
    assert result.ok
    (append,) = pipelines.spans(cv.APPEND_SPAN)
    assert append.attributes[cv.FLUSH_TYPE] == "ASYNC_FLUSH"
    flush = wait_for(lambda: pipelines.spans(cv.FLUSH_SPAN), "an ASYNC_FLUSH flush span")[0]
    assert flush.parent is None
    assert flush.links == ()
    assert flush.attributes[cv.FLUSH_TYPE] == "ASYNC_FLUSH"
    assert flush.attributes[cv.FLUSH_WAITERS] == 0
    assert flush.attributes[cv.FLUSH_BYTES] >= result.append.wrote_bytes
    assert flush.attributes[cv.FLUSH_PAGES] >= 2  # 5000 bytes span two 4 KiB pages at least


@pytest.mark.parametrize("ratio", [0.0, 1.0])
def test_flushes_nobody_traced_waited_for_are_sampled_at_the_brokers_ratio(
    open_store, ratio: float
) -> None:
    pipelines, roots = ratio_pipelines(ratio)
    observer = StoreTelemetry(
        tracer_provider=pipelines.tracer_provider,
        histograms=pipelines.histograms,
        broker_name=BROKER,
        roots=roots,
    )
    store = open_store(
        observer=observer,
        flush_type=FlushType.ASYNC_FLUSH,
        flush_interval_commit_log=0.01,
        flush_commit_log_least_pages=0,
    )
    try:
        for _ in range(3):
            assert store.put_messages([message(b"z" * 5000)]).ok
            wait_for(lambda: pipelines.points(cv.FLUSH_DURATION), "a flush")
        store.shutdown()  # its last flush, if any, is in the spans below
        flushes = pipelines.points(cv.FLUSH_DURATION)[0].count
        spans = pipelines.spans(cv.FLUSH_SPAN)
    finally:
        pipelines.tracer_provider.shutdown()
    if ratio == 0.0:
        assert spans == []
    else:
        assert len(spans) == flushes
        assert all(span.parent is None for span in spans)


def test_a_refused_batch_is_an_error_span(open_store, pipelines: Pipelines) -> None:
    store = open_store(flush_type=FlushType.SYNC_FLUSH)
    result = store.put_messages([message(topic="no/slashes")])
    assert result.status is PutStatus.MESSAGE_ILLEGAL
    (append,) = pipelines.spans(cv.APPEND_SPAN)
    assert append.status.status_code is StatusCode.ERROR
    assert "must not contain '/'" in append.status.description
    assert append.attributes[cv.PUT_STATUS] == "MESSAGE_ILLEGAL"
    assert append.attributes[cv.APPEND_BYTES] == 0
    (point,) = pipelines.points(cv.APPEND_DURATION)
    assert point.attributes[cv.PUT_STATUS] == "MESSAGE_ILLEGAL"
    # Nothing was appended, so nothing waited for a flush.
    assert pipelines.spans(cv.FLUSH_SPAN) == []


class BrokenTelemetry(StoreTelemetry):
    def flush_finished(self, report: FlushReport) -> None:
        raise RuntimeError("exporter trouble")


def test_a_failing_flush_observer_does_not_stop_sync_flush(
    open_store, pipelines: Pipelines, caplog: pytest.LogCaptureFixture
) -> None:
    broken = BrokenTelemetry(
        tracer_provider=pipelines.tracer_provider,
        histograms=pipelines.histograms,
        broker_name=BROKER,
    )
    store = open_store(observer=broken, flush_type=FlushType.SYNC_FLUSH, sync_flush_timeout=30.0)
    for _ in range(3):
        assert store.put_messages([message()]).status is PutStatus.PUT_OK
    assert "flush observer failed" in caplog.text


def test_telemetry_without_a_tracer_records_only_histograms(
    open_store, pipelines: Pipelines
) -> None:
    metrics_only = StoreTelemetry(
        tracer_provider=None, histograms=pipelines.histograms, broker_name=BROKER
    )
    store = open_store(observer=metrics_only, flush_type=FlushType.SYNC_FLUSH)
    assert store.put_messages([message()]).ok
    store.shutdown()
    assert pipelines.spans() == []
    assert pipelines.points(cv.APPEND_DURATION)[0].count == 1
    assert pipelines.points(cv.FLUSH_DURATION)[0].count == 1


def test_a_put_cancelled_while_it_waits_for_the_disk_is_an_error_span(
    open_store, pipelines: Pipelines
) -> None:
    store = open_store(flush_type=FlushType.SYNC_FLUSH, sync_flush_timeout=30.0)

    async def cancel_while_waiting() -> None:
        put = asyncio.create_task(store.put_messages_async([message()]))
        await asyncio.sleep(0)  # appended; now waiting for the flush
        put.cancel()
        with pytest.raises(asyncio.CancelledError):
            await put

    asyncio.run(cancel_while_waiting())
    (append,) = pipelines.spans(cv.APPEND_SPAN)
    assert append.status.status_code is StatusCode.ERROR
    assert append.status.description.startswith("CancelledError")
    assert append.attributes[cv.PUT_STATUS] == "ERROR"
    assert [event.name for event in append.events] == ["exception"]
    (point,) = pipelines.points(cv.APPEND_DURATION)
    assert point.attributes[cv.PUT_STATUS] == "ERROR"
    assert point.count == 1
