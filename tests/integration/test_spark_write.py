"""Writing topics from Spark, batch and streaming, against a real broker process."""

from __future__ import annotations

from collections import Counter

import pytest
from pyspark.errors import StreamingQueryException
from tests.support.broker_fixture import module_broker
from tests.support.queue_ends import wait_for_messages, wait_until_dispatched

from skiff_broker.client.admin import AdminClient
from skiff_broker.client.messaging import MessagingClient, OutgoingMessage
from skiff_broker.client.pull_consumer import PullConsumer, PulledMessage

broker = module_broker("spark-write")


def everything_in(endpoint: str, topic: str) -> list[PulledMessage]:
    """Every message of the topic, once all acknowledged ones are readable."""
    wait_until_dispatched(endpoint)
    with PullConsumer(endpoint) as consumer:
        return [
            message
            for queue in consumer.queue_ranges(topic)
            for message in consumer.read_range(topic, queue.queue_id, 0, queue.max_offset)
        ]


def test_batch_write_stores_every_row_once_with_its_fields(spark, broker):
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("sw-batch", read_queues=4)
    rows = [
        (f"body-{i}".encode(), [f"k{i}"], "tagged" if i % 2 else None, {"n": str(i)})
        for i in range(1000)
    ]
    df = spark.createDataFrame(
        rows, "body binary, keys array<string>, tag string, properties map<string,string>"
    ).repartition(3)
    (
        df.write.format("skiff")
        .option("endpoints", broker.endpoint)
        .option("topic", "sw-batch")
        .mode("append")
        .save()
    )
    stored = everything_in(broker.endpoint, "sw-batch")
    assert Counter(m.body for m in stored) == Counter(body for body, *_ in rows)
    by_body = {m.body: m for m in stored}
    sample = by_body[b"body-7"]
    assert (sample.tag, sample.properties) == ("tagged", {"n": "7"})
    assert sample.keys[0] == "k7" and sample.keys[1].startswith("skiff-write:")


def test_bad_write_input_is_refused_before_anything_is_sent(spark, broker):
    df = spark.createDataFrame([(1,)], "value int")
    writer = df.write.format("skiff").option("endpoints", broker.endpoint).mode("append")
    with pytest.raises(Exception, match='needs a "body" column'):
        writer.save()


def test_streaming_write_restarted_mid_batch_stores_no_duplicate(spark, broker, tmp_path):
    source, sink, late = "sw-source", "sw-sink", "sw-late"
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic(source, read_queues=1)
        admin.create_topic(sink, read_queues=2)
    with MessagingClient(broker.endpoint) as messaging:
        messaging.send([OutgoingMessage(source, b"m%03d" % i) for i in range(600)])
    wait_for_messages(broker.endpoint, source, 600)
    checkpoint = tmp_path / "checkpoint"

    def run_until_done() -> StreamingQueryException | None:
        # Batches [0, 200), [200, 400), [400, 600). The message at offset 450 goes to
        # a topic that does not exist yet: the third batch fails after its task has
        # already stored the batch's other 199 messages in the sink.
        query = (
            spark.readStream.format("skiff")
            .option("endpoints", broker.endpoint)
            .option("topic", source)
            .option("maxOffsetsPerTrigger", "200")
            .load()
            .selectExpr("body", f"IF(offset = 450, '{late}', '{sink}') AS topic")
            .writeStream.format("skiff")
            .option("endpoints", broker.endpoint)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        try:
            assert query.awaitTermination(300), "the query did not finish"
        except StreamingQueryException as exc:
            return exc
        return None

    failure = run_until_done()
    assert failure is not None and "does not exist" in str(failure)
    # Written: all of the first two batches and the third one's messages but one.
    assert len(everything_in(broker.endpoint, sink)) == 599

    with AdminClient(broker.endpoint) as admin:
        admin.create_topic(late, read_queues=1)
    assert run_until_done() is None  # the restart runs the third batch again

    sink_bodies = Counter(m.body for m in everything_in(broker.endpoint, sink))
    assert sink_bodies == Counter(b"m%03d" % i for i in range(600) if i != 450)
    assert [m.body for m in everything_in(broker.endpoint, late)] == [b"m450"]
