"""A synchronous pull consumer: the caller names each queue and offset.

Reading goes through Skiff's record API (skiff.records.v1 Fetch): one call
returns up to tens of thousands of stored records, decoded here (see
``records``). Routes and offsets use apache.rocketmq.v2: QueryRoute for a
topic's readable queues, QueryOffset for a queue's min and max offsets (or the
first offset at a time), and GetOffset / UpdateOffset for offsets a consumer
group keeps on the broker.

Offsets follow RocketMQ: a queue holds ``[min_offset, max_offset)``;
``max_offset`` is the offset the next message will get. :meth:`PullConsumer.read_range`
iterates over a bounded range and keeps the next fetch in flight (a gRPC
future) while the current one is decoded and handled.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Callable, Iterator
from typing import Any

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc

from ..endpoints import address_of, endpoints_of
from ..records.v1 import records_pb2 as rpb
from ..records.v1 import records_pb2_grpc
from ..wire.tag_expression import parse_tag_expression
from .channels import ClientTls
from .credentials import Credentials
from .errors import BrokerError, MessagingError
from .messaging import _timestamp
from .records import CorruptRecords, PulledMessage, decode_records
from .transport import BrokerClient, PendingCall

__all__ = [
    "DataLost",
    "FetchedRecords",
    "GroupQueues",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PulledMessage",
    "QueueRange",
]

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_BATCH_SIZE = 8192
# The broker refuses larger batches.
MAX_BATCH_SIZE = 65536
DEFAULT_MAX_BYTES = 4 * 1024 * 1024
MAX_LONG_POLL_S = 20.0
_READABLE = frozenset({pb.Permission.READ, pb.Permission.READ_WRITE})

log = logging.getLogger(__name__)


class DataLost(BrokerError):
    """Messages that were asked for are gone: retention deleted them.

    ``first_available`` is the queue's oldest offset now; read from there to go on.
    """

    code = "DATA_LOST"

    def __init__(self, topic: str, queue_id: int, offset: int, first_available: int) -> None:
        super().__init__(
            f"{topic}/{queue_id}: offsets {offset} to {first_available - 1} were deleted by "
            f"retention; start from offset {first_available} or later (or accept the loss)"
        )
        self.topic = topic
        self.queue_id = queue_id
        self.offset = offset
        self.first_available = first_available


class PullStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MESSAGE = "NO_NEW_MESSAGE"  # the offset is the queue's end (or nothing matched)
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"  # below the queue's min offset: deleted
    OFFSET_TOO_LARGE = "OFFSET_TOO_LARGE"  # past the queue's end


@dataclasses.dataclass(frozen=True, slots=True)
class PullResult:
    status: PullStatus
    messages: list[PulledMessage]
    # Where to pull next: after the last message, or the queue's min offset when the
    # offset was too small, or its max offset when it was too large.
    next_offset: int


@dataclasses.dataclass(frozen=True, slots=True)
class FetchedRecords:
    """One fetch's answer, undecoded: records ``offset`` up to ``next_offset`` (exclusive)
    of one queue, back to back in the commit-log layout (see ``records``)."""

    topic: str
    queue_id: int
    offset: int
    records: bytes
    next_offset: int


@dataclasses.dataclass(frozen=True, slots=True)
class QueueRange:
    queue_id: int
    min_offset: int
    max_offset: int  # exclusive: the next message's offset


@dataclasses.dataclass(frozen=True, slots=True)
class GroupQueues:
    """A topic's readable queues on one group, and where that group serves reads now."""

    group: str
    endpoint: str
    queue_ids: tuple[int, ...]


def _status_error(status: pb.Status) -> MessagingError:
    name = pb.Code.Name(status.code) if status.code in pb.Code.values() else str(status.code)
    return MessagingError(status.code, name, status.message or name)


_PULL_STATUSES = {
    rpb.FetchResponse.FOUND: PullStatus.FOUND,
    rpb.FetchResponse.OFFSET_TOO_SMALL: PullStatus.OFFSET_TOO_SMALL,
    rpb.FetchResponse.OFFSET_TOO_LARGE: PullStatus.OFFSET_TOO_LARGE,
}


