"""ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from google.protobuf.duration_pb2 import Duration
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from ..delivery.long_polling import ArrivalHub
from ..delivery.pop import Delivery, PopError
from ..delivery.tag_filter import TagFilter
from ..filter.subscription import MessageFilter, sql92_filter
from ..metadata.topic_table import MessageType, TopicConfig
from ..runtime import Broker
from ..telemetry.traffic import NO_TRAFFIC, TrafficObserver
from .convert import fill_message, timestamp
from .receipt_handle import ReceiptHandle
from .routing import require_group_name, require_topic_name
from .status import CODE_OK, OK, Code, RequestError, status

# Answer this long before the client's deadline, so it gets the answer, not a timeout.
_DEADLINE_MARGIN_S = 1.0
# One receive hands out at most this many; a larger batch size is capped, not refused
# (RocketMQ's proxy: MAX_MSG_NUMS_FOR_POP_REQUEST).
MAX_RECEIVE_BATCH = 32


def _now_ms() -> int:
    return int(time.time() * 1000)


def _duration_ms(duration: Duration) -> int:
    return duration.seconds * 1000 + duration.nanos // 1_000_000


def check_invisible_time(invisible_ms: int, minimum_ms: int, maximum_ms: int) -> None:
    """ILLEGAL_INVISIBLE_TIME outside the range, worded as RocketMQ's proxy words it."""
    if invisible_ms < minimum_ms:
        raise RequestError(
            Code.ILLEGAL_INVISIBLE_TIME,
            f"the invisibleTime is too small. min is {minimum_ms} "
            "(milliseconds); ask for a longer invisible duration",
        )
    if invisible_ms > maximum_ms:
        raise RequestError(
            Code.ILLEGAL_INVISIBLE_TIME,
            f"the invisibleTime is too large. max is {maximum_ms} "
            "(milliseconds); ask for a shorter invisible duration",
        )


