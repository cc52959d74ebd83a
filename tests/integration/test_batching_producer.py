"""Skiff's BatchingProducer against real broker processes.

Sends are counted with a grpc.aio client interceptor that sees every
request the producer makes, SendMessage or record Append (how many messages it
carries, which message groups, how many requests overlap). Messages are read back with the
official client's SimpleConsumer, or with raw PullMessage where queue order
matters.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import math
import re
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
from rocketmq import ClientConfiguration, Credentials
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc
from tests.support.broker_fixture import module_broker
from tests.support.broker_process import BrokerProcess, create_topics, data_dir_of, running_broker
from tests.support.official_client import receive_all, started_simple_consumer

from skiff_broker.client.admin import AdminClient
from skiff_broker.client.errors import BrokerError, MessagingError
from skiff_broker.client.producer import BatchingProducer, ProducerClosed, SendReceipt
from skiff_broker.client.records import decode_records
from skiff_broker.metadata.topic_table import MessageType, TopicConfig

# Generous: polls and waits end as soon as their condition holds.
DEADLINE_S = 90.0
QUEUES = 4
MAX_MESSAGE_SIZE = 64 * 1024
MESSAGE_ID = re.compile(r"^01[0-9A-F]{32}$")

BULK_TOPIC = "batch-bulk"
ERRORS_TOPIC = "batch-errors"
FIFO_TOPIC = "batch-fifo"
ROUTED_TOPIC = "batch-routed"
FLUSH_TOPIC = "batch-flush"

T = TypeVar("T")


# A small message limit makes the oversize case cheap.
broker = module_broker(
    "batching",
    "--max-message-size",
    str(MAX_MESSAGE_SIZE),
    topics=(
        *(
            TopicConfig(name, QUEUES, QUEUES)
            for name in (BULK_TOPIC, ERRORS_TOPIC, ROUTED_TOPIC, FLUSH_TOPIC)
        ),
        TopicConfig(FIFO_TOPIC, QUEUES, QUEUES, message_type=MessageType.FIFO),
    ),
)


@dataclasses.dataclass(frozen=True)
class Sent:
    message_id: str
    group: str
    body: bytes


class SendRecorder(grpc.aio.UnaryUnaryClientInterceptor):
    """Records every send request (as its messages) and how requests overlapped in time."""

    def __init__(self) -> None:
        self.requests: list[list[Sent]] = []
        self.kinds: list[str] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.group_in_flight: collections.Counter[str] = collections.Counter()
        self.max_group_in_flight: collections.Counter[str] = collections.Counter()

    async def intercept_unary_unary(self, continuation, client_call_details, request):  # type: ignore[no-untyped-def]
        method = client_call_details.method
        if isinstance(method, bytes):
            method = method.decode()
        if method.endswith("/SendMessage"):
            sent = [
                Sent(m.system_properties.message_id, m.system_properties.message_group, m.body)
                for m in request.messages
            ]
        elif method.endswith("/Append"):
            sent = [
                Sent(m.message_id, m.message_group, m.body)
                for m in decode_records(request.records, check_crc=False)
            ]
        else:
            return await continuation(client_call_details, request)
        self.kinds.append(method.rpartition("/")[2])
        self.requests.append(sent)
        groups = {m.group for m in sent}
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        for group in groups:
            self.group_in_flight[group] += 1
            self.max_group_in_flight[group] = max(
                self.max_group_in_flight[group], self.group_in_flight[group]
            )
        try:
            call = await continuation(client_call_details, request)
            await call  # the request counts as in flight until its answer arrived
            return call
        finally:
            self.in_flight -= 1
            for group in groups:
                self.group_in_flight[group] -= 1

    def sizes(self) -> list[int]:
        return [len(messages) for messages in self.requests]


def run(factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(factory())


def client_config(broker: BrokerProcess) -> ClientConfiguration:
    return ClientConfiguration(broker.endpoint, Credentials())


def pull_queue(endpoint: str, topic: str, queue_id: int) -> list[pb.Message]:
    """Every message of one queue in stored order, through raw PullMessage."""
    messages: list[pb.Message] = []
    offset = 0
    with grpc.insecure_channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        while True:
            request = spb.PullMessageRequest(
                group=pb.Resource(name="batch-reader"),
                message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=queue_id),
                offset=offset,
                batch_size=256,
                filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"),
            )
            found = []
            next_offset = offset
            for frame in stub.PullMessage(request, timeout=30):
                content = frame.WhichOneof("content")
                if content == "message":
                    found.append(frame.message)
                elif content == "next_offset":
                    next_offset = frame.next_offset
            if not found:
                return messages
            messages += found
            offset = next_offset


# -- many concurrent sends ------------------------------------------------------


def test_thousands_of_concurrent_sends_travel_in_batches_and_come_back_intact(
    broker: BrokerProcess,
) -> None:
    count = 3000
    max_batch = 256
    bodies = [f"message {i} ".encode() * (1 + i % 40) for i in range(count)]
    recorder = SendRecorder()

    async def produce() -> list[SendReceipt]:
        async with BatchingProducer(
            broker.endpoint, batch_max_messages=max_batch, interceptors=[recorder]
        ) as producer:
            return await asyncio.gather(
                *(
                    producer.send(
                        BULK_TOPIC,
                        bodies[i],
                        tag=f"tag{i % 3}",
                        keys=[f"key-{i}", f"alt-{i}"],
                        properties={"index": str(i), "parity": "even" if i % 2 == 0 else "odd"},
                    )
                    for i in range(count)
                )
            )

    receipts = run(produce)
    assert len(receipts) == count
    ids = [r.message_id for r in receipts]
    assert len(set(ids)) == count
    assert all(MESSAGE_ID.match(i) for i in ids), ids[:3]

    # Many messages per request: a producer sending one message per request fails here.
    sizes = recorder.sizes()
    assert sum(sizes) == count
    assert max(sizes) == max_batch
    assert len(sizes) <= 2 * math.ceil(count / max_batch), sizes
    # The broker stores a request as one contiguous run of one queue.
    offset_of = {r.message_id: r.offset for r in receipts}
    for messages in recorder.requests:
        offsets = [offset_of[m.message_id] for m in messages]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))

    with started_simple_consumer(
        client_config(broker), "batch-bulk-readers", BULK_TOPIC
    ) as consumer:
        received = receive_all(consumer, count, 60)
    assert sorted(m.message_id for m in received) == sorted(ids)
    index_of = {message_id: i for i, message_id in enumerate(ids)}
    for message in received:
        i = index_of[message.message_id]
        assert message.body == bodies[i]
        assert message.tag == f"tag{i % 3}"
        assert sorted(message.keys) == sorted([f"key-{i}", f"alt-{i}"])
        assert message.properties == {"index": str(i), "parity": "even" if i % 2 == 0 else "odd"}


def test_calls_larger_than_a_batch_are_split_by_count_and_bytes_in_call_order(
    broker: BrokerProcess,
) -> None:
    max_messages, max_bytes = 50, 8 * 1024
    first = [bytes([65 + i % 26]) * (10 + (i * 37) % 300) for i in range(120)]
    singles = [b"single %d" % i for i in range(3)]
    last = [b"last %d " % i * (1 + i % 7) for i in range(80)]
    recorder = SendRecorder()

    async def produce() -> list[SendReceipt]:
        async with BatchingProducer(
            broker.endpoint,
            batch_max_messages=max_messages,
            batch_max_bytes=max_bytes,
            max_in_flight_requests=1,
            interceptors=[recorder],
        ) as producer:
            calls = [
                producer.send_batch(BULK_TOPIC, first),
                *(producer.send(BULK_TOPIC, body) for body in singles),
                producer.send_batch(BULK_TOPIC, last),
            ]
            answers = await asyncio.gather(*calls)
        receipts: list[SendReceipt] = []
        for answer in answers:
            receipts += answer if isinstance(answer, list) else [answer]
        return receipts

    receipts = run(produce)
    sent = [message for request in recorder.requests for message in request]
    # One request at a time: the requests carry the messages in call order ...
    assert [m.body for m in sent] == first + singles + last
    # ... each receipt names its own message ...
    assert [r.message_id for r in receipts] == [m.message_id for m in sent]
    # ... within both limits of a batch, full ones included ...
    assert all(len(request) <= max_messages for request in recorder.requests)
    assert all(sum(len(m.body) for m in request) <= max_bytes for request in recorder.requests)
    assert max(recorder.sizes()) == max_messages
    assert any(len(r) < max_messages and r[-1].body in first for r in recorder.requests[:-1])
    # ... and a request is stored as consecutive offsets of one queue.
    offset_of = {r.message_id: r.offset for r in receipts}
    for request in recorder.requests:
        offsets = [offset_of[m.message_id] for m in request]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))


def test_a_batch_call_cancelled_sends_what_already_joined_a_batch_and_not_the_rest(
    broker: BrokerProcess,
) -> None:
    recorder = SendRecorder()

    async def produce() -> None:
        producer = BatchingProducer(
            broker.endpoint,
            batch_max_messages=10,
            max_in_flight_requests=1,
            interceptors=[recorder],
        )
        # 10 go out at once, the next 10 fill the open batch, the last 15 wait for room.
        call = asyncio.ensure_future(
            producer.send_batch(FLUSH_TOPIC, [b"m%d" % i for i in range(35)])
        )
        await asyncio.sleep(0)
        assert producer.stats().waiting_senders == 1
        assert producer.stats().buffered_messages == 20
        call.cancel()
        await producer.close()
        assert call.cancelled()

    run(produce)
    assert [[m.body for m in r] for r in recorder.requests] == [
        [b"m%d" % i for i in range(10)],
        [b"m%d" % i for i in range(10, 20)],
    ]


# -- FIFO ---------------------------------------------------------------------------


def test_a_message_group_keeps_its_order_under_concurrency(broker: BrokerProcess) -> None:
    # Fewer groups than requests allowed in flight: only the group rule keeps a
    # group's second request from overlapping its first.
    groups = 3
    per_group = 200
    recorder = SendRecorder()

    async def produce() -> dict[str, list[SendReceipt]]:
        async with BatchingProducer(
            broker.endpoint,
            batch_max_messages=16,
            max_in_flight_requests=8,
            linger_ms=1,
            interceptors=[recorder],
        ) as producer:
            # Interleaved across groups; within a group, sequence numbers in call order.
            tasks = [
                asyncio.ensure_future(
                    producer.send(
                        FIFO_TOPIC,
                        f"g{n % groups}:{n // groups}".encode(),
                        message_group=f"g{n % groups}",
                    )
                )
                for n in range(groups * per_group)
            ]
            receipts = await asyncio.gather(*tasks)
        by_group: dict[str, list[SendReceipt]] = collections.defaultdict(list)
        for n, receipt in enumerate(receipts):
            by_group[f"g{n % groups}"].append(receipt)
        return by_group

    by_group = run(produce)

    # A group never had two requests in flight, though each needed many requests
    # and requests of different groups did overlap.
    requests_per_group = collections.Counter(m[0].group for m in recorder.requests)
    assert all(len({m.group for m in r}) == 1 for r in recorder.requests)
    assert min(requests_per_group.values()) >= per_group // 16
    assert max(recorder.max_group_in_flight.values()) == 1
    assert recorder.max_in_flight > 1

    for receipts in by_group.values():
        offsets = [r.offset for r in receipts]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)

    # Read back in stored order: each group's sequence numbers come out in order.
    seen: dict[str, list[int]] = collections.defaultdict(list)
    for queue_id in range(QUEUES):
        for message in pull_queue(broker.endpoint, FIFO_TOPIC, queue_id):
            group, _, sequence = message.body.decode().partition(":")
            assert message.system_properties.message_group == group
            seen[group].append(int(sequence))
    assert dict(seen) == {f"g{g}": list(range(per_group)) for g in range(groups)}


# -- errors -------------------------------------------------------------------------


def test_errors_reach_only_the_sends_they_concern(broker: BrokerProcess) -> None:
    good = 200
    oversize_at = {17, 90, 151}
    recorder = SendRecorder()

    async def produce() -> tuple[list[Any], list[Any]]:
        async with BatchingProducer(broker.endpoint, interceptors=[recorder]) as producer:
            known = [
                producer.send(
                    ERRORS_TOPIC, b"x" * (MAX_MESSAGE_SIZE + 1 if i in oversize_at else 100)
                )
                for i in range(good)
            ]
            unknown = [producer.send("batch-no-such-topic", b"lost") for _ in range(50)]
            results = await asyncio.gather(*known, *unknown, return_exceptions=True)
            # The producer and the broker keep serving after the errors.
            await producer.send(ERRORS_TOPIC, b"after")
        return results[:good], results[good:]

    known, unknown = run(produce)

    for error in unknown:
        assert isinstance(error, MessagingError)
        assert (error.code, error.number) == ("TOPIC_NOT_FOUND", pb.Code.TOPIC_NOT_FOUND)
        assert "batch-no-such-topic" in error.message
    for i, result in enumerate(known):
        if i in oversize_at:
            assert isinstance(result, MessagingError)
            assert result.code == "MESSAGE_BODY_TOO_LARGE"
            assert str(MAX_MESSAGE_SIZE) in result.message
        else:
            assert isinstance(result, SendReceipt), result
    # The oversize messages shared requests with good ones: the broker refused
    # them one by one, not their whole request.
    oversize_requests = [
        r for r in recorder.requests if any(len(m.body) > MAX_MESSAGE_SIZE for m in r)
    ]
    assert oversize_requests and all(len(r) > 1 for r in oversize_requests)


def test_an_answer_message_by_message_reaches_each_part_of_a_shared_request(
    broker: BrokerProcess,
) -> None:
    # Requests of 5: the first holds a whole batch call, a send() and the head of a
    # second batch call, whose rest goes in the next. An oversize body in each request
    # makes the broker refuse the Append, and the producer sends the request again as
    # SendMessage, answered message by message.
    too_large = b"x" * (MAX_MESSAGE_SIZE + 1)
    first = [b"a0", b"a1", too_large]
    last = [b"b0", too_large, b"b2", b"b3"]
    recorder = SendRecorder()

    async def produce() -> list[Any]:
        async with BatchingProducer(
            broker.endpoint,
            batch_max_messages=5,
            max_in_flight_requests=1,
            interceptors=[recorder],
        ) as producer:
            return await asyncio.gather(
                producer.send_batch(ERRORS_TOPIC, first, return_exceptions=True),
                producer.send(ERRORS_TOPIC, b"single"),
                producer.send_batch(ERRORS_TOPIC, last, return_exceptions=True),
            )

    first_results, single, last_results = run(produce)
    shared = [b"a0", b"a1", too_large, b"single", b"b0"]
    rest = [too_large, b"b2", b"b3"]
    bodies_sent = [[m.body for m in r] for r in recorder.requests]
    assert list(zip(recorder.kinds, bodies_sent, strict=True)) == [
        ("Append", shared),
        ("SendMessage", shared),
        ("Append", rest),
        ("SendMessage", rest),
    ]
    for results, bodies in ((first_results, first), (last_results, last)):
        assert len(results) == len(bodies)
        for result, body in zip(results, bodies, strict=True):
            if body is too_large:
                assert isinstance(result, MessagingError), result
                assert result.code == "MESSAGE_BODY_TOO_LARGE"
            else:
                assert isinstance(result, SendReceipt), result
    assert isinstance(single, SendReceipt)
    # Each receipt names the message it answers.
    sent = {m.message_id: m.body for r in recorder.requests for m in r}
    answered = [
        *zip(first_results, first, strict=True),
        (single, b"single"),
        *zip(last_results, last, strict=True),
    ]
    for result, body in answered:
        if isinstance(result, SendReceipt):
            assert sent[result.message_id] == body


def test_a_topic_created_after_a_failed_send_can_be_used(broker: BrokerProcess) -> None:
    topic = "batch-created-late"

    async def send() -> SendReceipt:
        async with BatchingProducer(broker.endpoint) as producer:
            with pytest.raises(MessagingError) as refused:
                await producer.send(topic, b"early")
            assert refused.value.code == "TOPIC_NOT_FOUND"
            with AdminClient(broker.endpoint) as admin:
                admin.create_topic(topic, read_queues=2)
            return await producer.send(topic, b"late")

    receipt = run(send)
    assert isinstance(receipt, SendReceipt) and receipt.offset == 0


# -- flush, close and routes ---------------------------------------------------------


def test_flush_sends_a_lingering_batch_and_close_refuses_new_sends(
    broker: BrokerProcess,
) -> None:
    recorder = SendRecorder()

    async def produce() -> None:
        # A linger far beyond the deadline: only flush() can send these.
        producer = BatchingProducer(broker.endpoint, linger_ms=3_600_000, interceptors=[recorder])
        sends = [
            asyncio.ensure_future(producer.send(FLUSH_TOPIC, f"m{i}".encode())) for i in range(5)
        ]
        await asyncio.sleep(0)
        assert not any(s.done() for s in sends)
        await asyncio.wait_for(producer.flush(), DEADLINE_S)
        assert all(isinstance(s.result(), SendReceipt) for s in sends)
        await producer.close()
        with pytest.raises(ProducerClosed):
            await producer.send(FLUSH_TOPIC, b"too late")

    run(produce)
    assert recorder.sizes() == [5]


def test_a_send_cancelled_while_waiting_for_room_is_never_sent(broker: BrokerProcess) -> None:
    recorder = SendRecorder()

    async def produce() -> None:
        # One message per batch and one request at a time: the first send goes out,
        # the second fills the next batch, the third must wait for room.
        producer = BatchingProducer(
            broker.endpoint,
            batch_max_messages=1,
            max_in_flight_requests=1,
            interceptors=[recorder],
        )
        first, second, third = (
            asyncio.ensure_future(producer.send(FLUSH_TOPIC, body))
            for body in (b"first", b"second", b"third")
        )
        await asyncio.sleep(0)
        assert producer.stats().waiting_senders == 1
        third.cancel()
        await producer.close()
        assert isinstance(first.result(), SendReceipt)
        assert isinstance(second.result(), SendReceipt)
        assert third.cancelled()

    run(produce)
    assert [[m.body for m in r] for r in recorder.requests] == [[b"first"], [b"second"]]


class RouteOnlyServer(service_pb2_grpc.MessagingServiceServicer):
    """A bootstrap endpoint that only answers QueryRoute, pointing at the real broker.

    Every other call is UNIMPLEMENTED here, so sends succeed only if the
    producer uses the endpoint from the route.
    """

    def __init__(self, broker_endpoint: str) -> None:
        self.broker_endpoint = broker_endpoint
        self.route_queries = 0

    async def QueryRoute(self, request, context):  # type: ignore[no-untyped-def]
        self.route_queries += 1
        host, _, port = self.broker_endpoint.rpartition(":")
        async with grpc.aio.insecure_channel(self.broker_endpoint) as channel:
            routed = spb.QueryRouteRequest(
                topic=request.topic,
                endpoints=pb.Endpoints(
                    scheme=pb.AddressScheme.IPv4, addresses=[pb.Address(host=host, port=int(port))]
                ),
            )
            return await service_pb2_grpc.MessagingServiceStub(channel).QueryRoute(routed)


def test_sends_go_to_the_broker_the_route_names(broker: BrokerProcess) -> None:
    async def produce() -> tuple[list[SendReceipt], int]:
        route_only = RouteOnlyServer(broker.endpoint)
        server = grpc.aio.server()
        service_pb2_grpc.add_MessagingServiceServicer_to_server(route_only, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with BatchingProducer(f"127.0.0.1:{port}") as producer:
                receipts = await asyncio.gather(
                    *(producer.send(ROUTED_TOPIC, b"routed") for _ in range(100))
                )
        finally:
            await server.stop(None)
        return receipts, route_only.route_queries

    receipts, route_queries = run(produce)
    assert len(receipts) == 100
    assert route_queries == 1
    with started_simple_consumer(
        client_config(broker), "batch-routed-readers", ROUTED_TOPIC
    ) as consumer:
        received = receive_all(consumer, 100, 60)
    assert sorted(m.message_id for m in received) == sorted(r.message_id for r in receipts)


# -- backpressure -------------------------------------------------------------------


def test_backpressure_bounds_what_the_producer_buffers(tmp_path: Path) -> None:
    count = 4000
    max_batch = 32
    create_topics(data_dir_of(tmp_path), TopicConfig("batch-slow", QUEUES, QUEUES))
    recorder = SendRecorder()

    async def produce(endpoint: str) -> tuple[int, int, list[SendReceipt]]:
        async with BatchingProducer(
            endpoint,
            batch_max_messages=max_batch,
            max_in_flight_requests=1,
            interceptors=[recorder],
        ) as producer:
            sends = asyncio.gather(
                *(producer.send("batch-slow", bytes(1024)) for _ in range(count))
            )
            most_buffered = most_waiting = 0
            while not sends.done():
                stats = producer.stats()
                most_buffered = max(most_buffered, stats.buffered_messages)
                most_waiting = max(most_waiting, stats.waiting_senders)
                await asyncio.sleep(0)
            return most_buffered, most_waiting, await sends

    with running_broker(tmp_path, "--flush-type", "SYNC_FLUSH") as process:
        most_buffered, most_waiting, receipts = run(lambda: produce(process.endpoint))

    assert len(receipts) == count
    # The callers beyond one open batch and one request waited in send() ...
    assert most_waiting > count // 2
    # ... so the producer never held more than those two batches.
    assert most_buffered <= 2 * max_batch
    assert recorder.max_in_flight == 1
    assert sum(recorder.sizes()) == count


# -- Apache RocketMQ's batch answer --------------------------------------------------


class OneEntryPerBatchServer(service_pb2_grpc.MessagingServiceServicer):
    """Answers SendMessage as Apache RocketMQ 5's proxy does: one entry for a whole batch.

    A stand-in, because Apache RocketMQ needs a JVM and Maven artifacts that the
    test run does not install; bench/peers_bench.py sends to the real one. The
    entry carries the queue offset of the batch's first message; ``entries``
    overrides how many entries an answer has.
    """

    def __init__(self) -> None:
        self.port = 0
        self.next_offset = 0
        self.entries: int | None = None
        self.batches: list[int] = []

    async def QueryRoute(self, request, context):  # type: ignore[no-untyped-def]
        endpoints = pb.Endpoints(
            scheme=pb.AddressScheme.IPv4, addresses=[pb.Address(host="127.0.0.1", port=self.port)]
        )
        queue = pb.MessageQueue(
            topic=request.topic,
            id=0,
            permission=pb.Permission.READ_WRITE,
            broker=pb.Broker(name="rocketmq", id=0, endpoints=endpoints),
        )
        return spb.QueryRouteResponse(status=pb.Status(code=pb.Code.OK), message_queues=[queue])

    async def SendMessage(self, request, context):  # type: ignore[no-untyped-def]
        count = len(request.messages)
        self.batches.append(count)
        first = self.next_offset
        self.next_offset += count
        entry = spb.SendResultEntry(
            status=pb.Status(code=pb.Code.OK),
            message_id=",".join(m.system_properties.message_id for m in request.messages),
            offset=first,
        )
        return spb.SendMessageResponse(
            status=pb.Status(code=pb.Code.OK), entries=[entry] * (self.entries or 1)
        )


@contextlib.asynccontextmanager
async def one_entry_server() -> Any:
    servicer = OneEntryPerBatchServer()
    server = grpc.aio.server()
    service_pb2_grpc.add_MessagingServiceServicer_to_server(servicer, server)
    servicer.port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield servicer
    finally:
        await server.stop(None)


def test_a_one_entry_answer_for_a_batch_settles_every_send_in_order() -> None:
    count = 600

    async def produce() -> tuple[list[SendReceipt], list[int]]:
        async with one_entry_server() as server:
            async with BatchingProducer(
                f"127.0.0.1:{server.port}", batch_max_messages=100, max_in_flight_requests=1
            ) as producer:
                receipts = await asyncio.gather(
                    *(producer.send("rocketmq-topic", f"m{i}".encode()) for i in range(count))
                )
            return receipts, server.batches

    receipts, batches = run(produce)
    assert sum(batches) == count and max(batches) == 100 and len(batches) >= 6
    # Each send gets its own ID and the offset after the previous message of its batch.
    assert sorted(r.offset for r in receipts) == list(range(count))
    assert len({r.message_id for r in receipts}) == count
    assert all(MESSAGE_ID.match(r.message_id) for r in receipts)


def test_an_answer_with_the_wrong_number_of_entries_fails_its_sends() -> None:
    async def produce() -> list[Any]:
        async with one_entry_server() as server:
            server.entries = 2
            async with BatchingProducer(f"127.0.0.1:{server.port}") as producer:
                return await asyncio.gather(
                    *(producer.send("rocketmq-topic", b"x") for _ in range(3)),
                    return_exceptions=True,
                )

    results = run(produce)
    assert len(results) == 3
    for error in results:
        assert isinstance(error, BrokerError), error
        assert "2 entries for 3 messages" in error.message
