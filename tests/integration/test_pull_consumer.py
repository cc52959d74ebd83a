"""The pull consumer (explicit offsets) against a real broker process."""

from __future__ import annotations

import grpc
import pytest
from tests.support.broker_fixture import module_broker
from tests.support.broker_process import BrokerProcess, running_broker
from tests.support.queue_ends import wait_for_messages
from tests.support.retention_broker import RETENTION_ARGS, wait_for_deletion

from skiff_broker.client.admin import AdminClient
from skiff_broker.client.errors import MessagingError, NotFound
from skiff_broker.client.messaging import MessagingClient, OutgoingMessage
from skiff_broker.client.pull_consumer import DataLost, PullConsumer, PullStatus, QueueRange
from skiff_broker.records.v1 import records_pb2 as rpb
from skiff_broker.records.v1 import records_pb2_grpc

broker = module_broker("pull-consumer")


def fill(endpoint: str, topic: str, queues: int, per_queue: int) -> dict[int, list[bytes]]:
    """``per_queue`` messages in each queue (one request per queue); bodies by queue."""
    with AdminClient(endpoint) as admin:
        admin.create_topic(topic, read_queues=queues)
    sent: dict[int, list[bytes]] = {}
    with MessagingClient(endpoint) as messaging:
        for batch in range(queues):
            bodies = [f"{topic}-{batch}-{i}".encode() for i in range(per_queue)]
            messages = [
                OutgoingMessage(topic, b, tag="t", keys=(f"k{i}",), properties={"i": str(i)})
                for i, b in enumerate(bodies)
            ]
            receipts = messaging.send(messages)
            assert [r.offset for r in receipts] == list(range(per_queue))
            sent[batch] = bodies
    wait_for_messages(endpoint, topic, queues * per_queue)
    with PullConsumer(endpoint) as consumer:
        # Requests go round-robin over the queues; find which batch each one took.
        by_queue = {}
        for queue_id in consumer.queue_ids(topic):
            first = consumer.pull(topic, queue_id, 0, max_messages=1).messages[0].body
            by_queue[queue_id] = next(b for b in sent.values() if b[0] == first)
    return by_queue


def test_offsets_and_explicit_pulls(broker):
    bodies = fill(broker.endpoint, "pc-offsets", queues=2, per_queue=10)
    with PullConsumer(broker.endpoint) as consumer:
        assert consumer.queue_ids("pc-offsets") == [0, 1]
        assert consumer.queue_ranges("pc-offsets") == [QueueRange(0, 0, 10), QueueRange(1, 0, 10)]

        result = consumer.pull("pc-offsets", 1, 4, max_messages=3)
        assert result.status is PullStatus.FOUND
        assert [m.queue_offset for m in result.messages] == [4, 5, 6]
        assert [m.body for m in result.messages] == bodies[1][4:7]
        assert result.next_offset == 7
        first = result.messages[0]
        assert (first.topic, first.queue_id, first.tag, first.keys) == (
            "pc-offsets",
            1,
            "t",
            ("k4",),
        )
        assert first.properties["i"] == "4"
        assert first.store_timestamp >= first.born_timestamp > 0

        at_end = consumer.pull("pc-offsets", 0, 10)
        assert (at_end.status, at_end.messages, at_end.next_offset) == (
            PullStatus.NO_NEW_MESSAGE,
            [],
            10,
        )
        beyond = consumer.pull("pc-offsets", 0, 50)
        assert (beyond.status, beyond.next_offset) == (PullStatus.OFFSET_TOO_LARGE, 10)


def test_read_range_is_exact_across_many_prefetched_batches(broker):
    bodies = fill(broker.endpoint, "pc-range", queues=1, per_queue=700)
    with PullConsumer(broker.endpoint) as consumer:
        got = list(consumer.read_range("pc-range", 0, 13, 611, batch_size=50))
        assert [m.queue_offset for m in got] == list(range(13, 611))
        assert [m.body for m in got] == bodies[0][13:611]
        # A range past the queue's end stops where the queue ends.
        tail = list(consumer.read_range("pc-range", 0, 690, 1000))
        assert [m.queue_offset for m in tail] == list(range(690, 700))
        # Stopping early leaves the consumer usable.
        partial = consumer.read_range("pc-range", 0, 0, 700, batch_size=10)
        assert next(partial).queue_offset == 0
        partial.close()
        assert len(list(consumer.read_range("pc-range", 0, 0, 700))) == 700


def test_group_offsets_are_kept_on_the_broker(broker):
    fill(broker.endpoint, "pc-group", queues=1, per_queue=3)
    with PullConsumer(broker.endpoint, group="pc-readers") as consumer:
        assert consumer.committed_offset("pc-group", 0) is None
        consumer.commit_offset("pc-group", 0, 2)
        assert consumer.committed_offset("pc-group", 0) == 2


