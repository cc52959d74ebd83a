"""An asyncio producer that coalesces concurrent sends into batched requests.

Kafka's producer model. ``send()`` puts a message into the open batch of its
topic (or, for a FIFO message, of its message group) and waits for the broker's
answer. A batch goes out as one request when it is full (``batch_max_messages``
or ``batch_max_bytes``) or when its first message has waited ``linger_ms``; the
broker stores a request as one contiguous append to one queue.

Against a Skiff broker a batch without a message group travels as records the
producer encoded itself (skiff.records.v1 Append), which spares the broker a
protobuf conversion per message. FIFO batches, and every batch to a broker
without that call (Apache RocketMQ), go as apache.rocketmq.v2 SendMessage,
answered one entry per message. Messages are checked here before they join a
batch, so that one bad message never fails the others of its request; should
the broker still refuse an append (a body over its size limit), the batch is
sent again as SendMessage, which refuses the bad messages one by one.

At most ``max_in_flight_requests`` requests are outstanding. A batch that is
due meanwhile keeps filling up, and once it is full further ``send()`` callers
for it wait (backpressure), so the producer holds at most one open batch per
topic or group plus the requests in flight. A message group never has two
requests in flight, so its messages are stored in the order of the ``send()``
calls.

Each message ID is made here in the official clients' format, before the first
attempt. There are no retries: a failed request fails each of its ``send()``
calls with the broker's status, and the caller decides whether to send again.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import time
import zlib
from collections.abc import Iterable, Mapping, Sequence

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc

from ..endpoints import address_of, endpoints_of
from ..records.v1 import records_pb2 as rpb
from ..wire import property_names as prop
from ..wire.properties import encode_properties, id_only_properties
from ..wire.record_codec import client_record_pieces
from .channels import ClientTls
from .credentials import Credentials
from .encoded_append import APPEND_METHOD, EncodedAppendRequest
from .errors import (
    BrokerError,
    BrokerUnavailable,
    InvalidArgument,
    MessagingError,
    SkiffError,
)
from .message_id import new_message_id, new_message_ids
from .messaging import SendReceipt
from .records import topic_field
from .transport import AioTransport

__all__ = ["BatchingProducer", "ProducerClosed", "ProducerStats", "SendReceipt"]

DEFAULT_LINGER_MS = 5.0
DEFAULT_BATCH_MAX_MESSAGES = 256
DEFAULT_BATCH_MAX_BYTES = 1024 * 1024
DEFAULT_MAX_IN_FLIGHT_REQUESTS = 4
DEFAULT_REQUEST_TIMEOUT_S = 10.0
# What a message adds to a request beyond its body, topic, tag, keys and
# properties: ID, timestamps, type and protobuf framing (an over-estimate).
_MESSAGE_OVERHEAD_BYTES = 96
_SUCCESS = frozenset({pb.Code.OK, pb.Code.MULTIPLE_RESULTS})
_WRITABLE = frozenset({pb.Permission.WRITE, pb.Permission.READ_WRITE})

# (topic, message group); the group is "" for messages without one.
BatchKey = tuple[str, str]


class ProducerClosed(SkiffError):
    """send() was called after close()."""

    code = "CLOSED"


@dataclasses.dataclass(frozen=True, slots=True)
class ProducerStats:
    buffered_messages: int  # accepted into a batch (open or in flight), not yet answered
    waiting_senders: int  # send() calls waiting for room in a full batch
    in_flight_requests: int
    requests_sent: int  # SendMessage requests answered or failed so far
    messages_sent: int  # messages in those requests


class _Pending:
    """One send() call: the message and the future its caller awaits."""

    __slots__ = (
        "body",
        "future",
        "group",
        "keys",
        "message_id",
        "properties",
        "record_properties",
        "size",
        "tag",
    )

    def __init__(
        self,
        body: bytes,
        tag: str,
        keys: tuple[str, ...],
        properties: dict[str, str],
        group: str,
        future: asyncio.Future[SendReceipt],
        size: int,
        message_id: str,
    ) -> None:
        self.body = body
        self.tag = tag
        self.keys = keys
        self.properties = properties
        self.group = group
        self.message_id = message_id
        self.future = future
        self.size = size
        if not (tag or keys or properties):
            # The usual case, quickly: nothing but the ID to check and encode.
            if not body:
                raise InvalidArgument("message not sent: message body must not be empty")
            self.record_properties = id_only_properties(self.message_id)
            return
        # The properties as a stored record holds them: the user's and the broker's own.
        stored = dict(properties)
        if tag:
            stored[prop.TAGS] = tag
        if keys:
            stored[prop.KEYS] = " ".join(keys)
        stored[prop.UNIQ_KEY] = self.message_id
        problem = prop.producer_property_problem(stored)
        if problem is None and any(not k or any(c.isspace() for c in k) for k in keys):
            problem = "message keys must be non-empty without whitespace"
        if problem is None and not body:
            problem = "message body must not be empty"
        if problem is not None:
            raise InvalidArgument(f"message not sent: {problem}")
        try:
            self.record_properties = encode_properties(stored)
        except ValueError as exc:
            raise InvalidArgument(f"message not sent: {exc}") from None


class _Batch:
    __slots__ = ("closed", "items", "key", "linger", "size")

    def __init__(self, key: BatchKey) -> None:
        self.key = key
        self.items: list[_Pending] = []
        self.size = 0
        self.closed = False  # full: takes no more messages
        self.linger: asyncio.TimerHandle | None = None


class _Connection:
    """One broker the producer sends to, over its transport's channel to it."""

    def __init__(self, endpoint: str, channel: grpc.aio.Channel) -> None:
        self.endpoint = endpoint
        self.stub = service_pb2_grpc.MessagingServiceStub(channel)
        # Append with the request already in its wire form (see client/encoded_append.py).
        self.append = channel.unary_unary(
            APPEND_METHOD,
            request_serializer=EncodedAppendRequest.SerializeToString,
            response_deserializer=rpb.AppendResponse.FromString,
        )
        # Until the broker says it has no record API (it is not Skiff).
        self.appends = True


