"""skiff.records.v1.RecordService: a queue's stored records, many per call.

A fetch copies runs of records straight out of the commit log; the broker
decodes nothing, so one call can carry tens of thousands of messages. The
client checks each record's CRC, and the exact tag for tag-hash collisions.
"""

from __future__ import annotations

import time

import grpc

from ..delivery.long_polling import ArrivalHub
from ..metadata.topic_table import validate_topic_name
from ..runtime import Broker
from ..store.hashing import tag_hash
from ..store.message_store import GetStatus
from .v1 import records_pb2 as rpb
from .v1 import records_pb2_grpc

MAX_RECORDS = 65536
DEFAULT_MAX_BYTES = 4 * 1024 * 1024
MAX_BYTES = 64 * 1024 * 1024
# A fetch answers this long before the caller's deadline, so the answer arrives in time.
_DEADLINE_MARGIN_S = 0.5

_RESULTS = {
    GetStatus.FOUND: rpb.FetchResponse.FOUND,
    GetStatus.OFFSET_TOO_SMALL: rpb.FetchResponse.OFFSET_TOO_SMALL,
    GetStatus.OFFSET_OVERFLOW_BADLY: rpb.FetchResponse.OFFSET_TOO_LARGE,
}


class RecordService(records_pb2_grpc.RecordServiceServicer):
    def __init__(self, broker: Broker, hub: ArrivalHub) -> None:
        self._broker = broker
        self._hub = hub

    async def Fetch(
        self, request: rpb.FetchRequest, context: grpc.aio.ServicerContext
    ) -> rpb.FetchResponse:
        problem = self._check(request)
        if problem is not None:
            code, message = problem
            await context.abort(code, message)
        max_bytes = request.max_bytes or DEFAULT_MAX_BYTES
        tag_codes = {tag_hash(tag) for tag in request.tags} if request.tags else None
        wait_s = min(request.wait_ms, self._broker.config.max_long_polling_ms) / 1000
        remaining = context.time_remaining()
        if remaining is not None:
            wait_s = min(wait_s, remaining - _DEADLINE_MARGIN_S)
        deadline = time.monotonic() + wait_s
        store = self._broker.store
        while True:
            got = store.get_records(
                request.topic,
                request.queue_id,
                request.offset,
                request.max_records,
                max_bytes=max_bytes,
                tag_codes=tag_codes,
            )
            waiting = got.status in (GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.NO_MESSAGE_IN_QUEUE)
            left = deadline - time.monotonic()
            if not waiting or left <= 0:
                break
            await self._hub.wait(request.topic, left)
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


def add_to_server(service: RecordService, server: grpc.aio.Server) -> None:
    records_pb2_grpc.add_RecordServiceServicer_to_server(service, server)