class Receiver:
    def __init__(
        self, broker: Broker, hub: ArrivalHub, traffic: TrafficObserver = NO_TRAFFIC
    ) -> None:
        self._broker = broker
        self._hub = hub
        self._traffic = traffic
        self._rotation: dict[tuple[str, str], int] = {}

    def _readable_topic(self, name: str) -> TopicConfig:
        topic = self._broker.topic_for_use(require_topic_name(name))
        if topic is None:
            raise RequestError(Code.TOPIC_NOT_FOUND, f"topic {name!r} does not exist")
        if not topic.readable:
            raise RequestError(Code.FORBIDDEN, f"topic {name!r} is not readable")
        return topic

    @staticmethod
    def message_filter(expression: pb.FilterExpression) -> MessageFilter:
        """The subscription's tag or SQL92 filter; ILLEGAL_FILTER_EXPRESSION if it is bad."""
        if expression.type not in (
            pb.FilterType.FILTER_TYPE_UNSPECIFIED,
            pb.FilterType.TAG,
            pb.FilterType.SQL,
        ):
            raise RequestError(
                Code.ILLEGAL_FILTER_EXPRESSION,
                f"filter type {expression.type} is unknown; use TAG (TagA || TagB) or SQL92",
            )
        try:
            if expression.type == pb.FilterType.SQL:
                return sql92_filter(expression.expression)
            return TagFilter.parse(expression.expression)
        except ValueError as exc:
            raise RequestError(Code.ILLEGAL_FILTER_EXPRESSION, str(exc)) from None

    def _queue_order(self, group: str, topic: TopicConfig) -> list[int]:
        """Every readable queue, starting one further each call so none starves."""
        count = topic.read_queue_nums
        start = self._rotation.get((group, topic.name), 0)
        self._rotation[(group, topic.name)] = (start + 1) % count
        return [(start + i) % count for i in range(count)]

    def _invisible_ms(self, request: spb.ReceiveMessageRequest) -> int:
        config = self._broker.config
        if not request.HasField("invisible_duration"):
            return config.default_invisible_time_ms
        invisible = _duration_ms(request.invisible_duration)
        # RocketMQ does not check what an auto-renewing (push) consumer asks for.
        if not request.auto_renew:
            check_invisible_time(
                invisible, config.min_invisible_time_ms, config.max_invisible_time_ms
            )
        return min(max(invisible, 0), config.max_invisible_time_ms)

    # -- ReceiveMessage -----------------------------------------------------

    async def receive(
        self,
        request: spb.ReceiveMessageRequest,
        time_remaining: float | None,
        namespace: str,
    ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        try:
            deliveries = await self._receive(request, time_remaining)
        except RequestError as exc:
            yield spb.ReceiveMessageResponse(status=exc.to_status())
            yield spb.ReceiveMessageResponse(delivery_timestamp=timestamp(_now_ms()))
            return
        if not deliveries:
            yield spb.ReceiveMessageResponse(
                status=status(Code.MESSAGE_NOT_FOUND, "no new message")
            )
        else:
            yield spb.ReceiveMessageResponse(status=OK)
            broker_name = self._broker.config.broker_name
            max_body_size = self._broker.config.store.max_message_size
            for d in deliveries:
                response = spb.ReceiveMessageResponse()
                self._fill(response.message, d, broker_name, namespace, max_body_size)
                yield response
        yield spb.ReceiveMessageResponse(delivery_timestamp=timestamp(_now_ms()))

    @staticmethod
    def _fill(
        message: pb.Message, d: Delivery, broker_name: str, namespace: str, max_body_size: int
    ) -> None:
        handle = ReceiptHandle(
            d.queue_id,
            d.offset,
            d.retrieve_time,
            d.invisible_time,
            broker_name,
            d.message.physical_offset,
        )
        fill_message(
            message,
            d.message,
            namespace=namespace,
            receipt_handle=handle.encode(),
            delivery_attempt=d.attempt,
            invisible_ms=d.invisible_time,
            max_body_size=max_body_size,
        )

    async def _receive(
        self, request: spb.ReceiveMessageRequest, time_remaining: float | None
    ) -> list[Delivery]:
        group = require_group_name(request.group.name)
        if self._broker.group_settings.setting(group, "consumeEnable") is False:
            raise RequestError(
                Code.FORBIDDEN,
                f"subscription group no permission, {group}: its consumeEnable is false; "
                f"set it with mqadmin updateSubGroup -g {group} -s true",
            )
        topic = self._readable_topic(request.message_queue.topic.name)
        tag_filter = self.message_filter(request.filter_expression)
        if request.batch_size < 0:
            raise RequestError(
                Code.BAD_REQUEST,
                f"batch size {request.batch_size} is negative; ask for 1 to "
                f"{MAX_RECEIVE_BATCH} messages (0 means {MAX_RECEIVE_BATCH})",
            )
        batch = min(request.batch_size or MAX_RECEIVE_BATCH, MAX_RECEIVE_BATCH)
        invisible = self._invisible_ms(request)
        config = self._broker.config
        polling_ms = (
            _duration_ms(request.long_polling_timeout)
            if request.HasField("long_polling_timeout")
            else config.max_long_polling_ms
        )
        polling_s = min(polling_ms, config.max_long_polling_ms) / 1000
        if time_remaining is not None:
            polling_s = min(polling_s, time_remaining - _DEADLINE_MARGIN_S)
        deadline = time.monotonic() + max(polling_s, 0.0)
        fifo = topic.message_type is MessageType.FIFO
        pop = self._broker.pop
        while True:
            since = self._hub.arrivals(topic.name)
            deliveries = pop.pop(
                group,
                topic.name,
                self._queue_order(group, topic),
                batch,
                invisible,
                tag_filter,
                fifo=fifo,
            )
            # Those out of attempts go to the DLQ topic: a store write, awaited.
            await pop.move_due_dead_letters()
            remaining = deadline - time.monotonic()
            if deliveries:
                size = sum(len(d.message.body) for d in deliveries)
                self._traffic.delivered(topic.name, group, len(deliveries), size)
                return deliveries
            if remaining <= 0:
                return deliveries
            due = pop.next_visible_at(group, topic.name, fifo=fifo)
            if due is not None:
                remaining = min(remaining, max(0.0, (due - _now_ms()) / 1000) + 0.01)
            await self._hub.wait(topic.name, remaining, since)

    # -- acknowledging ------------------------------------------------------

    def ack(self, request: spb.AckMessageRequest) -> spb.AckMessageResponse:
        group = require_group_name(request.group.name)
        topic = require_topic_name(request.topic.name)
        pop = self._broker.pop
        # Entries are filled in place in the response: building each and copying it in
        # cost more than the ack itself.
        response = spb.AckMessageResponse()
        codes = set()
        for entry in request.entries:
            try:
                handle = ReceiptHandle.decode(entry.receipt_handle)
                pop.ack(group, topic, handle.queue_id, handle.offset, handle.retrieve_time)
                result = OK
            except RequestError as exc:
                result = exc.to_status()
            except PopError as exc:
                result = status(Code.INVALID_RECEIPT_HANDLE, str(exc))
            answer = response.entries.add()
            answer.message_id = entry.message_id
            answer.receipt_handle = entry.receipt_handle
            answer.status.CopyFrom(result)
            codes.add(result.code)
        if CODE_OK in codes:
            # An ack can release a FIFO queue that waiting receives skipped.
            self._hub.notify(topic)
        if not codes:
            overall = status(Code.BAD_REQUEST, "an ack request needs at least one entry")
        elif len(codes) == 1:
            overall = response.entries[0].status
        else:
            overall = status(Code.MULTIPLE_RESULTS)
        response.status.CopyFrom(overall)
        return response

    def change_invisible_duration(
        self, request: spb.ChangeInvisibleDurationRequest
    ) -> spb.ChangeInvisibleDurationResponse:
        require_group_name(request.group.name)
        require_topic_name(request.topic.name)
        config = self._broker.config
        invisible = _duration_ms(request.invisible_duration)
        # A consumer asking for a quick retry may go below the receive minimum (RocketMQ: 0).
        check_invisible_time(invisible, 0, config.max_invisible_time_ms)
        handle = ReceiptHandle.decode(request.receipt_handle)
        try:
            d = self._broker.pop.change_invisible_time(
                request.group.name,
                request.topic.name,
                handle.queue_id,
                handle.offset,
                handle.retrieve_time,
                invisible,
            )
        except PopError as exc:
            raise RequestError(Code.INVALID_RECEIPT_HANDLE, str(exc)) from None
        # Waiting receives planned their sleep with the old due time.
        self._hub.notify(request.topic.name)
        renewed = ReceiptHandle(
            d.queue_id,
            d.offset,
            d.retrieve_time,
            d.invisible_time,
            handle.broker_name,
            d.message.physical_offset,
        )
        return spb.ChangeInvisibleDurationResponse(status=OK, receipt_handle=renewed.encode())

    async def forward_to_dead_letter(
        self, request: spb.ForwardMessageToDeadLetterQueueRequest
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        require_group_name(request.group.name)
        require_topic_name(request.topic.name)
        handle = ReceiptHandle.decode(request.receipt_handle)
        try:
            await self._broker.pop.forward_to_dead_letter(
                request.group.name,
                request.topic.name,
                handle.queue_id,
                handle.offset,
                handle.retrieve_time,
            )
        except PopError as exc:
            raise RequestError(Code.INVALID_RECEIPT_HANDLE, str(exc)) from None
        self._hub.notify(request.topic.name)  # it may have held a FIFO queue
        return spb.ForwardMessageToDeadLetterQueueResponse(status=OK)
