"""The Prometheus endpoint of a real broker process: clients send and consume (over
apache.rocketmq.v2, and with Skiff's batching producer and pull consumer over
skiff.records.v1), the test scrapes /metrics over HTTP and reads RocketMQ's metrics,
with RocketMQ's labels, the store's latency histograms and the CPU of the broker's
threads."""

from __future__ import annotations

import asyncio
import subprocess
import urllib.request

import grpc
from prometheus_client.parser import text_string_to_metric_families
from tests.support.broker_fixture import module_broker
from tests.support.broker_process import (
    SKIFF,
    BrokerProcess,
    broker_env,
    running_broker,
)
from tests.support.process_stats import cpu_seconds
from tests.support.queue_ends import wait_for_messages

from skiff_broker.client.messaging import MessagingClient, OutgoingMessage
from skiff_broker.client.producer import BatchingProducer
from skiff_broker.client.pull_consumer import PullConsumer
from skiff_broker.metadata.topic_table import TopicConfig
from skiff_broker.records.v1 import records_pb2 as rpb
from skiff_broker.records.v1 import records_pb2_grpc

TOPIC = "metered"
RECORD_TOPIC = "metered-records"
GROUP = "billing"
SIZES = (100, 2000, 5000)
BROKER = {"cluster": "DefaultCluster", "node_type": "broker", "node_id": "broker-m"}


# One queue: every message of the test is in the queue the group reads.
broker = module_broker(
    "metrics",
    "--broker-name",
    "broker-m",
    topics=[TopicConfig(TOPIC, 1, 1), TopicConfig(RECORD_TOPIC, 1, 1)],
)


