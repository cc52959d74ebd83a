"""The Spark sink writes to every group of a cluster, from one endpoint."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from tests.broker_process import running_broker

from skiff_broker.client.admin import AdminClient
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