def _status_error(status: pb.Status) -> MessagingError:
    name = pb.Code.Name(status.code) if status.code in pb.Code.values() else str(status.code)
    return MessagingError(status.code, name, status.message or name)


def _copy_error(error: BaseException) -> BaseException:
    """A fresh exception like ``error`` for each caller.

    Raising one exception object in many tasks would grow its traceback with
    every caller's frames.
    """
    if isinstance(error, MessagingError):
        copy: BaseException = MessagingError(error.number, error.code, error.message)
    elif isinstance(error, SkiffError):
        copy = type(error)(error.message, error.code)
    else:
        copy = BrokerError(f"sending failed: {error!r}", type(error).__name__)
    copy.__cause__ = error.__cause__ if isinstance(error, SkiffError) else error
    return copy


def _stored_from(batch: _Batch, first_offset: int) -> None:
    """The batch was stored as one run of its queue from ``first_offset``."""
    for index, item in enumerate(batch.items):
        if not item.future.done():
            item.future.set_result(SendReceipt(item.message_id, first_offset + index))


def _fail(batch: _Batch, error: BaseException) -> None:
    """Every send of the batch that still waits fails with (a copy of) ``error``."""
    for item in batch.items:
        if not item.future.done():
            item.future.set_exception(_copy_error(error))


