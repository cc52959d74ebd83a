"""A synchronous client of the apache.rocketmq.v2 messaging protocol, for the CLI.

It speaks the protocol directly with the official gRPC stubs, as the RocketMQ 5
clients do: SendMessage to produce, ReceiveMessage and AckMessage to consume
(pop with an invisible time). No routes, telemetry or heartbeats: one broker.

A received body flagged compressed that does not inflate (the broker says so,
or the client finds it) is given as its stored bytes with ``body_problem`` set
and a WARNING logged: the messages after it still arrive.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from itertools import count, repeat
from typing import NamedTuple

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc

from ..endpoints import address_of, endpoints_of
from ..wire import property_names as prop
from ..wire.compressed_body import CompressedBodyError, inflate
from .channels import ClientTls
from .credentials import Credentials
from .errors import MessagingError
from .message_id import new_message_id
from .transport import BrokerClient, PendingCall

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 10.0
# How long received messages stay hidden from other consumers until acked.
DEFAULT_INVISIBLE_S = 30
# Brokers hold a long poll for at most this long (RocketMQ's proxy: 20 s).
MAX_LONG_POLL_S = 20.0
_SUCCESS = {pb.Code.OK, pb.Code.MULTIPLE_RESULTS}
# A compressed body inflating past this is given as received. A Skiff broker sends
# GZIP only for bodies within its maximum message size; the cap keeps a "zlib bomb"
# from any other source from costing the client more memory than this.
MAX_INFLATED_BODY = 128 * 1024 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class OutgoingMessage:
    topic: str
    body: bytes
    tag: str = ""
    keys: tuple[str, ...] = ()
    properties: dict[str, str] = dataclasses.field(default_factory=dict)
    message_group: str = ""  # FIFO topics: messages of one group are consumed in order
    deliver_at_ms: int = 0  # DELAY topics: not delivered before this time
    message_id: str = dataclasses.field(default_factory=new_message_id)


class SendReceipt(NamedTuple):
    """What the broker answered for one stored message. A named tuple: a producer makes
    one for every message it sends, and a tuple is the cheapest immutable record."""

    message_id: str
    offset: int  # the message's offset in its queue


def consecutive_receipts(message_ids: Iterable[str], first_offset: int) -> list[SendReceipt]:
    """The receipts of messages stored at consecutive offsets from ``first_offset``."""
    # tuple.__new__ straight from C, instead of the named tuple's own __new__ a message.
    return list(map(tuple.__new__, repeat(SendReceipt), zip(message_ids, count(first_offset))))


@dataclasses.dataclass(frozen=True, slots=True)
class ReceivedMessage:
    topic: str
    queue_id: int
    queue_offset: int
    message_id: str
    tag: str
    keys: tuple[str, ...]
    message_group: str
    properties: dict[str, str]
    body: bytes
    born_timestamp: int
    store_timestamp: int
    delivery_attempt: int
    receipt_handle: str
    # Why ``body`` is the stored bytes of a body flagged compressed; "" when readable.
    body_problem: str = ""


_WRITABLE = (pb.Permission.WRITE, pb.Permission.READ_WRITE)


def _timestamp(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def _millis(ts: Timestamp) -> int:
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def _check(status: pb.Status) -> None:
    if status.code not in _SUCCESS:
        name = pb.Code.Name(status.code) if status.code in pb.Code.values() else str(status.code)
        raise MessagingError(status.code, name, status.message or name)


def _decoded_body(message: pb.Message) -> tuple[bytes, str]:
    """The body as the producer gave it, or as stored with the reason it cannot be."""
    body = message.body
    system = message.system_properties
    problem = message.user_properties.get(prop.UNINFLATABLE_BODY, "")
    if system.body_encoding == pb.Encoding.GZIP:
        try:
            return inflate(body, MAX_INFLATED_BODY), ""
        except CompressedBodyError as exc:
            problem = str(exc)
    if problem:
        log.warning(
            "message %s of %s (queue %d, offset %d): %s; its body is given as stored",
            system.message_id,
            message.topic.name,
            system.queue_id,
            system.queue_offset,
            problem,
        )
    return body, problem


class MessagingClient(BrokerClient):
    def __init__(
        self,
        endpoint: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        tls: ClientTls | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        """``tls``: how to connect (default: SKIFF_TLS settings of the command, or plaintext);
        ``credentials`` sign every request (needed where the broker enables auth)."""
        super().__init__(
            endpoint, client_kind="skiff-cli", timeout=timeout, tls=tls, credentials=credentials
        )
        self._stub = service_pb2_grpc.MessagingServiceStub(self._transport.channel)

    # -- routes -------------------------------------------------------------

    def writable_groups(self, topic: str) -> dict[str, str]:
        """Group name → endpoint of every group with writable queues of ``topic``.

        In a cluster any broker names every group; a lone broker names itself.
        """
        request = spb.QueryRouteRequest(
            topic=pb.Resource(name=topic), endpoints=endpoints_of(self.endpoint)
        )
        response = self._transport.call(self._stub.QueryRoute, request)
        _check(response.status)
        groups: dict[str, str] = {}
        for queue in response.message_queues:
            address = address_of(queue.broker.endpoints)
            if queue.permission in _WRITABLE and address is not None:
                groups.setdefault(queue.broker.name, address)
        return groups

    # -- producing ----------------------------------------------------------

    def send(self, messages: Sequence[OutgoingMessage]) -> list[SendReceipt]:
        """Send messages of one topic in one request (the broker puts them in one queue,
        in order); raises if any is refused."""
        request = spb.SendMessageRequest(messages=[self._to_proto(m) for m in messages])
        return self._receipts(self._transport.call(self._stub.SendMessage, request))

    def send_each(
        self, messages: Iterable[OutgoingMessage], *, in_flight: int = 64
    ) -> Iterator[SendReceipt]:
        """Send one message per request, as the official clients do (the broker spreads
        them over the write queues), with up to ``in_flight`` requests outstanding.

        Receipts come in the order of ``messages``; the first refusal raises. Messages
        may be stored out of order: use :meth:`send` for a message group.
        """
        pending: collections.deque[PendingCall] = collections.deque()
        try:
            for message in messages:
                request = spb.SendMessageRequest(messages=[self._to_proto(message)])
                pending.append(self._transport.start(self._stub.SendMessage, request))
                if len(pending) >= in_flight:
                    yield from self._receipts(pending.popleft().result())
            while pending:
                yield from self._receipts(pending.popleft().result())
        finally:
            for future in pending:
                future.cancel()

    @staticmethod
    def _receipts(response: spb.SendMessageResponse) -> list[SendReceipt]:
        for entry in response.entries:
            _check(entry.status)
        _check(response.status)
        return [SendReceipt(e.message_id, e.offset) for e in response.entries]

    @staticmethod
    def _to_proto(message: OutgoingMessage) -> pb.Message:
        system = pb.SystemProperties(
            message_id=message.message_id,
            body_encoding=pb.Encoding.IDENTITY,
            born_timestamp=_timestamp(int(time.time() * 1000)),
            keys=message.keys,
        )
        if message.tag:
            system.tag = message.tag
        if message.message_group:
            system.message_group = message.message_group
            system.message_type = pb.MessageType.FIFO
        elif message.deliver_at_ms:
            system.delivery_timestamp.CopyFrom(_timestamp(message.deliver_at_ms))
            system.message_type = pb.MessageType.DELAY
        else:
            system.message_type = pb.MessageType.NORMAL
        return pb.Message(
            topic=pb.Resource(name=message.topic),
            user_properties=message.properties,
            system_properties=system,
            body=message.body,
        )

    # -- consuming ----------------------------------------------------------

    def receive(
        self,
        group: str,
        topic: str,
        *,
        max_messages: int = 32,
        tag_expression: str = "*",
        sql92: str | None = None,
        wait_s: float = MAX_LONG_POLL_S,
        invisible_s: int = DEFAULT_INVISIBLE_S,
    ) -> list[ReceivedMessage]:
        """Messages for ``group``, waiting up to ``wait_s`` for one to arrive; [] if none.

        ``sql92``, if given, filters by properties instead of ``tag_expression``."""
        poll_ms = int(max(0.0, min(wait_s, MAX_LONG_POLL_S)) * 1000)
        request = spb.ReceiveMessageRequest(
            group=pb.Resource(name=group),
            message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
            filter_expression=(
                pb.FilterExpression(type=pb.FilterType.TAG, expression=tag_expression)
                if sql92 is None
                else pb.FilterExpression(type=pb.FilterType.SQL, expression=sql92)
            ),
            batch_size=max_messages,
            invisible_duration=Duration(seconds=invisible_s),
            auto_renew=False,
            long_polling_timeout=Duration(
                seconds=poll_ms // 1000, nanos=poll_ms % 1000 * 1_000_000
            ),
        )
        received: list[ReceivedMessage] = []
        status = None
        frames = self._transport.stream(
            self._stub.ReceiveMessage, request, timeout=poll_ms / 1000 + self._transport.timeout
        )
        for frame in frames:
            content = frame.WhichOneof("content")
            if content == "status":
                status = frame.status
            elif content == "message":
                received.append(self._from_proto(frame.message))
        if status is not None and status.code != pb.Code.MESSAGE_NOT_FOUND:
            _check(status)
        return received

    @staticmethod
    def _from_proto(message: pb.Message) -> ReceivedMessage:
        system = message.system_properties
        return ReceivedMessage(
            **stored_fields(message),
            delivery_attempt=system.delivery_attempt,
            receipt_handle=system.receipt_handle,
        )

    def forward_to_dead_letter(self, group: str, topic: str, message: ReceivedMessage) -> None:
        """Give up on a received message: the broker moves it to ``%DLQ%<group>`` now."""
        request = spb.ForwardMessageToDeadLetterQueueRequest(
            group=pb.Resource(name=group),
            topic=pb.Resource(name=topic),
            receipt_handle=message.receipt_handle,
            message_id=message.message_id,
            delivery_attempt=message.delivery_attempt,
        )
        _check(self._transport.call(self._stub.ForwardMessageToDeadLetterQueue, request).status)

    def ack(self, group: str, topic: str, messages: Sequence[ReceivedMessage]) -> None:
        """Acknowledge received messages: they are consumed and not delivered again."""
        if not messages:
            return
        request = spb.AckMessageRequest(
            group=pb.Resource(name=group),
            topic=pb.Resource(name=topic),
            entries=[
                spb.AckMessageEntry(message_id=m.message_id, receipt_handle=m.receipt_handle)
                for m in messages
            ],
        )
        response = self._transport.call(self._stub.AckMessage, request)
        for entry in response.entries:
            _check(entry.status)
        _check(response.status)


def stored_fields(message: pb.Message) -> dict:
    """What the broker stored of a message, as keyword arguments of the client's message types."""
    system = message.system_properties
    body, problem = _decoded_body(message)
    properties = dict(message.user_properties)
    properties.pop(prop.UNINFLATABLE_BODY, None)
    return {
        "topic": message.topic.name,
        "queue_id": system.queue_id,
        "queue_offset": system.queue_offset,
        "message_id": system.message_id,
        "tag": system.tag,
        "keys": tuple(system.keys),
        "message_group": system.message_group,
        "properties": properties,
        "body": body,
        "body_problem": problem,
        "born_timestamp": _millis(system.born_timestamp),
        "store_timestamp": _millis(system.store_timestamp),
    }
