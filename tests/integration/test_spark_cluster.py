"""Spark reads and writes every group of a cluster through one endpoint (real brokers).

Groups are brokers started with ``--cluster-peers``, as outside Kubernetes.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

from tests.k8s.cluster_members import CLUSTER_DEADLINE_S, route
from tests.support.broker_process import BrokerProcess, running_broker, start_broker
from tests.support.queue_ends import wait_for_messages
from tests.support.waiting import wait_for

from skiff_broker.client.admin import AdminClient
from skiff_broker.client.messaging import MessagingClient, OutgoingMessage
from skiff_broker.client.pull_consumer import PullConsumer


def everything_in(endpoint: str, topic: str) -> list[bytes]:
    with PullConsumer(endpoint) as consumer:
        return [
            message.body
            for queue in consumer.queue_ranges(topic)
            for message in consumer.read_range(topic, queue.queue_id, 0, queue.max_offset)
        ]


def test_a_batch_write_through_one_broker_fills_both_groups(spark, tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "a").mkdir()
    with (
        running_broker(tmp_path / "b", "--broker-name", "orders-b") as b,
        running_broker(
            tmp_path / "a", "--broker-name", "orders-a", "--cluster-peers", b.endpoint
        ) as a,
    ):
        for broker in (a, b):
            with AdminClient(broker.endpoint) as admin:
                admin.create_topic("sc-orders", read_queues=2)
        rows = [(b"row-%d" % i,) for i in range(2000)]
        (
            spark.createDataFrame(rows, "body binary")
            .repartition(4)
            .write.format("skiff")
            .option("endpoints", a.endpoint)
            .option("topic", "sc-orders")
            .mode("append")
            .save()
        )
        deadline = time.monotonic() + 60
        while True:
            on_a = everything_in(a.endpoint, "sc-orders")
            on_b = everything_in(b.endpoint, "sc-orders")
            if len(on_a) + len(on_b) >= len(rows) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert on_a and on_b, "the write used one group only"
        # Every row once, across the two groups.
        assert Counter(on_a + on_b) == Counter(body for (body,) in rows)


READ_TOPIC = "sc-read"


def group(home: Path, name: str, queues: int, *peers: BrokerProcess) -> BrokerProcess:
    """A broker of group ``name`` holding READ_TOPIC; it names ``peers``' groups in routes."""
    home.mkdir(exist_ok=True)
    args = ["--cluster-peers", ",".join(p.endpoint for p in peers)] if peers else []
    broker = start_broker(home, "--broker-name", name, *args)
    with AdminClient(broker.endpoint) as admin:
        if READ_TOPIC not in {t.name for t in admin.list_topics()}:
            admin.create_topic(READ_TOPIC, read_queues=queues)
    return broker


def send_to_group(broker: BrokerProcess, prefix: str, count: int) -> list[bytes]:
    """``count`` messages stored on ``broker``'s own group (a send stays where it is sent)."""
    with PullConsumer(broker.endpoint) as consumer:
        already = sum(q.max_offset for q in consumer.queue_ranges(READ_TOPIC))
    bodies = [f"{prefix}-{i}".encode() for i in range(count)]
    with MessagingClient(broker.endpoint) as client:
        list(client.send_each(OutgoingMessage(READ_TOPIC, body) for body in bodies))
    wait_for_messages(broker.endpoint, READ_TOPIC, already + count)
    return bodies


def ends_of(broker: BrokerProcess, name: str) -> dict[str, int]:
    with PullConsumer(broker.endpoint) as consumer:
        return {f"{name}/{q.queue_id}": q.max_offset for q in consumer.queue_ranges(READ_TOPIC)}


def groups_in_route(endpoint: str) -> set[str]:
    return {q.broker.name for q in route(endpoint, READ_TOPIC)}


