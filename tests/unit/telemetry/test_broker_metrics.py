"""RocketMQ's metrics as the Prometheus endpoint shows them, read through the same
reader the broker serves /metrics from (no HTTP: the registry is read directly)."""

from __future__ import annotations

import threading
import time

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from skiff_broker.delivery.backlog import GroupBacklog
from skiff_broker.telemetry import conventions as cv
from skiff_broker.telemetry.broker_metrics import BrokerMetrics
from skiff_broker.telemetry.latency_histograms import HistogramSet
from skiff_broker.telemetry.metrics_endpoint import PrometheusReader, parse_listen

COMMON = {"cluster": "c1", "node_type": "broker", "node_id": "b-0"}


def metered(backlog: list[GroupBacklog]) -> tuple[BrokerMetrics, PrometheusReader, HistogramSet]:
    histograms = HistogramSet(cv.STORE_SCOPE)
    reader = PrometheusReader(histograms, Resource.create({}))
    provider = MeterProvider(metric_readers=[reader])
    metrics = BrokerMetrics(
        provider.get_meter("test"), histograms, cluster="c1", node_id="b-0", backlog=lambda: backlog
    )
    return metrics, reader, histograms


def samples(reader: PrometheusReader) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    text = generate_latest(reader.registry).decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def test_batches_add_up_per_topic_and_type() -> None:
    metrics, reader, _ = metered([])
    metrics.received("orders", "normal", [10, 20])
    metrics.received("orders", "normal", [5000])
    metrics.received("orders", "fifo", [1])
    found = samples(reader)
    normal = {**COMMON, "topic": "orders", "message_type": "normal"}
    assert (normal, 3.0) in found["rocketmq_messages_in_total"]
    assert (normal, 5030.0) in found["rocketmq_throughput_in_total"]
    assert ({**COMMON, "topic": "orders", "message_type": "fifo"}, 1.0) in found[
        "rocketmq_messages_in_total"
    ]
    assert ({**normal, "le": "1024"}, 2.0) in found["rocketmq_message_size_bucket"]
    assert ({**normal, "le": "+Inf"}, 3.0) in found["rocketmq_message_size_bucket"]


def test_deliveries_and_backlog_carry_the_consumer_group() -> None:
    metrics, reader, _ = metered([GroupBacklog("orders", "billing", lag=7, inflight=2)])
    metrics.delivered("orders", "billing", 4, 400)
    found = samples(reader)
    group = {**COMMON, "topic": "orders", "consumer_group": "billing"}
    assert found["rocketmq_messages_out_total"] == [(group, 4.0)]
    assert found["rocketmq_throughput_out_total"] == [(group, 400.0)]
    assert found["rocketmq_consumer_lag_messages"] == [(group, 7.0)]
    assert found["rocketmq_consumer_inflight_messages"] == [(group, 2.0)]
    assert found["rocketmq_consumer_ready_messages"] == [(group, 5.0)]


def test_the_brokers_own_histograms_appear_with_their_unit() -> None:
    _, reader, histograms = metered([])
    append = histograms.histogram(
        cv.APPEND_DURATION,
        unit="s",
        description="append",
        bounds=cv.LATENCY_BUCKETS_S,
        labels=(cv.TOPIC,),
    )
    append.record(0.002, ("orders",))
    found = samples(reader)
    assert found["skiff_store_append_duration_seconds_count"] == [
        ({"messaging_destination_name": "orders"}, 1.0)
    ]


def test_listen_addresses() -> None:
    assert parse_listen("0.0.0.0:5557") == ("0.0.0.0", 5557)
    assert parse_listen("[::1]:0") == ("::1", 0)
    for bad in ("5557", "host:", "host:port"):
        try:
            parse_listen(bad)
        except ValueError as exc:
            assert "--metrics-listen" in str(exc)
        else:
            raise AssertionError(f"{bad!r} was accepted")


def _burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_each_threads_cpu_is_counted_under_its_role_and_the_roles_add_up() -> None:
    _, reader, _ = metered([])
    dispatcher = threading.Thread(target=_burn, args=(0.3,), name="dispatcher")
    dispatcher.start()
    _burn(0.2)  # this test's thread is the process's main thread: the event loop's role
    before = time.process_time()
    found = {labels["thread"]: value for labels, value in samples(reader)[cv.THREAD_CPU]}
    after = time.process_time()
    dispatcher.join()
    assert found["event-loop"] >= 0.2
    assert 0.0 < found["dispatcher"] <= 0.31
    # The roles add up to the process's CPU when read (other: executors, libraries, ended
    # threads), within the kernel's 10 ms ticks.
    assert before - 0.03 <= sum(found.values()) <= after + 0.03
    assert all(labels.items() >= COMMON.items() for labels, _ in samples(reader)[cv.THREAD_CPU])


def test_a_role_keeps_what_its_ended_threads_used() -> None:
    _, reader, _ = metered([])
    seen = []
    for _ in range(2):  # a service stopped and started again: a new thread, the same name
        worker = threading.Thread(target=_burn, args=(0.15,), name="async-flush")
        worker.start()
        time.sleep(0.05)
        while worker.is_alive():
            seen.append({labels["thread"]: v for labels, v in samples(reader)[cv.THREAD_CPU]})
            time.sleep(0.02)
        seen.append({labels["thread"]: v for labels, v in samples(reader)[cv.THREAD_CPU]})
    for role in ("event-loop", "async-flush", "other"):
        values = [points.get(role, 0.0) for points in seen]
        assert values == sorted(values), f"{role} went down: {values}"
    # Both threads' time is in the role (less what each used after its last collection).
    assert seen[-1]["async-flush"] >= 0.2