def _status_of(response: rpb.FetchResponse) -> PullStatus:
    """What a fetch's answer means to a puller (anything else: nothing new there)."""
    return _PULL_STATUSES.get(response.result, PullStatus.NO_NEW_MESSAGE)


class PullConsumer(BrokerClient):
    """``with PullConsumer("127.0.0.1:8081") as consumer: consumer.pull("orders", 0, 0)``.

    One instance may be used from several threads.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        group: str = "",
        timeout: float = DEFAULT_TIMEOUT_S,
        namespace: str = "",
        check_crc: bool = False,
        tls: ClientTls | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        """``check_crc`` checks each body's CRC on arrival too; the broker checks
        every record before it sends it."""
        # ``credentials`` sign every request (needed where the broker enables auth).
        super().__init__(
            endpoint,
            client_kind="skiff-pull",
            timeout=timeout,
            tls=tls,
            credentials=credentials,
            namespace=namespace,
        )
        self._check_crc = check_crc
        self.group = group
        self._namespace = namespace
        self._stub = service_pb2_grpc.MessagingServiceStub(self._transport.channel)
        self._records = records_pb2_grpc.RecordServiceStub(self._transport.channel)

    @property
    def checks_crc(self) -> bool:
        """Whether this consumer checks each body's CRC on arrival (see ``__init__``)."""
        return self._check_crc

    def _resource(self, name: str) -> pb.Resource:
        return pb.Resource(name=name, resource_namespace=self._namespace)

    def _queue(self, topic: str, queue_id: int) -> pb.MessageQueue:
        return pb.MessageQueue(topic=self._resource(topic), id=queue_id)

    def _unary(self, method: Callable[..., Any], request: object) -> Any:
        response = self._transport.call(method, request)
        if response.status.code != pb.Code.OK:
            raise _status_error(response.status)
        return response

    # -- queues and offsets -------------------------------------------------

    def queue_ids(self, topic: str) -> list[int]:
        """The topic's readable queue IDs on this broker's group, in order.

        In a cluster the route also lists other groups' queues (same IDs, other
        brokers); the broker names its own group first, and only those are read here.
        """
        request = spb.QueryRouteRequest(topic=self._resource(topic))
        response = self._unary(self._stub.QueryRoute, request)
        queues = response.message_queues
        own = queues[0].broker.name if queues else ""
        return sorted({q.id for q in queues if q.permission in _READABLE and q.broker.name == own})

    def group_queues(self, topic: str) -> list[GroupQueues]:
        """The topic's readable queues on every group the route names, this broker's first.

        A group is served by its master, or by a replica while it has none; a lone
        broker names only itself, at the address it was reached at.
        """
        request = spb.QueryRouteRequest(
            topic=self._resource(topic), endpoints=endpoints_of(self.endpoint)
        )
        response = self._unary(self._stub.QueryRoute, request)
        found: dict[str, tuple[str, set[int]]] = {}
        for queue in response.message_queues:
            address = address_of(queue.broker.endpoints) or self.endpoint
            if queue.permission in _READABLE:
                found.setdefault(queue.broker.name, (address, set()))[1].add(queue.id)
        return [
            GroupQueues(group, address, tuple(sorted(ids)))
            for group, (address, ids) in found.items()
        ]

    def _query_offset(
        self, topic: str, queue_id: int, policy: int, timestamp_ms: int | None = None
    ) -> int:
        request = spb.QueryOffsetRequest(
            message_queue=self._queue(topic, queue_id), query_offset_policy=policy
        )
        if timestamp_ms is not None:
            request.timestamp.CopyFrom(_timestamp(timestamp_ms))
        return self._unary(self._stub.QueryOffset, request).offset

    def min_offset(self, topic: str, queue_id: int) -> int:
        """The oldest offset still stored in the queue."""
        return self._query_offset(topic, queue_id, pb.QueryOffsetPolicy.BEGINNING)

    def max_offset(self, topic: str, queue_id: int) -> int:
        """The offset the queue's next message will get (an exclusive end)."""
        return self._query_offset(topic, queue_id, pb.QueryOffsetPolicy.END)

    def offset_for_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first offset stored at or after ``timestamp_ms`` (the max offset if none)."""
        return self._query_offset(topic, queue_id, pb.QueryOffsetPolicy.TIMESTAMP, timestamp_ms)

    def queue_ranges(self, topic: str) -> list[QueueRange]:
        """Min and max offsets of every readable queue of ``topic``."""
        return [
            QueueRange(q, self.min_offset(topic, q), self.max_offset(topic, q))
            for q in self.queue_ids(topic)
        ]

    def committed_offset(self, topic: str, queue_id: int, *, group: str = "") -> int | None:
        """The offset the consumer group stored on the broker; None if it has none."""
        request = spb.GetOffsetRequest(
            group=self._resource(group or self._require_group()),
            message_queue=self._queue(topic, queue_id),
        )
        try:
            return self._unary(self._stub.GetOffset, request).offset
        except MessagingError as exc:
            if exc.number == pb.Code.OFFSET_NOT_FOUND:
                return None
            raise

    def commit_offset(self, topic: str, queue_id: int, offset: int, *, group: str = "") -> None:
        """Store ``offset`` (the next one to read) for the consumer group on the broker."""
        request = spb.UpdateOffsetRequest(
            group=self._resource(group or self._require_group()),
            message_queue=self._queue(topic, queue_id),
            offset=offset,
        )
        self._unary(self._stub.UpdateOffset, request)

    def _require_group(self) -> str:
        if not self.group:
            raise ValueError("no consumer group: pass group= here or to PullConsumer()")
        return self.group

    # -- pulling ------------------------------------------------------------

    def pull(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        max_messages: int = 32,
        max_bytes: int = DEFAULT_MAX_BYTES,
        wait_s: float = 0.0,
        tag_expression: str = "*",
    ) -> PullResult:
        """Up to ``max_messages`` messages (about ``max_bytes``) of one queue from ``offset``.

        With ``wait_s`` > 0 and no message at ``offset`` yet, the broker holds the
        request until one arrives or the time is up (long polling).
        """
        tags = parse_tag_expression(tag_expression)
        response = self._fetch(
            topic, queue_id, offset, max_messages, max_bytes, wait_s, tags
        ).result()
        return self._result(response, topic, queue_id, offset, tags)

    def _fetch(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_messages: int,
        max_bytes: int = DEFAULT_MAX_BYTES,
        wait_s: float = 0.0,
        tags: frozenset[str] | None = None,
    ) -> PendingCall:
        """Start a fetch; ``result()`` of what is returned waits for its response."""
        if not 0 < max_messages <= MAX_BATCH_SIZE:
            raise ValueError(f"max_messages must be 1 to {MAX_BATCH_SIZE}")
        if offset < 0:
            raise ValueError("an offset cannot be negative")
        wait_s = min(max(wait_s, 0.0), MAX_LONG_POLL_S)
        request = rpb.FetchRequest(
            topic=topic,
            queue_id=queue_id,
            offset=offset,
            max_records=max_messages,
            max_bytes=max_bytes,
            tags=sorted(tags) if tags is not None else (),
            wait_ms=int(wait_s * 1000),
        )
        # gRPC carries the call on its own threads; nothing here waits for it.
        return self._transport.start(
            self._records.Fetch, request, timeout=wait_s + self._transport.timeout
        )

    def _messages(
        self, records: bytes, topic: str, queue_id: int, offset: int, next_offset: int
    ) -> list[PulledMessage]:
        try:
            return decode_records(records, topic=topic, check_crc=self._check_crc)
        except CorruptRecords as exc:
            log.error(
                "%s/%d: skipping offsets after %d up to %d: %s",
                topic,
                queue_id,
                exc.messages[-1].queue_offset if exc.messages else offset - 1,
                next_offset - 1,
                exc,
            )
            return exc.messages

    def _result(
        self,
        response: rpb.FetchResponse,
        topic: str,
        queue_id: int,
        offset: int,
        tags: frozenset[str] | None,
    ) -> PullResult:
        pull_status = _status_of(response)
        if pull_status is PullStatus.FOUND:
            messages = self._messages(
                response.records, topic, queue_id, offset, response.next_offset
            )
            if tags is not None:
                # The broker filters on tag hashes; two tags may share one.
                messages = [m for m in messages if m.tag in tags]
            return PullResult(PullStatus.FOUND, messages, response.next_offset)
        return PullResult(pull_status, [], response.next_offset)

    def read_range(
        self,
        topic: str,
        queue_id: int,
        start: int,
        end: int,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        skip_lost: bool = False,
        on_lost: Callable[[DataLost], None] | None = None,
    ) -> Iterator[PulledMessage]:
        """The messages of one queue with ``start <= offset < end``, in offset order.

        The next fetch is in flight while the current batch is decoded and handled.
        Offsets retention already deleted raise :class:`DataLost`; with
        ``skip_lost`` the read goes on from the oldest offset still stored, after
        calling ``on_lost`` (or logging a warning). The range ends early if the
        queue ends before ``end``. Offsets the broker skipped (records that failed
        their CRC) are simply absent.
        """
        for fetched in self.fetch_range(
            topic, queue_id, start, end, batch_size=batch_size, skip_lost=skip_lost, on_lost=on_lost
        ):
            messages = self.decode(fetched)
            if messages and messages[-1].queue_offset >= end:
                messages = [m for m in messages if m.queue_offset < end]
            yield from messages

    def fetch_range(
        self,
        topic: str,
        queue_id: int,
        start: int,
        end: int,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        skip_lost: bool = False,
        on_lost: Callable[[DataLost], None] | None = None,
    ) -> Iterator[FetchedRecords]:
        """:meth:`read_range` before decoding: each fetch's records as the broker sent them.

        For readers that decode records their own way (into columns, say); :meth:`decode`
        gives the messages. The last fetch may hold records at or past ``end``.
        """
        if start >= end:
            return
        batch_size = max(1, min(batch_size, MAX_BATCH_SIZE))

        def pull_from(offset: int) -> PendingCall:
            return self._fetch(topic, queue_id, offset, min(batch_size, end - offset))

        offset = start
        pending: PendingCall | None = pull_from(offset)
        try:
            while pending is not None:
                response = pending.result()
                pull_status = _status_of(response)
                found = pull_status is PullStatus.FOUND
                if found and response.next_offset < end:
                    # The next fetch travels while this one is decoded.
                    pending = pull_from(response.next_offset)
                else:
                    pending = None
                if pull_status is PullStatus.OFFSET_TOO_SMALL:
                    lost = DataLost(topic, queue_id, offset, response.next_offset)
                    if not skip_lost:
                        raise lost
                    if on_lost is not None:
                        on_lost(lost)
                    else:
                        log.warning("%s", lost.message)
                    offset = response.next_offset
                    if offset >= end:
                        return
                    pending = pull_from(offset)
                    continue
                if pull_status is PullStatus.NO_NEW_MESSAGE and offset < response.next_offset < end:
                    # Nothing readable here (a stretch of skipped records): step past it.
                    offset = response.next_offset
                    pending = pull_from(offset)
                    continue
                if not found:
                    return
                yield FetchedRecords(
                    topic, queue_id, offset, response.records, response.next_offset
                )
                offset = response.next_offset
        finally:
            if pending is not None:
                pending.cancel()

    def decode(self, fetched: FetchedRecords) -> list[PulledMessage]:
        """The messages of one fetch (records whose framing breaks are logged and left out)."""
        return self._messages(
            fetched.records, fetched.topic, fetched.queue_id, fetched.offset, fetched.next_offset
        )