def test_one_endpoint_reads_every_group_batch_and_streaming(spark, tmp_path: Path) -> None:
    started: list[BrokerProcess] = []
    try:
        b = group(tmp_path / "b", "orders-b", 3)
        started.append(b)
        a = group(tmp_path / "a", "orders-a", 2, b)
        started.append(a)
        wait_for(
            lambda: groups_in_route(a.endpoint) == {"orders-a", "orders-b"},
            "a's route to name both groups",
            deadline_s=CLUSTER_DEADLINE_S,
        )
        sent = send_to_group(a, "a", 150) + send_to_group(b, "b", 250)

        # Batch: one partition per queue of every group, every message once.
        df = (
            spark.read.format("skiff")
            .option("endpoints", a.endpoint)
            .option("topic", READ_TOPIC)
            .load()
        )
        assert df.rdd.getNumPartitions() == 5
        rows = df.collect()
        assert Counter(bytes(row.body) for row in rows) == Counter(sent)
        # Each row names the group it was read from: queue and offset repeat across groups.
        assert {(row.broker, bytes(row.body)[:2]) for row in rows} == {
            ("orders-a", b"a-"),
            ("orders-b", b"b-"),
        }
        assert len({(row.broker, row.queue, row.offset) for row in rows}) == len(sent)

        # Per-queue offsets name the group: only b's queue 1, from offset 2 on.
        on_b1 = ends_of(b, "orders-b")["orders-b/1"]
        nothing_else = {key: 0 for key in ends_of(a, "orders-a") | ends_of(b, "orders-b")}
        del nothing_else["orders-b/1"]
        ranged = (
            spark.read.format("skiff")
            .option("endpoints", a.endpoint)
            .option("topic", READ_TOPIC)
            .option("startingOffsets", json.dumps({READ_TOPIC: {"orders-b/1": 2}}))
            .option("endingOffsets", json.dumps({READ_TOPIC: nothing_else}))
            .load()
            .collect()
        )
        assert {(row.broker, row.queue, row.offset) for row in ranged} == {
            ("orders-b", 1, o) for o in range(2, on_b1)
        }

        # Streaming, Trigger.AvailableNow, through the same single endpoint.
        checkpoint, output = tmp_path / "checkpoint", tmp_path / "out"

        def run_stream(endpoint: str) -> None:
            query = (
                spark.readStream.format("skiff")
                .option("endpoints", endpoint)
                .option("topic", READ_TOPIC)
                .option("maxOffsetsPerTrigger", "120")
                .load()
                .writeStream.format("parquet")
                .option("path", str(output))
                .option("checkpointLocation", str(checkpoint))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination(300)
            assert query.exception() is None

        def streamed() -> Counter:
            return Counter(bytes(row.body) for row in spark.read.parquet(str(output)).collect())

        run_stream(a.endpoint)
        assert streamed() == Counter(sent)
        assert last_checkpointed_offsets(checkpoint) == {
            READ_TOPIC: {**ends_of(a, "orders-a"), **ends_of(b, "orders-b")}
        }

        # Scaling out: group c joins (a restarts knowing it) while more arrives on b.
        c = group(tmp_path / "c", "orders-c", 2)
        started.append(c)
        before_join = send_to_group(c, "c", 60)
        a.stop()
        a = group(tmp_path / "a", "orders-a", 2, b, c)
        started.append(a)
        wait_for(
            lambda: groups_in_route(a.endpoint) == {"orders-a", "orders-b", "orders-c"},
            "a's route to name three groups",
            deadline_s=CLUSTER_DEADLINE_S,
        )
        later = send_to_group(b, "b-later", 40)

        # The checkpoint names groups, not endpoints: a's new address carries on from it,
        # and c is read from its oldest message.
        run_stream(a.endpoint)
        assert streamed() == Counter(sent + before_join + later)
        assert last_checkpointed_offsets(checkpoint) == {
            READ_TOPIC: {**ends_of(a, "orders-a"), **ends_of(b, "orders-b"),
                         **ends_of(c, "orders-c")}
        }  # fmt: skip
    finally:
        for broker in started:
            broker.kill()


def last_checkpointed_offsets(checkpoint: Path) -> dict:
    offsets_dir = checkpoint / "offsets"
    newest = max((p for p in offsets_dir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    return json.loads(newest.read_text().strip().splitlines()[-1])
