"""Reading topics with Spark (batch and streaming) from a real broker process."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from tests.support.broker_fixture import module_broker
from tests.support.broker_process import running_broker
from tests.support.queue_ends import wait_for_messages
from tests.support.retention_broker import RETENTION_ARGS, wait_for_deletion

from skiff_broker.client.admin import AdminClient
from skiff_broker.client.messaging import MessagingClient, OutgoingMessage
from skiff_broker.client.pull_consumer import PullConsumer
from skiff_broker.spark.offsets import QueueSlice
from skiff_broker.spark.reader import SliceToRead, read_slice
from skiff_broker.spark.routes import Routes

broker = module_broker("spark-read")


def millis(value) -> int:
    return int(value.timestamp() * 1000)


def send_known(endpoint: str, topic: str, requests: int, per_request: int) -> dict[tuple, tuple]:
    """Send a known data set; returns every message as the broker stored it, by (queue, offset).

    Where each message went is asked of the broker's admin look-up by message ID,
    not of the code under test.
    """
    messages = []
    with MessagingClient(endpoint) as messaging:
        for r in range(requests):
            batch = [
                OutgoingMessage(
                    topic,
                    f"{topic} body {r}/{i}".encode() + bytes([r % 256, i % 256, 0, 255]),
                    tag="even" if i % 2 == 0 else "",
                    keys=(f"order-{r}-{i}", f"customer-{i % 7}") if i % 3 else (),
                    properties={"request": str(r), "index": str(i)},
                )
                for i in range(per_request)
            ]
            messaging.send(batch)
            messages.extend(batch)
    wait_for_messages(endpoint, topic, len(messages))
    stored = {}
    with AdminClient(endpoint) as admin:
        for message in messages:
            found = admin.lookup_message(topic, message.message_id)
            stored[(found.queue_id, found.queue_offset)] = (
                topic,
                found.queue_id,
                found.queue_offset,
                message.message_id,
                list(message.keys),
                message.tag or None,
                message.body,
                message.properties,
                found.born_timestamp,
                found.store_timestamp,
            )
    return stored


def as_tuples(rows) -> dict[tuple, tuple]:
    return {
        (row.queue, row.offset): (
            row.topic,
            row.queue,
            row.offset,
            row.message_id,
            list(row.keys),
            row.tag,
            bytes(row.body),
            dict(row.properties),
            millis(row.born_timestamp),
            millis(row.store_timestamp),
        )
        for row in rows
    }


def test_batch_read_returns_exactly_what_was_stored(spark, broker):
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("sr-known", read_queues=3)
    expected = send_known(broker.endpoint, "sr-known", requests=12, per_request=25)
    df = (
        spark.read.format("skiff")
        .option("endpoints", broker.endpoint)
        .option("topic", "sr-known")
        .load()
    )
    assert df.schema.simpleString() == (
        "struct<topic:string,queue:int,offset:bigint,message_id:string,keys:array<string>,"
        "tag:string,body:binary,properties:map<string,string>,born_timestamp:timestamp,"
        "store_timestamp:timestamp,broker:string>"
    )
    assert df.rdd.getNumPartitions() == 3  # one per queue
    rows = df.collect()
    assert len(rows) == 300
    assert as_tuples(rows) == expected

    # An offset range per queue: exclusive ends, earliest (-2) and latest (-1).
    ranged = (
        spark.read.format("skiff")
        .option("endpoints", broker.endpoint)
        .option("topic", "sr-known")
        .option("startingOffsets", json.dumps({"sr-known": {"0": 10, "1": -2, "2": -1}}))
        .option("endingOffsets", json.dumps({"sr-known": {"0": 35, "1": 5}}))
        .load()
        .collect()
    )
    wanted = {
        k: v
        for k, v in expected.items()
        if (k[0] == 0 and 10 <= k[1] < 35) or (k[0] == 1 and k[1] < 5)
    }
    assert as_tuples(ranged) == wanted


def test_bad_options_say_what_to_do(spark, broker):
    reader = spark.read.format("skiff").option("endpoints", broker.endpoint)
    with pytest.raises(Exception, match="no topic to read"):
        reader.load().collect()
    with pytest.raises(Exception, match="startingOffsets must be JSON like"):
        reader.option("topic", "sr-known").option("startingOffsets", "{oops").load().collect()
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("sr-options", read_queues=1)
    past_the_end = json.dumps({"sr-options": {"0": 5}})
    with pytest.raises(Exception, match="the start offset 5 is after the end offset 0"):
        reader.option("topic", "sr-options").option(
            "startingOffsets", past_the_end
        ).load().collect()
    with pytest.raises(Exception, match="has no readable queue"):
        reader.option("topic", "sr-options").option(
            "startingOffsets", json.dumps({"sr-options": {"3": 0}})
        ).load().collect()


def test_a_batch_read_of_an_empty_range_is_an_empty_dataframe(spark, broker):
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("sr-empty", read_queues=2)
        admin.create_topic("sr-nothing-new", read_queues=2)

    def reader(topic: str):
        # A DataFrameReader keeps every option set on it: a fresh one per read.
        return (
            spark.read.format("skiff").option("endpoints", broker.endpoint).option("topic", topic)
        )

    # A topic nobody wrote to.
    empty = reader("sr-empty").load()
    assert empty.collect() == []
    assert empty.count() == 0

    # Messages there, but the range starts at the end: nothing new.
    send_known(broker.endpoint, "sr-nothing-new", requests=2, per_request=5)
    assert reader("sr-nothing-new").option("startingOffsets", "latest").load().collect() == []
    # The same topic read from the start holds them all.
    assert len(reader("sr-nothing-new").load().collect()) == 10


def last_checkpointed_offsets(checkpoint: Path) -> dict:
    offsets_dir = checkpoint / "offsets"
    newest = max((p for p in offsets_dir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    return json.loads(newest.read_text().strip().splitlines()[-1])


def test_streaming_query_restarted_from_its_checkpoint_neither_loses_nor_duplicates(
    spark, broker, tmp_path
):
    topic = "sr-stream"
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic(topic, read_queues=2)
    first = send_known(broker.endpoint, topic, requests=8, per_request=25)
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "out"

    def start(**trigger):
        stream = (
            spark.readStream.format("skiff")
            .option("endpoints", broker.endpoint)
            .option("topic", topic)
            .option("maxOffsetsPerTrigger", "40")
            .load()
        )
        return (
            stream.writeStream.format("parquet")
            .option("path", str(output))
            .option("checkpointLocation", str(checkpoint))
            .trigger(**trigger)
            .start()
        )

    query = start(processingTime="0 seconds")
    # Stop it while it is still working through the backlog (5 batches of 40).
    while not (query.lastProgress and query.lastProgress["batchId"] >= 1):
        if query.awaitTermination(0.2):
            raise AssertionError(f"the query ended early: {query.exception()}")
    query.stop()
    stopped_at = last_checkpointed_offsets(checkpoint)
    assert sum(stopped_at[topic].values()) < 200

    second = send_known(broker.endpoint, topic, requests=4, per_request=25)
    query = start(availableNow=True)
    query.awaitTermination(300)
    assert query.exception() is None

    # A lone broker is one group (its name, broker-a by default) of its own.
    assert last_checkpointed_offsets(checkpoint) == {
        topic: {
            f"broker-a/{q}": max(o for qq, o in {**first, **second} if qq == q) + 1 for q in (0, 1)
        }
    }
    rows = spark.read.parquet(str(output)).collect()
    assert len(rows) == 300
    assert as_tuples(rows) == {**first, **second}


def test_fail_on_data_loss_fails_or_skips_what_retention_deleted(spark, tmp_path):
    with running_broker(tmp_path, *RETENTION_ARGS) as retaining:
        with AdminClient(retaining.endpoint) as admin:
            admin.create_topic("sr-lost", read_queues=1)
        with MessagingClient(retaining.endpoint) as messaging:
            for i in range(60):  # 4 KiB each: several 64 KiB segments
                messaging.send([OutgoingMessage("sr-lost", f"{i:04d}".encode() * 1024)])
        wait_for_messages(retaining.endpoint, "sr-lost", 60)
        oldest = wait_for_deletion(retaining.endpoint, "sr-lost", 0, past=0)

        def read(fail_on_data_loss: str):
            return (
                spark.read.format("skiff")
                .option("endpoints", retaining.endpoint)
                .option("topic", "sr-lost")
                .option("startingOffsets", json.dumps({"sr-lost": {"0": 0}}))
                .option("failOnDataLoss", fail_on_data_loss)
                .load()
                .collect()
            )

        with pytest.raises(Exception, match="were deleted by retention") as failed:
            read("true")
        assert "failOnDataLoss" in str(failed.value)

        rows = read("false")
        offsets = [row.offset for row in rows]
        assert offsets and offsets[0] >= oldest > 0
        assert offsets == list(range(offsets[0], 60))
        assert [bytes(row.body[:4]) for row in rows] == [f"{i:04d}".encode() for i in offsets]


def test_a_task_reads_its_whole_planned_range_once_the_broker_holds_it(broker, monkeypatch):
    """A task's range ends where it was planned, not where its broker's queue ends now.

    A replica serving reads after a failover may not hold the planned end yet; the
    task waits for it instead of ending early (which would drop those messages from
    the query, since the next micro-batch starts at the planned end).
    """
    topic = "catch-up"
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic(topic, read_queues=1)
    with MessagingClient(broker.endpoint) as messaging:
        messaging.send([OutgoingMessage(topic, b"held 0"), OutgoingMessage(topic, b"held 1")])
    with Routes([broker.endpoint]) as routes:
        (group,) = routes.groups(topic)
    planned = SliceToRead((broker.endpoint,), QueueSlice(topic, group.group, 0, 0, 4), True, 2)
    # The task has read what the broker holds and found it short of the planned end: it
    # waits for the rest from then on. (max_offset is watched, not replaced: the broker
    # answers it.)
    found_short = threading.Event()
    max_offset = PullConsumer.max_offset

    def watched_max_offset(consumer: PullConsumer, topic_name: str, queue_id: int) -> int:
        held = max_offset(consumer, topic_name, queue_id)
        if topic_name == topic and held < 4:
            found_short.set()
        return held

    monkeypatch.setattr(PullConsumer, "max_offset", watched_max_offset)

    def send_the_rest() -> None:
        if not found_short.wait(timeout=60):
            return  # the rows asserted below then say what the task read
        with MessagingClient(broker.endpoint) as messaging:
            messaging.send([OutgoingMessage(topic, b"late 2"), OutgoingMessage(topic, b"late 3")])

    late = threading.Thread(target=send_the_rest)
    late.start()
    try:
        rows = [row for batch in read_slice(planned) for row in batch.to_pylist()]
    finally:
        late.join()
    assert [row["body"] for row in rows] == [b"held 0", b"held 1", b"late 2", b"late 3"]


def test_a_task_reads_what_arrives_between_its_fetch_and_its_look_at_the_queue(broker, monkeypatch):
    """The rest of a range can arrive after a fetch ended at the broker's end and before
    the task asks how much the broker holds (a replica catching up receives it just then).
    The broker then holds the planned end, and the task reads the rest instead of taking
    its range as done (the next micro-batch starts at the planned end: they would be lost
    to the query).
    """
    topic = "arrives-between"
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic(topic, read_queues=1)
    with MessagingClient(broker.endpoint) as messaging:
        messaging.send([OutgoingMessage(topic, b"held 0"), OutgoingMessage(topic, b"held 1")])
    with Routes([broker.endpoint]) as routes:
        (group,) = routes.groups(topic)
    planned = SliceToRead((broker.endpoint,), QueueSlice(topic, group.group, 0, 0, 4), True, 2)
    max_offset = PullConsumer.max_offset
    sent: list[bytes] = []

    def after_the_rest_arrives(consumer: PullConsumer, topic_name: str, queue_id: int) -> int:
        if topic_name == topic and not sent:
            # The task's fetch has ended at offset 2; the rest lands before it asks.
            sent.extend([b"late 2", b"late 3"])
            with MessagingClient(broker.endpoint) as messaging:
                messaging.send([OutgoingMessage(topic, body) for body in sent])
            wait_for_messages(broker.endpoint, topic, 4)
        return max_offset(consumer, topic_name, queue_id)

    monkeypatch.setattr(PullConsumer, "max_offset", after_the_rest_arrives)
    rows = [row for batch in read_slice(planned) for row in batch.to_pylist()]
    assert sent
    assert [row["body"] for row in rows] == [b"held 0", b"held 1", b"late 2", b"late 3"]
