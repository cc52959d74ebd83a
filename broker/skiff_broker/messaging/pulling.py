"""PullMessage and the offset RPCs, for consumers that track their own offsets."""

from __future__ import annotations

from collections.abc import AsyncIterator

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from ..delivery.long_polling import ArrivalHub
from ..runtime import Broker
from ..store.results import NOT_WRITTEN_YET, GetStatus
from ..telemetry.traffic import NO_TRAFFIC, TrafficObserver
from .convert import fill_message, millis
from .receiving import Receiver
from .routing import require_group_name, require_topic_name
from .status import OK, Code, RequestError, status

_MAX_BATCH = 1024
_DEADLINE_MARGIN_S = 1.0


class Puller:
    def __init__(
        self, broker: Broker, hub: ArrivalHub, traffic: TrafficObserver = NO_TRAFFIC
    ) -> None:
        self._broker = broker
        self._hub = hub
        self._traffic = traffic

    def _queue(self, queue: pb.MessageQueue) -> tuple[str, int]:
        topic = self._broker.topics.get(require_topic_name(queue.topic.name))
        if topic is None:
            raise RequestError(Code.TOPIC_NOT_FOUND, f"topic {queue.topic.name!r} does not exist")
        if not 0 <= queue.id < topic.read_queue_nums:
            raise RequestError(
                Code.BAD_REQUEST,
                f"queue {queue.id} is out of range: {topic.name!r} has {topic.read_queue_nums} "
                "readable queues",
            )
        return topic.name, queue.id

    async def pull(
        self, request: spb.PullMessageRequest, time_remaining: float | None, namespace: str
    ) -> AsyncIterator[spb.PullMessageResponse]:
        try:
            topic, queue_id = self._queue(request.message_queue)
            tag_filter = Receiver.message_filter(request.filter_expression)
            batch = request.batch_size or 32
            if not 0 < batch <= _MAX_BATCH:
                raise RequestError(Code.BAD_REQUEST, f"batch size must be 1 to {_MAX_BATCH}")
        except RequestError as exc:
            yield spb.PullMessageResponse(status=exc.to_status())
            return
        polling = request.long_polling_timeout.seconds + request.long_polling_timeout.nanos / 1e9
        polling = min(polling, self._broker.config.max_long_polling_ms / 1000)
        if time_remaining is not None:
            polling = min(polling, time_remaining - _DEADLINE_MARGIN_S)
        store = self._broker.store
        got = await self._hub.poll(
            topic,
            polling,
            lambda: store.get_messages(
                topic,
                queue_id,
                request.offset,
                batch,
                tag_codes=tag_filter.tag_codes,
                properties_check=tag_filter.properties_check,
                accept=tag_filter.accept,
            ),
            lambda got: got.status in NOT_WRITTEN_YET,
        )
        if got.status is GetStatus.FOUND:
            self._traffic.delivered(
                topic,
                request.group.name,
                len(got.messages),
                sum(len(m.body) for m in got.messages),
            )
            yield spb.PullMessageResponse(status=OK)
            max_body_size = self._broker.config.store.max_message_size
            for message in got.messages:
                response = spb.PullMessageResponse()
                fill_message(
                    response.message, message, namespace=namespace, max_body_size=max_body_size
                )
                yield response
        elif got.status in (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY):
            yield spb.PullMessageResponse(
                status=status(
                    Code.ILLEGAL_OFFSET,
                    f"offset {request.offset} is outside [{got.min_offset}, {got.max_offset}]",
                )
            )
        else:
            yield spb.PullMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))
        yield spb.PullMessageResponse(next_offset=got.next_offset)

    def update_offset(self, request: spb.UpdateOffsetRequest) -> spb.UpdateOffsetResponse:
        topic, queue_id = self._queue(request.message_queue)
        require_group_name(request.group.name)
        if request.offset < 0:
            raise RequestError(Code.ILLEGAL_OFFSET, "an offset cannot be negative")
        self._broker.pop.reset_offset(request.group.name, topic, queue_id, request.offset)
        return spb.UpdateOffsetResponse(status=OK)

    def get_offset(self, request: spb.GetOffsetRequest) -> spb.GetOffsetResponse:
        topic, queue_id = self._queue(request.message_queue)
        require_group_name(request.group.name)
        offset = self._broker.pop.consumer_offset(request.group.name, topic, queue_id)
        if offset < 0:
            raise RequestError(
                Code.OFFSET_NOT_FOUND,
                f"group {request.group.name!r} has no offset for {topic}/{queue_id}",
            )
        return spb.GetOffsetResponse(status=OK, offset=offset)

    def query_offset(self, request: spb.QueryOffsetRequest) -> spb.QueryOffsetResponse:
        topic, queue_id = self._queue(request.message_queue)
        store = self._broker.store
        policy = request.query_offset_policy
        if policy == pb.QueryOffsetPolicy.BEGINNING:
            offset = store.min_offset(topic, queue_id)
        elif policy == pb.QueryOffsetPolicy.END:
            offset = store.max_offset(topic, queue_id)
        else:
            offset = store.offset_by_time(topic, queue_id, millis(request.timestamp))
        return spb.QueryOffsetResponse(status=OK, offset=offset)
