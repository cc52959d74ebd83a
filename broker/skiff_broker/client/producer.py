"""An asyncio producer that coalesces concurrent sends into batched requests.

Kafka's producer model. ``send()`` puts a message into the open batch of its
topic (or, for a FIFO message, of its message group) and waits for the broker's
answer. A batch goes out as one request when it is full (``batch_max_messages``
or ``batch_max_bytes``) or when its first message has waited ``linger_ms``; the
broker stores a request as one contiguous append to one queue. ``send_batch()``
places its messages as one run, split only where a batch fills up, and waits on
one future for the whole call instead of one per message.

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
from typing import Any, cast

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc

from ..endpoints import address_of, endpoints_of
from ..records.v1 import records_pb2 as rpb
from ..wire import property_names as prop
from ..wire.message_rules import message_problem
from ..wire.properties import encode_properties, id_only_properties, id_only_properties_each
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
from .messaging import SendReceipt, consecutive_receipts
from .records import topic_field
from .transport import AioTransport

__all__ = ["BatchingProducer", "ProducerClosed", "ProducerStats", "SendReceipt"]

DEFAULT_LINGER_MS = 5.0
# 512 rather than 256: half the requests for the same messages. With the peers bench's
# producer rows in one broker (six alternating rounds), 100 B with 64 producers went
# from 429k to 555k msg/s and 1 KiB with one from 232k to 254k (medians); 128 was slower.
DEFAULT_BATCH_MAX_MESSAGES = 512
DEFAULT_BATCH_MAX_BYTES = 1024 * 1024
DEFAULT_MAX_IN_FLIGHT_REQUESTS = 4
DEFAULT_REQUEST_TIMEOUT_S = 10.0
# What a message adds to a request beyond its body, topic, tag, keys and
# properties: ID, timestamps, type and protobuf framing (an over-estimate).
_MESSAGE_OVERHEAD_BYTES = 96
_CLOSED = "the producer is closed; create a new one to send"
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


class _Outcome:
    """What one send_batch() call waits for: a result per message, in order.

    Its messages may travel in several requests (a batch fills up, the run is split);
    each request settles its share, and the future is resolved once all are settled:
    one future per call, not one per message.
    """

    __slots__ = ("future", "results", "unsettled")

    def __init__(self, future: asyncio.Future[list[SendReceipt | BaseException]], count: int):
        self.future = future
        # Every slot is filled by the time the future is resolved.
        self.results: list[Any] = [None] * count
        self.unsettled = count

    def settle(self, start: int, results: list[SendReceipt | BaseException]) -> None:
        if len(results) == len(self.results):
            self.results = results  # the whole call in one request: the usual case
        else:
            self.results[start : start + len(results)] = results
        self.unsettled -= len(results)
        if not self.unsettled and not self.future.done():
            self.future.set_result(self.results)


class _Single:
    """One send() call: its message and the future its caller awaits."""

    count = 1

    __slots__ = (
        "body",
        "future",
        "keys",
        "message_id",
        "properties",
        "record_property",
        "size",
        "tag",
    )

    def __init__(
        self,
        future: asyncio.Future[SendReceipt],
        body: bytes,
        message_id: str,
        record_property: bytes,
        size: int,
        tag: str,
        keys: tuple[str, ...],
        properties: dict[str, str],
    ) -> None:
        self.future = future
        self.body = body
        self.message_id = message_id
        self.record_property = record_property
        self.size = size
        self.tag = tag
        self.keys = keys
        self.properties = properties

    # Read as a run of one when a request is built or a batch is nearly full.
    @property
    def bodies(self) -> tuple[bytes]:
        return (self.body,)

    @property
    def message_ids(self) -> tuple[str]:
        return (self.message_id,)

    @property
    def record_properties(self) -> tuple[bytes]:
        return (self.record_property,)

    @property
    def overhead(self) -> int:
        return self.size - len(self.body)

    @property
    def abandoned(self) -> bool:
        """Its caller was cancelled: it is not sent any more."""
        return self.future.done()

    def add_records(self, records: list[tuple[bytes, bytes]]) -> None:
        """Add (body, properties) of its message to ``records``."""
        records.append((self.body, self.record_property))

    def stored_from(self, first_offset: int) -> None:
        if not self.future.done():
            self.future.set_result(SendReceipt(self.message_id, first_offset))

    def failed(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(_copy_error(error))

    def answered(self, results: list[SendReceipt | BaseException]) -> None:
        """Settled message by message (one result)."""
        if self.future.done():
            return
        (result,) = results
        if isinstance(result, BaseException):
            self.future.set_exception(result)
        else:
            self.future.set_result(result)


class _Run:
    """Consecutive messages of one send_batch() call, which share a topic, tag and
    properties. A call's run is split when only its head fits in a batch; each part
    settles its own slots of the call's outcome."""

    keys: tuple[str, ...] = ()  # a send_batch() call's messages have none

    __slots__ = (
        "bodies",
        "count",
        "message_ids",
        "outcome",
        "overhead",
        "properties",
        "record_properties",
        "size",
        "start",
        "tag",
    )

    def __init__(
        self,
        outcome: _Outcome,
        start: int,
        bodies: list[bytes],
        message_ids: list[str],
        record_properties: list[bytes],
        overhead: int,
        tag: str,
        properties: dict[str, str],
    ) -> None:
        self.outcome = outcome
        self.start = start  # where the run's first message is in the call's results
        self.bodies = bodies
        self.count = len(bodies)
        self.message_ids = message_ids
        self.record_properties = record_properties
        self.overhead = overhead  # the estimated request bytes of a message beyond its body
        # Of all its messages, as the batch limit counts them.
        self.size = overhead * self.count + sum(map(len, bodies))
        self.tag = tag
        self.properties = properties

    @property
    def future(self) -> asyncio.Future[list[SendReceipt | BaseException]]:
        return self.outcome.future

    @property
    def abandoned(self) -> bool:
        """Its caller was cancelled: nothing of it is sent any more."""
        return self.outcome.future.done()

    def add_records(self, records: list[tuple[bytes, bytes]]) -> None:
        """Add (body, properties) of each of its messages to ``records``."""
        records.extend(zip(self.bodies, self.record_properties, strict=True))

    def split(self, count: int) -> tuple[_Run, _Run]:
        """The run's first ``count`` messages, and the rest."""
        return self._part(0, count), self._part(count, self.count)

    def _part(self, begin: int, end: int) -> _Run:
        return _Run(
            self.outcome,
            self.start + begin,
            self.bodies[begin:end],
            self.message_ids[begin:end],
            self.record_properties[begin:end],
            self.overhead,
            self.tag,
            self.properties,
        )

    def stored_from(self, first_offset: int) -> None:
        """Stored as consecutive offsets of one queue from ``first_offset``."""
        if not self.outcome.future.done():
            receipts = consecutive_receipts(self.message_ids, first_offset)
            # The caller's list holds failures too; this one never will.
            self.outcome.settle(self.start, cast(list[SendReceipt | BaseException], receipts))

    def failed(self, error: BaseException) -> None:
        if not self.outcome.future.done():
            # One copy for the run: only its caller sees it.
            self.outcome.settle(self.start, [_copy_error(error)] * self.count)

    def answered(self, results: list[SendReceipt | BaseException]) -> None:
        """Settled message by message (a result each, in order)."""
        if not self.outcome.future.done():
            self.outcome.settle(self.start, results)


