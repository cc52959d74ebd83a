"""Pop consumption over remoting: POP_MESSAGE, (BATCH_)ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME,
NOTIFICATION and POLLING_INFO.

The 5.x remoting client's pop mode, on the broker's one ``PopService``: the in-flight
deliveries, attempts and invisible times a gRPC receive uses, so a group's message
popped here is not received over gRPC until its invisible time ends, and the other
way round; an ack on either door ends it for both.

Invariants:
- A pop answers SUCCESS with the messages in RocketMQ's record encoding (as a pull
  does), each record's RECONSUMETIMES its attempts before this one, and the header's
  ``popTime`` (the deliveries' retrieve time) and ``invisibleTime``, from which the
  client builds each message's receipt (``extraInfo``, RocketMQ's ExtraInfoUtil form:
  ``ckOffset popTime invisibleTime reviveQid topicMark brokerName queueId offset``).
  Nothing due: PULL_NOT_FOUND, or POLLING_TIMEOUT once it waited ``pollTime``.
- An ack or change names its delivery by group, topic, queue, offset and the
  receipt's ``popTime``; one whose invisible time ran out, or that was acked, is
  refused (NO_MESSAGE) and the message comes again, as on the gRPC door.
- A batch ack (RocketMQ's BatchAckMessageRequestBody: per queue and pop, a start
  offset and a bit set of the offsets after it) settles each delivery it names as an
  ack would, and is answered SUCCESS as RocketMQ answers it; the deliveries it could
  not settle come again.
- NOTIFICATION answers ``hasMsg``: whether a pop might find something now (a message
  past the group's position or a redelivery due), waiting up to ``pollTime`` for one;
  a hint, as in RocketMQ. POLLING_INFO answers ``pollingNum``: the pops and
  notifications of the group on the topic waiting now.
- The invisible time is checked against the broker's bounds (those of a gRPC receive);
  a change may go down to 0, a quick retry.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import time

from ..delivery.long_polling import ArrivalHub
from ..delivery.pop import Delivery, PopError
from ..delivery.tag_filter import TagFilter
from ..filter.subscription import MessageFilter, sql92_filter
from ..metadata.topic_table import MessageType, TopicConfig
from ..runtime import Broker
from ..wire.record_layout import STOREHOST_V6, store_timestamp_offset
from ..wire.resource_names import group_name_problem
from .codes import RequestCode, ResponseCode
from .connection import RemotingConnection
from .frames import RemotingCommand
from .service import HeaderError, Refused, int_field, text_field

# RocketMQ's pop batch limit (its broker refuses more than 32 a pop).
MAX_POP_MESSAGES = 32
# RocketMQ's remoting codes a pop answers with when nothing is due.
NO_MESSAGE = 208
POLLING_TIMEOUT = 210
# Skiff's pops have one revive queue (RocketMQ's reviveQid names a broker-internal one).
REVIVE_QUEUE = 0


def _group(request: RemotingCommand) -> str:
    group = text_field(request, "consumerGroup")
    problem = group_name_problem(group)
    if problem is not None:
        raise HeaderError(problem)
    return group


def _pop_time(request: RemotingCommand) -> int:
    """The popTime inside a receipt (``extraInfo``): its second field."""
    fields = text_field(request, "extraInfo").split(" ")
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        raise HeaderError(
            "extraInfo is not a pop receipt (ckOffset popTime invisibleTime reviveQid "
            "topicMark brokerName queueId offset); pass the POP_CK the message came with"
        ) from None


class Popping:
    def __init__(self, broker: Broker, hub: ArrivalHub) -> None:
        self._broker = broker
        self._hub = hub
        self._rotation: dict[tuple[str, str], int] = {}
        # (group, topic) -> pops and notifications waiting now (POLLING_INFO).
        self._waiting: dict[tuple[str, str], int] = {}

    def handlers(self) -> dict:
        return {
            RequestCode.POP_MESSAGE: self.pop,
            RequestCode.ACK_MESSAGE: self.ack,
            RequestCode.CHANGE_MESSAGE_INVISIBLETIME: self.change_invisible_time,
            RequestCode.BATCH_ACK_MESSAGE: self.batch_ack,
            RequestCode.NOTIFICATION: self.notification,
            RequestCode.POLLING_INFO: self.polling_info,
        }

    def _topic(self, request: RemotingCommand) -> TopicConfig:
        name = text_field(request, "topic")
        topic = self._broker.topics.get(name)
        if topic is None:
            raise Refused(ResponseCode.TOPIC_NOT_EXIST, f"topic {name} does not exist")
        if not topic.readable:
            raise Refused(ResponseCode.NO_PERMISSION, f"topic {name} is not readable")
        return topic

    def _queues(self, group: str, topic: TopicConfig, asked: int) -> list[int]:
        """The asked queue, or (-1) every readable one, starting one further each pop."""
        count = topic.read_queue_nums
        if asked >= 0:
            if asked >= count:
                raise Refused(
                    ResponseCode.SYSTEM_ERROR,
                    f"queueId {asked} is illegal: topic {topic.name} has {count} read "
                    "queues; refresh the route",
                )
            return [asked]
        start = self._rotation.get((group, topic.name), 0)
        self._rotation[(group, topic.name)] = (start + 1) % count
        return [(start + i) % count for i in range(count)]

    def _invisible_ms(self, request: RemotingCommand, least: int) -> int:
        config = self._broker.config
        invisible = int_field(request, "invisibleTime")
        if not least <= invisible <= config.max_invisible_time_ms:
            raise Refused(
                ResponseCode.SYSTEM_ERROR,
                f"invisibleTime {invisible} ms is out of range: it must be {least} to "
                f"{config.max_invisible_time_ms} ms",
            )
        return invisible

    @staticmethod
    def _filter(request: RemotingCommand) -> MessageFilter:
        kind = (request.ext_fields.get("expType") or "TAG").upper()
        expression = request.ext_fields.get("exp") or "*"
        try:
            if kind == "SQL92":
                return sql92_filter(expression)
            if kind != "TAG":
                raise ValueError(f"expression type {kind!r} is unknown; use TAG or SQL92")
            return TagFilter.parse(expression)
        except ValueError as exc:
            raise Refused(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(exc)) from None

    async def pop(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        group = _group(request)
        if self._broker.group_settings.setting(group, "consumeEnable") is False:
            raise Refused(
                ResponseCode.NO_PERMISSION,
                f"subscription group no permission, {group}: its consumeEnable is false; "
                f"set it with updateSubGroup -g {group} -s true",
            )
        topic = self._topic(request)
        queues = self._queues(group, topic, int_field(request, "queueId", -1))
        wanted = min(max(int_field(request, "maxMsgNums", 1), 1), MAX_POP_MESSAGES)
        invisible = self._invisible_ms(request, self._broker.config.min_invisible_time_ms)
        message_filter = self._filter(request)
        poll_ms = min(
            max(int_field(request, "pollTime", 0), 0), self._broker.config.max_long_polling_ms
        )
        deadline = time.monotonic() + poll_ms / 1000
        fifo = topic.message_type is MessageType.FIFO
        pop = self._broker.pop
        while True:
            since = self._hub.arrivals(topic.name)
            deliveries = pop.pop(
                group, topic.name, queues, wanted, invisible, message_filter, fifo=fifo
            )
            # Those out of attempts go to the DLQ topic: a store write, awaited.
            await pop.move_due_dead_letters()
            if deliveries:
                return self._found(request, deliveries, invisible)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                code = POLLING_TIMEOUT if poll_ms else ResponseCode.PULL_NOT_FOUND
                response = request.response(code, "no new message")
                response.ext_fields.update(
                    popTime=str(int(time.time() * 1000)),
                    invisibleTime=str(invisible),
                    reviveQid=str(REVIVE_QUEUE),
                    restNum="0",
                )
                return response
            due = pop.next_visible_at(group, topic.name, fifo=fifo)
            if due is not None:
                remaining = min(remaining, max(0.0, due / 1000 - time.time()) + 0.01)
            await self._wait(group, topic.name, remaining, since)

    async def _wait(self, group: str, topic: str, seconds: float, since: int) -> None:
        key = (group, topic)
        self._waiting[key] = self._waiting.get(key, 0) + 1
        try:
            await self._hub.wait(topic, seconds, since)
        finally:
            self._waiting[key] -= 1
            if not self._waiting[key]:
                del self._waiting[key]

    async def notification(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        group = _group(request)
        topic = self._topic(request)
        queues = self._queues(group, topic, int_field(request, "queueId", -1))
        poll_ms = min(
            max(int_field(request, "pollTime", 0), 0), self._broker.config.max_long_polling_ms
        )
        deadline = time.monotonic() + poll_ms / 1000
        pop = self._broker.pop
        while True:
            since = self._hub.arrivals(topic.name)
            found = pop.has_deliverable(group, topic.name, queues)
            remaining = deadline - time.monotonic()
            if found or remaining <= 0:
                response = request.response(ResponseCode.SUCCESS)
                response.ext_fields.update(hasMsg=str(found).lower(), pollingFull="false")
                return response
            due = pop.next_visible_at(group, topic.name, fifo=False)
            if due is not None:
                remaining = min(remaining, max(0.0, due / 1000 - time.time()) + 0.01)
            await self._wait(group, topic.name, remaining, since)

    def polling_info(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        group = _group(request)
        topic = self._topic(request)
        response = request.response(ResponseCode.SUCCESS)
        response.ext_fields["pollingNum"] = str(self._waiting.get((group, topic.name), 0))
        return response

    def _found(
        self, request: RemotingCommand, deliveries: list[Delivery], invisible: int
    ) -> RemotingCommand:
        commit_log = self._broker.store.commit_log
        records = []
        for d in deliveries:
            record = commit_log.read(d.message.physical_offset, d.message.store_size)
            if record is None:
                continue  # gone with retention since it was read: it is not delivered
            records.append(_with_reconsume_times(record, d.message.sys_flag, d.attempt - 1))
        response = request.response(ResponseCode.SUCCESS)
        response.body = b"".join(records)
        response.ext_fields.update(
            popTime=str(deliveries[0].retrieve_time),
            invisibleTime=str(invisible),
            reviveQid=str(REVIVE_QUEUE),
            restNum="0",
        )
        return response

    def ack(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        group = _group(request)
        topic = text_field(request, "topic")
        try:
            self._broker.pop.ack(
                group,
                topic,
                int_field(request, "queueId"),
                int_field(request, "offset"),
                _pop_time(request),
            )
        except PopError as exc:
            return request.response(NO_MESSAGE, str(exc))
        # An ack can release a FIFO queue that waiting pops skipped.
        self._hub.notify(topic)
        return request.response(ResponseCode.SUCCESS)

    def batch_ack(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        acks = _batch_acks(request.body)
        if not acks:
            return request.response(NO_MESSAGE, "the batch ack names no message")
        pop = self._broker.pop
        topics = set()
        for group, topic, queue_id, offsets, pop_time in acks:
            if group_name_problem(group) is not None:
                continue  # no such group has deliveries to settle
            topics.add(topic)
            for offset in offsets:
                # One settled or expired already comes again, as after its own ack.
                with contextlib.suppress(PopError):
                    pop.ack(group, topic, queue_id, offset, pop_time)
        for topic in topics:
            self._hub.notify(topic)
        return request.response(ResponseCode.SUCCESS)

    def change_invisible_time(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        group = _group(request)
        topic = text_field(request, "topic")
        invisible = self._invisible_ms(request, 0)
        try:
            d = self._broker.pop.change_invisible_time(
                group,
                topic,
                int_field(request, "queueId"),
                int_field(request, "offset"),
                _pop_time(request),
                invisible,
            )
        except PopError as exc:
            return request.response(NO_MESSAGE, str(exc))
        # Waiting pops planned their sleep with the old due time.
        self._hub.notify(topic)
        response = request.response(ResponseCode.SUCCESS)
        response.ext_fields.update(
            popTime=str(d.retrieve_time),
            invisibleTime=str(d.invisible_time),
            reviveQid=str(REVIVE_QUEUE),
        )
        return response


# A batch ack's entries: (group, topic, queue id, offsets, pop time).
BatchAck = tuple[str, str, int, list[int], int]
# A bit set wider than this names offsets no pop handed out (a pop hands out 32).
_MAX_BITSET_BYTES = 1024


def _batch_acks(body: bytes) -> list[BatchAck]:
    """The entries of RocketMQ's BatchAckMessageRequestBody (fastjson's short names or
    the long ones; the bit set as java.util.BitSet's bytes, base64, bit i at offset
    startOffset + i); HeaderError says what is wrong."""
    try:
        document = json.loads(body or b"{}")
        acks = []
        for entry in document.get("acks") or []:

            def field(short: str, long: str, entry: dict = entry) -> object:
                return entry[short] if short in entry else entry[long]

            bits = base64.b64decode(str(field("b", "bitSet")), validate=True)
            if len(bits) > _MAX_BITSET_BYTES:
                raise ValueError(f"a bit set of {len(bits)} bytes is more than any pop")
            start = int(str(field("so", "startOffset")))
            offsets = [
                start + index * 8 + bit
                for index, byte in enumerate(bits)
                for bit in range(8)
                if byte >> bit & 1
            ]
            acks.append(
                (
                    str(field("c", "consumerGroup")),
                    str(field("t", "topic")),
                    int(str(field("q", "queueId"))),
                    offsets,
                    int(str(field("pt", "popTime"))),
                )
            )
        return acks
    except (ValueError, TypeError, KeyError, AttributeError, binascii.Error) as exc:
        raise HeaderError(f"the body is not RocketMQ's BatchAckMessageRequestBody: {exc}") from None


def _with_reconsume_times(record: bytes, sys_flag: int, times: int) -> bytes:
    """``record`` with its RECONSUMETIMES field set to ``times``."""
    at = store_timestamp_offset(sys_flag) + 8 + (20 if sys_flag & STOREHOST_V6 else 8)
    patched = bytearray(record)
    patched[at : at + 4] = times.to_bytes(4, "big", signed=True)
    return bytes(patched)