def test_unknown_topic_is_a_clear_error(broker):
    with PullConsumer(broker.endpoint) as consumer:
        with pytest.raises(MessagingError) as caught:
            consumer.queue_ids("pc-missing")
        assert caught.value.code == "TOPIC_NOT_FOUND"
        with pytest.raises(NotFound, match="topic 'pc-missing' does not exist"):
            consumer.pull("pc-missing", 0, 0)


def test_deleted_offsets_raise_or_are_skipped(tmp_path):
    with running_broker(tmp_path, *RETENTION_ARGS) as retaining:
        with AdminClient(retaining.endpoint) as admin:
            admin.create_topic("pc-lost", read_queues=1)
        with MessagingClient(retaining.endpoint) as messaging:
            for i in range(60):  # 4 KiB each: several 64 KiB segments
                messaging.send([OutgoingMessage("pc-lost", f"{i:04d}".encode() * 1024)])
        wait_for_messages(retaining.endpoint, "pc-lost", 60)
        oldest = wait_for_deletion(retaining.endpoint, "pc-lost", 0, past=0)
        with PullConsumer(retaining.endpoint) as consumer:
            with pytest.raises(DataLost, match=f"start from offset {oldest}"):
                list(consumer.read_range("pc-lost", 0, 0, 60))
            lost: list[DataLost] = []
            got = list(
                consumer.read_range("pc-lost", 0, 0, 60, skip_lost=True, on_lost=lost.append)
            )
            assert len(lost) == 1 and lost[0].offset == 0
            first = lost[0].first_available
            assert first >= oldest
            assert [m.queue_offset for m in got] == list(range(first, 60))
            assert [m.body[:4] for m in got] == [f"{i:04d}".encode() for i in range(first, 60)]


def test_one_fetch_carries_thousands_of_messages_and_tags_filter_exactly(broker):
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("pc-bulk", read_queues=1)
    bodies = [f"bulk {i}".encode() * 10 for i in range(5000)]
    with MessagingClient(broker.endpoint) as messaging:
        for start in range(0, 5000, 500):
            messaging.send(
                [
                    OutgoingMessage("pc-bulk", bodies[i], tag="even" if i % 2 == 0 else "odd")
                    for i in range(start, start + 500)
                ]
            )
    wait_for_messages(broker.endpoint, "pc-bulk", 5000)
    with PullConsumer(broker.endpoint) as consumer:
        everything = consumer.pull("pc-bulk", 0, 0, max_messages=5000)
        assert [m.body for m in everything.messages] == bodies
        assert everything.next_offset == 5000

        odd = consumer.pull("pc-bulk", 0, 0, max_messages=100, tag_expression="odd")
        assert [m.queue_offset for m in odd.messages] == list(range(1, 200, 2))
        assert {m.tag for m in odd.messages} == {"odd"}
        assert odd.next_offset == 200

        small = consumer.pull("pc-bulk", 0, 0, max_messages=5000, max_bytes=1000)
        assert 0 < len(small.messages) < 20


@pytest.fixture(scope="module")
def two_messages(broker: BrokerProcess) -> str:
    fill(broker.endpoint, "pc-refused", queues=1, per_queue=2)
    return "pc-refused"


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"topic": "pc-nope"}, "does not exist"),
        ({"topic": "bad/name"}, "topic"),
        ({"queue_id": 9}, "out of range"),
        ({"offset": -1}, "negative"),
        ({"max_records": 0}, "max_records"),
        ({"max_records": 70000}, "max_records"),
        ({"max_bytes": 1 << 30}, "max_bytes"),
        ({"wait_ms": -5}, "wait_ms"),
        ({"tags": ["a|b"]}, "tag"),
    ],
)
def test_bad_fetches_are_refused_and_the_broker_keeps_serving(
    broker, two_messages, change, problem
):
    fetch = {"topic": two_messages, "queue_id": 0, "offset": 0, "max_records": 10}
    with grpc.insecure_channel(broker.endpoint) as channel:
        stub = records_pb2_grpc.RecordServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.Fetch(rpb.FetchRequest(**{**fetch, **change}), timeout=10)
        assert caught.value.code() in (
            grpc.StatusCode.INVALID_ARGUMENT,
            grpc.StatusCode.NOT_FOUND,
        )
        assert problem in caught.value.details()
        good = stub.Fetch(rpb.FetchRequest(**fetch), timeout=10)
        assert (good.result, good.record_count) == (rpb.FetchResponse.FOUND, 2)
