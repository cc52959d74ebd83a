"""skiff.records.v1.RecordService: messages as commit-log records, many per call.

An append takes records the client encoded: the broker checks each one and
fills in its own fields, without building a record from a protobuf. A fetch
copies runs of records straight out of the commit log, checking each record's
CRC; the client checks the exact tag for tag-hash collisions.

Both calls report to the broker's traffic observer as the messaging service's
SendMessage and PullMessage do, once per call: an append its records' body sizes
(type ``normal``), a fetch its record count and the bytes it returns, under no
consumer group (a FetchRequest names none). A fetch counts from what it already
has in hand, so the read path does no work per record for it.

A request that is not valid (bytes that do not parse, invalid UTF-8 included,
or arguments out of range) is answered INVALID_ARGUMENT; every error message is
bounded and echoes at most a short prefix of a name the user sent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import grpc

from ..delivery.long_polling import ArrivalHub
from ..delivery.topic_writes import (
    QueueRotation,
    TopicWriteRefused,
    WriteRefusal,
    require_writer,
    writable_topic,
)
from ..error_text import bounded
from ..frontdoor.grpc.boundary import rpc_boundary
from ..frontdoor.grpc.peers import peer_host
from ..frontdoor.grpc.server import RpcServer
from ..frontdoor.grpc.undecodable import lenient_rpc_handler
from ..metadata.topic_table import MessageType, TopicConfig, validate_topic_name
from ..runtime import Broker
from ..store.commit_log import AppendRejected
from ..store.hashing import tag_hash
from ..store.message import encode_host
from ..store.prepared_records import prepare_records
from ..store.results import NOT_WRITTEN_YET, GetStatus, PutResult, PutStatus
from ..telemetry import conventions as cv
from ..telemetry.traffic import NO_TRAFFIC, TrafficObserver
from ..wire.resource_names import system_topic_problem
from .v1 import records_pb2 as rpb
from .v1 import records_pb2_grpc

log = logging.getLogger(__name__)

MAX_RECORDS = 65536
DEFAULT_MAX_BYTES = 4 * 1024 * 1024
MAX_BYTES = 64 * 1024 * 1024
# A fetch answers this long before the caller's deadline, so the answer arrives in time.
_DEADLINE_MARGIN_S = 0.5

_STORED_BUT = {
    PutStatus.FLUSH_DISK_TIMEOUT: rpb.AppendResponse.FLUSH_DISK_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: rpb.AppendResponse.FLUSH_SLAVE_TIMEOUT,
}
_NOT_STORED = {
    PutStatus.MESSAGE_ILLEGAL: grpc.StatusCode.INVALID_ARGUMENT,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: grpc.StatusCode.INVALID_ARGUMENT,
    PutStatus.DISK_FULL: grpc.StatusCode.RESOURCE_EXHAUSTED,
    PutStatus.SERVICE_NOT_AVAILABLE: grpc.StatusCode.UNAVAILABLE,
}

_WRITE_REFUSAL_CODES = {
    WriteRefusal.REPLICA: grpc.StatusCode.FAILED_PRECONDITION,
    WriteRefusal.NO_SUCH_TOPIC: grpc.StatusCode.NOT_FOUND,
    WriteRefusal.NOT_WRITABLE: grpc.StatusCode.FAILED_PRECONDITION,
}

_RESULTS = {
    GetStatus.FOUND: rpb.FetchResponse.FOUND,
    GetStatus.OFFSET_TOO_SMALL: rpb.FetchResponse.OFFSET_TOO_SMALL,
    GetStatus.OFFSET_OVERFLOW_BADLY: rpb.FetchResponse.OFFSET_TOO_LARGE,
}


async def _abort(context: grpc.aio.ServicerContext, code: grpc.StatusCode, message: str) -> None:
    """End the call with ``code`` and ``message``, cut to a size every client accepts."""
    await context.abort(code, bounded(message))


async def _answer_failure(context: grpc.aio.ServicerContext, error: Exception) -> None:
    await _abort(context, grpc.StatusCode.INTERNAL, str(error))


# Handlers abort with their own status; anything else they raise is the broker's fault.
_failures_logged = rpc_boundary(_answer_failure)


class RecordService(records_pb2_grpc.RecordServiceServicer):
    def __init__(
        self, broker: Broker, hub: ArrivalHub, traffic: TrafficObserver = NO_TRAFFIC
    ) -> None:
        self._broker = broker
        self._hub = hub
        # Hears of the messages stored and fetched (metrics).
        self._traffic = traffic
        self._queues = QueueRotation()

    @_failures_logged
    async def Append(
        self, request: rpb.AppendRequest, context: grpc.aio.ServicerContext
    ) -> rpb.AppendResponse:
        broker = self._broker
        topic, problem = self._writable(request.topic)
        if problem is not None:
            await _abort(context, *problem)
        assert topic is not None
        store = broker.store
        try:
            batch = prepare_records(
                request.records,
                topic.name,
                self._queues.next_queue(topic),
                born_host=encode_host(peer_host(context.peer())),
                store_host=store.commit_log.store_host,
                max_message_size=store.config.max_message_size,
                born_default=int(time.time() * 1000),
            )
        except AppendRejected as exc:
            await _abort(
                context, grpc.StatusCode.INVALID_ARGUMENT, f"nothing was stored: {exc.reason}"
            )
        result = await store.put_records_async(batch)
        if result.ok:
            # Body bytes, as SendMessage counts them (RocketMQ counts whole stored records).
            self._traffic.received(topic.name, cv.MESSAGE_TYPE_NORMAL, batch.body_sizes)
        return await self._answer(result, batch.queue_id, context)

    @staticmethod
    async def _answer(
        result: PutResult, queue_id: int, context: grpc.aio.ServicerContext
    ) -> rpb.AppendResponse:
        if result.append is None:
            code = _NOT_STORED.get(result.status, grpc.StatusCode.INTERNAL)
            await _abort(context, code, f"nothing was stored: {result.reason}")
        assert result.append is not None
        offsets = result.append.queue_offsets
        return rpb.AppendResponse(
            status=_STORED_BUT.get(result.status, rpb.AppendResponse.STORED),
            message=result.reason,
            queue_id=queue_id,
            first_offset=offsets[0],
            record_count=len(offsets),
        )

    def _writable(self, name: str) -> tuple[TopicConfig | None, tuple[grpc.StatusCode, str] | None]:
        try:
            validate_topic_name(name)
        except ValueError as exc:
            return None, (grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        problem = system_topic_problem(name)
        if problem is not None:
            return None, (grpc.StatusCode.INVALID_ARGUMENT, problem)
        try:
            require_writer(self._broker.store.read_only_reason)
            topic = writable_topic(self._broker, name)
        except TopicWriteRefused as exc:
            return None, (_WRITE_REFUSAL_CODES[exc.refusal], exc.message)
        if topic.message_type != MessageType.NORMAL:
            return None, (
                grpc.StatusCode.FAILED_PRECONDITION,
                f"topic {name!r} takes {topic.message_type} messages; append takes NORMAL "
                "messages only (send the others with SendMessage)",
            )
        return topic, None

    @_failures_logged
    async def Fetch(
        self, request: rpb.FetchRequest, context: grpc.aio.ServicerContext
    ) -> rpb.FetchResponse:
        problem = self._check(request)
        if problem is not None:
            code, message = problem
            await _abort(context, code, message)
        max_bytes = request.max_bytes or DEFAULT_MAX_BYTES
        tag_codes = {tag_hash(tag) for tag in request.tags} if request.tags else None
        wait_s = min(request.wait_ms, self._broker.config.max_long_polling_ms) / 1000
        remaining = context.time_remaining()
        if remaining is not None:
            wait_s = min(wait_s, remaining - _DEADLINE_MARGIN_S)
        store = self._broker.store
        got = await self._hub.poll(
            request.topic,
            wait_s,
            lambda: store.get_records(
                request.topic,
                request.queue_id,
                request.offset,
                request.max_records,
                max_bytes=max_bytes,
                tag_codes=tag_codes,
            ),
            lambda got: got.status in NOT_WRITTEN_YET,
        )
        if got.count:
            # The records' whole framed bytes, as RocketMQ counts a pull's; PullMessage and
            # ReceiveMessage count bodies, which only a second walk over the records could.
            self._traffic.delivered(request.topic, cv.NO_CONSUMER_GROUP, got.count, len(got.data))
        return rpb.FetchResponse(
            result=_RESULTS.get(got.status, rpb.FetchResponse.NO_NEW_RECORDS),
            records=got.data,
            record_count=got.count,
            next_offset=got.next_offset,
            min_offset=got.min_offset,
            max_offset=got.max_offset,
        )

    def _check(self, request: rpb.FetchRequest) -> tuple[grpc.StatusCode, str] | None:
        invalid = grpc.StatusCode.INVALID_ARGUMENT
        try:
            validate_topic_name(request.topic)
        except ValueError as exc:
            return invalid, str(exc)
        topic = self._broker.topics.get(request.topic)
        if topic is None:
            return grpc.StatusCode.NOT_FOUND, f"topic {request.topic!r} does not exist"
        if not topic.readable:
            return grpc.StatusCode.PERMISSION_DENIED, f"topic {request.topic!r} is not readable"
        if not 0 <= request.queue_id < topic.read_queue_nums:
            return invalid, (
                f"queue {request.queue_id} is out of range: {topic.name!r} has "
                f"{topic.read_queue_nums} readable queues"
            )
        if request.offset < 0:
            return invalid, "an offset cannot be negative"
        if not 0 < request.max_records <= MAX_RECORDS:
            return invalid, f"max_records must be 1 to {MAX_RECORDS}"
        if not 0 <= request.max_bytes <= MAX_BYTES:
            return invalid, f"max_bytes must be 0 (the default, 4 MiB) to {MAX_BYTES}"
        if request.wait_ms < 0:
            return invalid, "wait_ms cannot be negative"
        if any(not tag.strip() or "|" in tag for tag in request.tags):
            return invalid, "each tag must be non-blank without '|'"
        return None


def add_to_server(
    service: RecordService,
    server: RpcServer,
    *,
    trace: Callable[[grpc.RpcMethodHandler, str], grpc.RpcMethodHandler] | None = None,
) -> None:
    """Register ``service``; undecodable requests reach its methods as Undecodable.

    ``trace`` wraps each method's handler (given its path) once.
    """
    server.add_generic_rpc_handlers(
        (
            lenient_rpc_handler(
                rpb.DESCRIPTOR.services_by_name["RecordService"],
                service,
                rpb,
                hint="send it with Skiff's skiff.records.v1 protobuf definitions",
                trace=trace,
            ),
        )
    )