def scrape(broker: BrokerProcess) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> [(labels, value)] of one scrape."""
    with urllib.request.urlopen(broker.metrics_url, timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def value(samples: dict, name: str, **labels: str) -> float:
    """The value of the one sample of ``name`` whose labels include ``labels``."""
    (found,) = [
        v for sample_labels, v in samples.get(name, []) if labels.items() <= sample_labels.items()
    ]
    return found


def test_counters_sizes_and_backlog_follow_what_clients_do(broker: BrokerProcess) -> None:
    with MessagingClient(broker.endpoint) as client:
        client.send([OutgoingMessage(TOPIC, b"x" * size) for size in SIZES])
        wait_for_messages(broker.endpoint, TOPIC, len(SIZES))
        received = client.receive(GROUP, TOPIC, max_messages=32, wait_s=5)
        assert len(received) == len(SIZES)
        client.ack(GROUP, TOPIC, received[:1])
        # Stored after the group's last receive: ready, not in flight.
        client.send([OutgoingMessage(TOPIC, b"y" * 10)])
        wait_for_messages(broker.endpoint, TOPIC, len(SIZES) + 1)

    samples = scrape(broker)
    stored = {**BROKER, "topic": TOPIC, "message_type": "normal"}
    assert value(samples, "rocketmq_messages_in_total", **stored) == len(SIZES) + 1
    assert value(samples, "rocketmq_throughput_in_total", **stored) == sum(SIZES) + 10
    assert value(samples, "rocketmq_message_size_bucket", le="1024", **stored) == 2
    assert value(samples, "rocketmq_message_size_bucket", le="4096", **stored) == 3
    assert value(samples, "rocketmq_message_size_count", **stored) == 4

    consumed = {**BROKER, "topic": TOPIC, "consumer_group": GROUP}
    assert value(samples, "rocketmq_messages_out_total", **consumed) == len(SIZES)
    assert value(samples, "rocketmq_throughput_out_total", **consumed) == sum(SIZES)
    # Offsets 0..3 stored; 0 acknowledged, 1 and 2 handed out, 3 not yet.
    assert value(samples, "rocketmq_consumer_lag_messages", **consumed) == 3
    assert value(samples, "rocketmq_consumer_inflight_messages", **consumed) == 2
    assert value(samples, "rocketmq_consumer_ready_messages", **consumed) == 1

    # The store's latency histograms are on the same endpoint.
    appends = [v for labels, v in samples["skiff_store_append_duration_seconds_count"]]
    assert sum(appends) >= 2


def test_skiff_producer_and_pull_consumer_traffic_is_counted(broker: BrokerProcess) -> None:
    async def produce() -> None:
        # One batch: Skiff's producer sends it as one records Append.
        async with BatchingProducer(broker.endpoint, linger_ms=50) as producer:
            await producer.send_batch(RECORD_TOPIC, [b"r" * size for size in SIZES])

    asyncio.run(produce())
    # A pull answers with what is dispatched so far: wait for the whole batch.
    wait_for_messages(broker.endpoint, RECORD_TOPIC, len(SIZES))
    with PullConsumer(broker.endpoint) as consumer:
        pulled = consumer.pull(RECORD_TOPIC, 0, 0, wait_s=5)
    assert [len(m.body) for m in pulled.messages] == list(SIZES)

    samples = scrape(broker)
    stored = {**BROKER, "topic": RECORD_TOPIC, "message_type": "normal"}
    assert value(samples, "rocketmq_messages_in_total", **stored) == len(SIZES)
    # Body bytes, as for SendMessage.
    assert value(samples, "rocketmq_throughput_in_total", **stored) == sum(SIZES)
    assert value(samples, "rocketmq_message_size_bucket", le="1024", **stored) == 1
    assert value(samples, "rocketmq_message_size_bucket", le="4096", **stored) == 2
    assert value(samples, "rocketmq_message_size_count", **stored) == len(SIZES)

    # A fetch names no group; it counts the whole records it returned.
    fetched = {**BROKER, "topic": RECORD_TOPIC, "consumer_group": ""}
    assert value(samples, "rocketmq_messages_out_total", **fetched) == len(SIZES)
    with grpc.insecure_channel(broker.endpoint) as channel:
        again = records_pb2_grpc.RecordServiceStub(channel).Fetch(
            rpb.FetchRequest(topic=RECORD_TOPIC, queue_id=0, offset=0, max_records=32),
            timeout=10,
        )
    assert again.record_count == len(SIZES)
    assert value(samples, "rocketmq_throughput_out_total", **fetched) == len(again.records)
    assert len(again.records) > sum(SIZES)


def test_an_empty_metrics_listen_serves_no_endpoint(tmp_path) -> None:
    with running_broker(tmp_path, "--metrics-listen", "") as process:
        assert process.metrics_url == ""
        assert not any("metrics on" in r.get("msg", "") for r in process.log_lines())


def test_a_busy_metrics_port_fails_the_start_and_names_the_option(
    broker: BrokerProcess, tmp_path
) -> None:
    taken = broker.metrics_url.removeprefix("http://").removesuffix("/metrics")
    done = subprocess.run(
        [
            *SKIFF,
            "broker",
            "--data-dir",
            str(tmp_path / "d"),
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            taken,
        ],
        env=broker_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2  # bad settings, like any busy port
    assert "is in use by another process; pick another with --metrics-listen" in done.stderr
    # Checked before the data directory is touched.
    assert not (tmp_path / "d" / "commitlog").exists()


def test_the_threads_cpu_shows_the_event_loop_and_the_store_threads(broker: BrokerProcess) -> None:
    def threads() -> dict[str, float]:
        return {
            labels["thread"]: v
            for labels, v in scrape(broker).get("skiff_thread_cpu_seconds_total", [])
            if labels.items() >= BROKER.items()
        }

    before = threads()
    with MessagingClient(broker.endpoint) as client:
        for _ in range(200):
            client.send([OutgoingMessage(TOPIC, b"z" * 1000)])
    wait_for_messages(broker.endpoint, TOPIC, 200)
    cpu_before = cpu_seconds(broker.proc.pid)
    after = threads()
    cpu_after = cpu_seconds(broker.proc.pid)
    # The sends ran on the event loop (tens of ms: several of the kernel's 10 ms ticks);
    # the store's threads are there by name (their few ms may not have met a tick).
    assert after["event-loop"] > before["event-loop"]
    assert {"dispatcher", "async-flush", "other"} <= after.keys()
    # Every role only grows, and together they are the process's CPU.
    assert all(after[role] >= seconds for role, seconds in before.items())
    assert cpu_before - 0.05 <= sum(after.values()) <= cpu_after + 0.05