# What a batch holds: whole send() calls and runs of send_batch() calls.
_Part = _Single | _Run


def _overhead(topic: str, tag: str, keys: tuple[str, ...], properties: dict[str, str]) -> int:
    """The estimated request bytes of a message beyond its body."""
    overhead = _MESSAGE_OVERHEAD_BYTES + len(topic) + len(tag)
    if keys:
        overhead += sum(len(k) + 1 for k in keys)
    if properties:
        overhead += sum(len(k) + len(v) + 4 for k, v in properties.items())
    return overhead


def _stored_properties(
    message_id: str, tag: str, keys: tuple[str, ...], properties: dict[str, str]
) -> dict[str, str]:
    """A message's properties as a stored record holds them: the caller's and the
    broker's own (tag, keys, ID). InvalidArgument if they cannot be stored."""
    stored = dict(properties)
    if tag:
        stored[prop.TAGS] = tag
    if keys:
        stored[prop.KEYS] = " ".join(keys)
    stored[prop.UNIQ_KEY] = message_id
    problem = prop.message_id_problem(message_id)
    if problem is None:
        # The send door's rules: each key on its own, so an empty one is refused too.
        refusal = message_problem(properties, tag or None, keys)
        problem = None if refusal is None else refusal.text
    if problem is not None:
        raise InvalidArgument(f"message not sent: {problem}")
    return stored


def _encoded(properties: dict[str, str]) -> bytes:
    try:
        return encode_properties(properties)
    except ValueError as exc:
        raise InvalidArgument(f"message not sent: {exc}") from None


def _run_properties(message_ids: list[str], tag: str, properties: dict[str, str]) -> list[bytes]:
    """The PROPERTIES field of each message of a run that shares ``tag`` and ``properties``."""
    if not (tag or properties):
        # The usual case, quickly: nothing but the ID to encode.
        return id_only_properties_each(message_ids)
    # Every ID has the same length, so the first message's check holds for all of them.
    stored = _stored_properties(message_ids[0], tag, (), properties)
    del stored[prop.UNIQ_KEY]
    shared = _encoded(stored)
    return [shared + id_only_properties(message_id) for message_id in message_ids]