class BatchingProducer:
    """Send messages to a Skiff (or any RocketMQ 5 gRPC) broker in batches.

    Use it inside one event loop, as ``async with BatchingProducer(endpoint) as p``
    or by calling ``close()`` at the end. ``interceptors`` are grpc.aio client
    interceptors for every call (tracing, metrics); ``credentials`` sign every call.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        linger_ms: float = DEFAULT_LINGER_MS,
        batch_max_messages: int = DEFAULT_BATCH_MAX_MESSAGES,
        batch_max_bytes: int = DEFAULT_BATCH_MAX_BYTES,
        max_in_flight_requests: int = DEFAULT_MAX_IN_FLIGHT_REQUESTS,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        namespace: str = "",
        interceptors: Sequence[grpc.aio.ClientInterceptor] = (),
        tls: ClientTls | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        if linger_ms < 0:
            raise ValueError("linger_ms must be 0 or more")
        if batch_max_messages < 1 or batch_max_bytes < 1 or max_in_flight_requests < 1:
            raise ValueError(
                "batch_max_messages, batch_max_bytes and max_in_flight_requests must be positive"
            )
        if request_timeout_s <= 0:
            raise ValueError("request_timeout_s must be positive")
        self.endpoint = endpoint
        self._linger_s = linger_ms / 1000
        self._batch_max_messages = batch_max_messages
        self._batch_max_bytes = batch_max_bytes
        self._max_in_flight = max_in_flight_requests
        self._namespace = namespace
        # Every broker the producer reaches is connected to the same way; ``credentials``
        # sign every request (needed where the broker enables auth).
        self._transport = AioTransport(
            client_kind="skiff-producer",
            timeout=request_timeout_s,
            tls=tls,
            credentials=credentials,
            namespace=namespace,
            interceptors=interceptors,
        )

        self._open: dict[BatchKey, _Batch] = {}
        # Callers that found their batch full, in call order per key.
        self._waiting: dict[BatchKey, collections.deque[_Pending]] = {}
        # Keys whose open batch is due (full or lingered long enough), in the order they
        # became due: an ordered set.
        self._due: dict[BatchKey, None] = {}
        self._in_flight: set[_Batch] = set()
        # The loop keeps only weak references to tasks: these keep requests alive.
        self._request_tasks: set[asyncio.Task[None]] = set()
        self._groups_in_flight: set[BatchKey] = set()
        self._flushes = 0
        self._closed = False
        self._requests_sent = 0
        self._messages_sent = 0

        self._connections: dict[str, _Connection] = {}
        # topic -> the endpoints of every group with writable queues of it
        self._routes: dict[str, list[str]] = {}
        self._route_lookups: dict[str, asyncio.Task[list[str]]] = {}
        self._turn = 0
        self._topic_fields: dict[str, bytes] = {}
        self._event_loop: asyncio.AbstractEventLoop | None = None

    async def __aenter__(self) -> BatchingProducer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- the public calls ---------------------------------------------------

    async def send(
        self,
        topic: str,
        body: bytes,
        *,
        tag: str | None = None,
        keys: Iterable[str] = (),
        properties: Mapping[str, str] | None = None,
        message_group: str | None = None,
    ) -> SendReceipt:
        """Send one message; returns once the broker stored it (or raises its error).

        Raises :class:`MessagingError` with the broker's status for a refused
        message, :class:`BrokerUnavailable` when the broker cannot be reached.
        Cancelling a send() whose message is already in a request does not
        withdraw the message.
        """
        if isinstance(keys, str):
            raise TypeError("keys must be a sequence of strings, not one string")
        item = self._pending(
            topic,
            bytes(body),
            tag or "",
            tuple(keys),
            dict(properties) if properties else {},
            message_group or "",
            new_message_id(),
        )
        future = self._place(topic, item)
        self._dispatch()
        return await future

    async def send_batch(
        self,
        topic: str,
        bodies: Iterable[bytes],
        *,
        tag: str | None = None,
        properties: Mapping[str, str] | None = None,
        return_exceptions: bool = False,
    ) -> list[SendReceipt | BaseException]:
        """Send many messages of one topic that share a tag and properties.

        The same as awaiting :meth:`send` for each body at once, in order, for a
        fraction of the cost per message. Returns the receipts in the order of
        ``bodies``; the first failure is raised unless ``return_exceptions``,
        which puts each failure in its message's place instead (as
        ``asyncio.gather`` does). A message that fails the checks made before
        sending raises at once, and none of ``bodies`` is sent.
        """
        tag = tag or ""
        shared = dict(properties) if properties else {}
        bodies = list(bodies)
        # One call makes the batch's IDs: taking them one by one cost more than encoding.
        items = [
            self._pending(topic, bytes(body), tag, (), dict(shared), "", message_id)
            for body, message_id in zip(bodies, new_message_ids(len(bodies)), strict=True)
        ]
        futures = [self._place(topic, item) for item in items]
        self._dispatch()
        results: list[SendReceipt | BaseException] = []
        # Awaiting a settled future costs nothing: batches settle in order, so this
        # waits a few times per batch, not once per message.
        for future in futures:
            try:
                results.append(await future)
            except Exception as exc:
                if not return_exceptions:
                    raise
                results.append(exc)
        return results

    def _pending(
        self,
        topic: str,
        body: bytes,
        tag: str,
        keys: tuple[str, ...],
        properties: dict[str, str],
        group: str,
        message_id: str,
    ) -> _Pending:
        if self._closed:
            raise ProducerClosed("the producer is closed; create a new one to send")
        size = _MESSAGE_OVERHEAD_BYTES + len(body) + len(topic) + len(tag)
        if keys:
            size += sum(len(k) + 1 for k in keys)
        if properties:
            size += sum(len(k) + len(v) + 4 for k, v in properties.items())
        future: asyncio.Future[SendReceipt] = self._loop().create_future()
        return _Pending(body, tag, keys, properties, group, future, size, message_id)

    def _loop(self) -> asyncio.AbstractEventLoop:
        # Looked up once: the producer lives in one event loop.
        loop = self._event_loop
        if loop is None:
            loop = self._event_loop = asyncio.get_running_loop()
        return loop

    def _place(self, topic: str, item: _Pending) -> asyncio.Future[SendReceipt]:
        """Put ``item`` in its open batch, or behind the callers already waiting for room."""
        key = (topic, item.group)
        waiting = self._waiting.get(key)
        # Later callers queue behind earlier ones, so a group's order is the call order.
        if waiting or not self._add(key, item):
            self._waiting.setdefault(key, collections.deque()).append(item)
        return item.future

    async def flush(self) -> None:
        """Send every buffered message now and wait until all sends begun so far completed.

        The outcome of each message still goes to its own send() call.
        """
        self._flushes += 1
        try:
            futures = [
                item.future
                for batches in (self._open.values(), self._in_flight)
                for batch in batches
                for item in batch.items
            ]
            futures += [item.future for queue in self._waiting.values() for item in queue]
            for key in self._open:
                self._due[key] = None
            self._dispatch()
            pending = [f for f in futures if not f.done()]
            if pending:
                # asyncio.wait, unlike gather, leaves the callers' futures alone if
                # flush() itself is cancelled.
                await asyncio.wait(pending)
        finally:
            self._flushes -= 1

    async def close(self) -> None:
        """Refuse new sends, send what is buffered, and close the connections."""
        if self._closed:
            return
        self._closed = True
        await self.flush()
        # A message whose caller was cancelled after it joined a batch is still sent;
        # flush() did not wait for it, so wait here before closing the channels.
        while self._open or self._request_tasks:
            self._due.update(dict.fromkeys(self._open))
            self._dispatch()
            await asyncio.wait(set(self._request_tasks))
        self._waiting.clear()  # only callers that were cancelled while waiting
        for lookup in self._route_lookups.values():
            lookup.cancel()
        self._connections.clear()
        await self._transport.close()

    def stats(self) -> ProducerStats:
        return ProducerStats(
            buffered_messages=sum(len(b.items) for b in self._open.values())
            + sum(len(b.items) for b in self._in_flight),
            waiting_senders=sum(len(q) for q in self._waiting.values()),
            in_flight_requests=len(self._in_flight),
            requests_sent=self._requests_sent,
            messages_sent=self._messages_sent,
        )

    # -- batching -----------------------------------------------------------

    def _add(self, key: BatchKey, item: _Pending) -> bool:
        """Put ``item`` into the open batch of ``key``; False if that batch is full.

        It only marks batches due; the caller then runs ``_dispatch``.
        """
        batch = self._open.get(key)
        if batch is None:
            batch = self._open[key] = _Batch(key)
        elif batch.closed:
            return False
        elif batch.size + item.size > self._batch_max_bytes:
            batch.closed = True
            self._due[key] = None
            return False
        batch.items.append(item)
        batch.size += item.size
        if len(batch.items) >= self._batch_max_messages or batch.size >= self._batch_max_bytes:
            batch.closed = True
            self._due[key] = None
        elif len(batch.items) == 1:
            if self._flushes:
                self._due[key] = None
            else:
                # linger 0 still waits for the loop's next turn, so the sends of
                # the current turn share a request.
                batch.linger = asyncio.get_running_loop().call_later(
                    self._linger_s, self._linger_over, batch
                )
        return True

    def _linger_over(self, batch: _Batch) -> None:
        batch.linger = None
        if self._open.get(batch.key) is batch:
            self._due[batch.key] = None
            self._dispatch()

    def _next_due(self) -> BatchKey | None:
        for key in self._due:
            if key not in self._groups_in_flight:
                return key
        return None

    def _dispatch(self) -> None:
        """Start requests for due batches while the in-flight limit allows."""
        while len(self._in_flight) < self._max_in_flight:
            key = self._next_due()
            if key is None:
                break
            del self._due[key]
            batch = self._open.pop(key)
            self._start_request(batch)
            self._admit_waiting(key)

    def _admit_waiting(self, key: BatchKey) -> None:
        """Move waiting callers, in order, into the new open batch of ``key``."""
        waiting = self._waiting.get(key)
        if waiting is None:
            return
        while waiting:
            item = waiting[0]
            # A caller cancelled while waiting has nothing left to send.
            if not (item.future.done() or self._add(key, item)):
                break
            waiting.popleft()
        if not waiting:
            del self._waiting[key]

    def _start_request(self, batch: _Batch) -> None:
        if batch.linger is not None:
            batch.linger.cancel()
            batch.linger = None
        self._in_flight.add(batch)
        if batch.key[1]:
            self._groups_in_flight.add(batch.key)
        task = asyncio.get_running_loop().create_task(self._request(batch))
        self._request_tasks.add(task)
        task.add_done_callback(self._request_tasks.discard)

    # -- requests -----------------------------------------------------------

    async def _request(self, batch: _Batch) -> None:
        try:
            connection = await self._connection_for(batch.key)
            if not batch.key[1] and connection.appends and await self._append(connection, batch):
                return
            response = await self._transport.call(
                connection.endpoint, connection.stub.SendMessage, self._request_of(batch)
            )
            self._settle(batch, response)
        except BaseException as exc:
            if isinstance(exc, BrokerUnavailable):
                # The broker may have moved: ask for the route again next time.
                self._routes.pop(batch.key[0], None)
            _fail(batch, exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            self._requests_sent += 1
            self._messages_sent += len(batch.items)
            self._in_flight.discard(batch)
            self._groups_in_flight.discard(batch.key)
            self._dispatch()

    async def _append(self, connection: _Connection, batch: _Batch) -> bool:
        """Send ``batch`` as encoded records; False if it must go as SendMessage instead."""
        topic = batch.key[0]
        field = self._topic_fields.get(topic)
        if field is None:
            field = self._topic_fields[topic] = topic_field(topic)
        pieces: list[bytes] = []
        length = client_record_pieces(
            pieces,
            field,
            [(item.body, item.record_properties) for item in batch.items],
            int(time.time() * 1000),
        )
        request = EncodedAppendRequest(topic, pieces, length)
        try:
            response = await self._transport.call(connection.endpoint, connection.append, request)
        except InvalidArgument:
            if len(batch.items) == 1:
                raise
            # SendMessage answers message by message: only the bad ones fail.
            return False
        except BrokerError as exc:
            if exc.code != grpc.StatusCode.UNIMPLEMENTED.name:
                raise
            connection.appends = False
            return False
        if response.status == rpb.AppendResponse.STORED:
            _stored_from(batch, response.first_offset)
            return True
        # Stored, but not as durable as asked: what SendMessage answers in that case.
        code = (
            pb.Code.MASTER_PERSISTENCE_TIMEOUT
            if response.status == rpb.AppendResponse.FLUSH_DISK_TIMEOUT
            else pb.Code.SLAVE_PERSISTENCE_TIMEOUT
        )
        _fail(batch, MessagingError(code, pb.Code.Name(code), response.message))
        return True

    def _request_of(self, batch: _Batch) -> spb.SendMessageRequest:
        topic, group = batch.key
        resource = pb.Resource(name=topic, resource_namespace=self._namespace)
        message_type = pb.MessageType.FIFO if group else pb.MessageType.NORMAL
        identity = pb.Encoding.IDENTITY
        born = Timestamp()
        born.FromNanoseconds(time.time_ns())
        # One constructor call per message (None leaves a field unset): building the
        # request this way takes half the time of setting fields one by one.
        return spb.SendMessageRequest(
            messages=[
                pb.Message(
                    topic=resource,
                    user_properties=item.properties or None,
                    system_properties=pb.SystemProperties(
                        message_id=item.message_id,
                        body_encoding=identity,
                        message_type=message_type,
                        keys=item.keys,
                        born_timestamp=born,
                        tag=item.tag or None,
                        message_group=group or None,
                    ),
                    body=item.body,
                )
                for item in batch.items
            ]
        )

    def _settle(self, batch: _Batch, response: spb.SendMessageResponse) -> None:
        """Give each caller its receipt, or the error the broker answered for its message."""
        entries = response.entries
        if (
            len(entries) == 1 < len(batch.items)
            and entries[0].status.code in _SUCCESS
            and response.status.code in _SUCCESS
        ):
            # Apache RocketMQ's proxy stores a request as one batch and answers one
            # entry: the batch's first queue offset; the batch occupies the offsets after it.
            _stored_from(batch, entries[0].offset)
            return
        if len(entries) != len(batch.items):
            if response.status.code not in _SUCCESS:
                error: Exception = _status_error(response.status)
            else:
                error = BrokerError(
                    f"the broker answered {len(entries)} entries for {len(batch.items)} "
                    "messages; is it a RocketMQ 5 broker?"
                )
            _fail(batch, error)
            return
        for item, entry in zip(batch.items, entries, strict=True):
            if item.future.done():
                continue
            if entry.status.code in _SUCCESS:
                item.future.set_result(
                    SendReceipt(entry.message_id or item.message_id, entry.offset)
                )
            else:
                item.future.set_exception(_status_error(entry.status))

    # -- routes and connections ----------------------------------------------

    async def _connection_for(self, key: BatchKey) -> _Connection:
        """A batch's broker: groups in turn; a message group always on the same one."""
        topic, message_group = key
        endpoints = self._routes.get(topic)
        if endpoints is None:
            lookup = self._route_lookups.get(topic)
            if lookup is None:
                lookup = asyncio.get_running_loop().create_task(self._query_route(topic))
                self._route_lookups[topic] = lookup
                lookup.add_done_callback(lambda done: self._route_looked_up(topic, done))
            # One lookup serves every batch of the topic; one caller's cancellation
            # must not cancel it for the others.
            endpoints = await asyncio.shield(lookup)
        if message_group:
            # Ordered within its group: one broker for all of its messages.
            return self._connection(endpoints[zlib.crc32(message_group.encode()) % len(endpoints)])
        self._turn += 1
        return self._connection(endpoints[self._turn % len(endpoints)])

    def _route_looked_up(self, topic: str, lookup: asyncio.Task[list[str]]) -> None:
        if self._route_lookups.get(topic) is lookup:
            del self._route_lookups[topic]
        if not lookup.cancelled() and lookup.exception() is None:
            self._routes[topic] = lookup.result()

    async def _query_route(self, topic: str) -> list[str]:
        """The endpoints of the brokers (one per group) that take ``topic``'s messages."""
        bootstrap = self._connection(self.endpoint)
        request = spb.QueryRouteRequest(
            topic=pb.Resource(name=topic, resource_namespace=self._namespace),
            endpoints=endpoints_of(self.endpoint),
        )
        response = await self._transport.call(
            bootstrap.endpoint, bootstrap.stub.QueryRoute, request
        )
        if response.status.code not in _SUCCESS:
            raise _status_error(response.status)
        writable: list[str] = []
        for queue in response.message_queues:
            endpoint = address_of(queue.broker.endpoints)
            if queue.permission in _WRITABLE and endpoint is not None and endpoint not in writable:
                writable.append(endpoint)
        if writable:
            return writable
        raise MessagingError(
            pb.Code.FORBIDDEN,
            pb.Code.Name(pb.Code.FORBIDDEN),
            f"topic {topic!r} has no writable queue; check its permission",
        )

    def _connection(self, endpoint: str) -> _Connection:
        connection = self._connections.get(endpoint)
        if connection is None:
            connection = self._connections[endpoint] = _Connection(
                endpoint, self._transport.channel(endpoint)
            )
        return connection