class _Batch:
    __slots__ = ("closed", "count", "key", "linger", "parts", "size")

    def __init__(self, key: BatchKey) -> None:
        self.key = key
        self.parts: list[_Part] = []
        self.count = 0  # messages in its parts
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
    for part in batch.parts:
        part.stored_from(first_offset)
        first_offset += part.count


def _fail(batch: _Batch, error: BaseException) -> None:
    """Every send of the batch that still waits fails with (a copy of) ``error``."""
    for part in batch.parts:
        part.failed(error)


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
        self._waiting: dict[BatchKey, collections.deque[_Part]] = {}
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
        # The _dispatch() due on the loop's next turn, if one is.
        self._next_dispatch: asyncio.Handle | None = None

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
        if self._closed:
            raise ProducerClosed(_CLOSED)
        body = bytes(body)
        if not body:
            raise InvalidArgument("message not sent: message body must not be empty")
        tag = tag or ""
        keys = tuple(keys)
        properties = dict(properties) if properties else {}
        message_id = new_message_id()
        record_property = (
            _encoded(_stored_properties(message_id, tag, keys, properties))
            if tag or keys or properties
            else id_only_properties(message_id)
        )
        single = _Single(
            self._loop().create_future(),
            body,
            message_id,
            record_property,
            _overhead(topic, tag, keys, properties) + len(body),
            tag,
            keys,
            properties,
        )
        self._place((topic, message_group or ""), single)
        self._dispatch()
        return await single.future

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
        ``bodies`` once every message is answered; the first failure is raised
        unless ``return_exceptions``, which puts each failure in its message's
        place instead (as ``asyncio.gather`` does). A message that fails the
        checks made before sending raises at once, and none of ``bodies`` is sent.
        """
        if self._closed:
            raise ProducerClosed(_CLOSED)
        bodies = [bytes(body) for body in bodies]
        if not bodies:
            return []
        if not all(bodies):
            raise InvalidArgument("message not sent: message body must not be empty")
        tag = tag or ""
        shared = dict(properties) if properties else {}
        # One call makes the IDs: taking them one by one cost more than encoding.
        message_ids = new_message_ids(len(bodies))
        record_properties = _run_properties(message_ids, tag, shared)
        outcome = _Outcome(self._loop().create_future(), len(bodies))
        run = _Run(
            outcome,
            0,
            bodies,
            message_ids,
            record_properties,
            _overhead(topic, tag, (), shared),
            tag,
            shared,
        )
        self._place((topic, ""), run)
        self._dispatch()
        results = await outcome.future
        if not return_exceptions:
            for result in results:
                if isinstance(result, BaseException):
                    raise result
        return results

    def _loop(self) -> asyncio.AbstractEventLoop:
        # Looked up once: the producer lives in one event loop.
        loop = self._event_loop
        if loop is None:
            loop = self._event_loop = asyncio.get_running_loop()
        return loop

    def _place(self, key: BatchKey, part: _Part) -> None:
        """Put ``part`` in its open batch, or (what does not fit) behind the callers already
        waiting for room."""
        waiting = self._waiting.get(key)
        # Later callers queue behind earlier ones, so a group's order is the call order.
        if not waiting:
            rest = self._add(key, part)
            if rest is None:
                return
            part = rest
        self._waiting.setdefault(key, collections.deque()).append(part)

    async def flush(self) -> None:
        """Send every buffered message now and wait until all sends begun so far completed.

        The outcome of each message still goes to its own send() call.
        """
        self._flushes += 1
        try:
            futures = {
                part.future
                for batches in (self._open.values(), self._in_flight)
                for batch in batches
                for part in batch.parts
            }
            futures.update(part.future for queue in self._waiting.values() for part in queue)
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
            buffered_messages=sum(b.count for b in self._open.values())
            + sum(b.count for b in self._in_flight),
            waiting_senders=sum(len(q) for q in self._waiting.values()),
            in_flight_requests=len(self._in_flight),
            requests_sent=self._requests_sent,
            messages_sent=self._messages_sent,
        )

    # -- batching -----------------------------------------------------------

    def _add(self, key: BatchKey, part: _Part) -> _Part | None:
        """Put as much of ``part`` as fits into the open batch of ``key``; what did not fit
        (None when all did).

        It only marks batches due; the caller then runs ``_dispatch``.
        """
        batch = self._open.get(key)
        if batch is None:
            batch = self._open[key] = _Batch(key)
        elif batch.closed:
            return part
        count = fits = part.count
        size = part.size
        if batch.count + count > self._batch_max_messages:
            fits = self._batch_max_messages - batch.count
            size = part.overhead * fits + sum(map(len, part.bodies[:fits]))
        if batch.size + size > self._batch_max_bytes:
            # Message by message, up to the first that would overflow the batch; an empty
            # batch takes one message whatever its size.
            fits = size = 0
            room = self._batch_max_bytes - batch.size
            for body in part.bodies:
                grown = size + part.overhead + len(body)
                if grown > room and (fits or batch.count):
                    break
                fits += 1
                size = grown
        rest = None
        if fits < count:
            if not fits:
                batch.closed = True
                self._due[key] = None
                return part
            assert isinstance(part, _Run)  # a send() call's one message fits or it does not
            part, rest = part.split(fits)
        batch.parts.append(part)
        batch.count += fits
        batch.size += size
        if (
            rest is not None
            or batch.count >= self._batch_max_messages
            or batch.size >= self._batch_max_bytes
        ):
            batch.closed = True
            self._due[key] = None
        elif len(batch.parts) == 1:
            if self._flushes:
                self._due[key] = None
            else:
                # linger 0 still waits for the loop's next turn, so the sends of
                # the current turn share a request.
                batch.linger = asyncio.get_running_loop().call_later(
                    self._linger_s, self._linger_over, batch
                )
        return rest

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
        """Start the request of the next due batch, if the in-flight limit allows; the
        ones due after it start on the loop's next turns.

        One a turn, because a gRPC call goes on the wire only when its own task runs: a
        request started in the same turn as three more waited while the client built
        them all (the first of a send_batch()'s four reached the broker 0.9 ms after it
        was built, and the broker idled meanwhile). Started one a turn, each is on its
        way while the next is built."""
        if len(self._in_flight) >= self._max_in_flight:
            return
        key = self._next_due()
        if key is None:
            return
        del self._due[key]
        batch = self._open.pop(key)
        self._start_request(batch)
        self._admit_waiting(key)
        if self._due and self._next_dispatch is None:
            self._next_dispatch = self._loop().call_soon(self._dispatch_next)

    def _dispatch_next(self) -> None:
        self._next_dispatch = None
        self._dispatch()

    def _admit_waiting(self, key: BatchKey) -> None:
        """Move waiting callers, in order, into the new open batch of ``key``."""
        waiting = self._waiting.get(key)
        if waiting is None:
            return
        while waiting:
            # A caller cancelled while waiting has nothing left to send.
            rest = None if waiting[0].abandoned else self._add(key, waiting[0])
            if rest is not None:
                waiting[0] = rest
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
            self._messages_sent += batch.count
            self._in_flight.discard(batch)
            self._groups_in_flight.discard(batch.key)
            self._dispatch()

    async def _append(self, connection: _Connection, batch: _Batch) -> bool:
        """Send ``batch`` as encoded records; False if it must go as SendMessage instead."""
        topic = batch.key[0]
        field = self._topic_fields.get(topic)
        if field is None:
            field = self._topic_fields[topic] = topic_field(topic)
        records: list[tuple[bytes, bytes]] = []
        for part in batch.parts:
            part.add_records(records)
        pieces: list[bytes] = []
        length = client_record_pieces(pieces, field, records, int(time.time() * 1000))
        request = EncodedAppendRequest(topic, pieces, length)
        try:
            response = await self._transport.call(connection.endpoint, connection.append, request)
        except InvalidArgument:
            if batch.count == 1:
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
                    user_properties=part.properties or None,
                    system_properties=pb.SystemProperties(
                        message_id=message_id,
                        body_encoding=identity,
                        message_type=message_type,
                        keys=part.keys,
                        born_timestamp=born,
                        tag=part.tag or None,
                        message_group=group or None,
                    ),
                    body=body,
                )
                for part in batch.parts
                for body, message_id in zip(part.bodies, part.message_ids, strict=True)
            ]
        )

    def _settle(self, batch: _Batch, response: spb.SendMessageResponse) -> None:
        """Give each caller its receipt, or the error the broker answered for its message."""
        entries = response.entries
        if (
            len(entries) == 1 < batch.count
            and entries[0].status.code in _SUCCESS
            and response.status.code in _SUCCESS
        ):
            # Apache RocketMQ's proxy stores a request as one batch and answers one
            # entry: the batch's first queue offset; the batch occupies the offsets after it.
            _stored_from(batch, entries[0].offset)
            return
        if len(entries) != batch.count:
            if response.status.code not in _SUCCESS:
                error: Exception = _status_error(response.status)
            else:
                error = BrokerError(
                    f"the broker answered {len(entries)} entries for {batch.count} "
                    "messages; is it a RocketMQ 5 broker?"
                )
            _fail(batch, error)
            return
        answered = iter(entries)
        for part in batch.parts:
            results: list[SendReceipt | BaseException] = []
            for message_id, entry in zip(part.message_ids, answered, strict=False):
                if entry.status.code in _SUCCESS:
                    results.append(SendReceipt(entry.message_id or message_id, entry.offset))
                else:
                    results.append(_status_error(entry.status))
            part.answered(results)

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
