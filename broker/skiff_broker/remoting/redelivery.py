"""CONSUMER_SEND_MSG_BACK: a 4.x consumer's failed message into ``%RETRY%<group>`` or its DLQ.

RocketMQ's reconsume rules (its broker's consumerSendMsgBack), applied to the message the
request names by commit-log offset:

- A message consumed ``reconsumeTimes`` times already goes to ``%DLQ%<group>`` once that
  reaches the group's maximum (the header's ``maxReconsumeTimes``, else the group's
  ``retryMaxTimes`` if set, else the broker's ``--max-delivery-attempts`` less one: 16
  by default), or at once when the client asks
  with a negative delay level. Otherwise it goes to ``%RETRY%<group>`` after delay level
  ``3 + reconsumeTimes`` (10 s, 30 s, 1 min, ...) unless the client names a level; levels
  past the last (2 h) are the last.
- The copy keeps body, flag, sys flag, born timestamp and host and every property; its
  ``reconsumeTimes`` is one more; ``RETRY_TOPIC`` names the topic it was first consumed
  from and ``ORIGIN_MESSAGE_ID`` the first copy's offset message ID (both kept from an
  earlier retry). A DLQ copy carries no delay level.
- The retry copy is held in the schedule topic by the same ``DelayService`` as delayed
  sends, so it survives restarts; the DLQ copy is written at once. Either is acknowledged
  (SUCCESS) only once the store answered PUT_OK.
- Broker-internal records (schedules, half messages) are never sent back: that would
  deliver a message its transaction or schedule still holds.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

from ..delivery.delay import ROCKETMQ_LEVEL_DELAYS_MS
from ..runtime import Broker
from ..store.message import Message, StoredMessage
from ..store.results import PutStatus
from ..wire import property_names as prop
from ..wire.hosts import encode_host
from ..wire.record_codec import offset_message_id
from ..wire.resource_names import group_name_problem
from .codes import RequestCode, ResponseCode
from .connection import RemotingConnection
from .frames import RemotingCommand
from .service import HeaderError, int_field, text_field

RETRY_PREFIX = "%RETRY%"
# RocketMQ's msgExt.setDelayTimeLevel: the level a retry waits in the schedule topic.
DELAY_LEVEL = "DELAY"
# RocketMQ's default when the client names no level: 3 (10 s) for the first retry.
FIRST_RETRY_LEVEL = 3
# RocketMQ sizes: its retry topics' and DLQs' queue counts per group.
RETRY_QUEUES = 1
DLQ_QUEUES = 1
# A record's size field bounds what a lookup by offset may read.
_MAX_RECORD_SLACK = 64 * 1024


def retry_topic(group: str) -> str:
    return f"{RETRY_PREFIX}{group}"


@dataclasses.dataclass(frozen=True, slots=True)
class Redelivery:
    """Where a failed message goes: ``level`` 0 for the DLQ, else the retry delay level."""

    dead_letter: bool
    level: int


def redelivery_for(reconsume_times: int, max_reconsume_times: int, delay_level: int) -> Redelivery:
    """RocketMQ's choice for a message consumed ``reconsume_times`` times before."""
    if reconsume_times >= max_reconsume_times or delay_level < 0:
        return Redelivery(dead_letter=True, level=0)
    level = delay_level or FIRST_RETRY_LEVEL + reconsume_times
    return Redelivery(dead_letter=False, level=min(level, len(ROCKETMQ_LEVEL_DELAYS_MS)))


def max_reconsume_times(broker: Broker, group: str) -> int:
    """The reconsume times after which ``group``'s failed messages are dead letters."""
    return broker.retry_max_times(group)


class SendBack:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def handlers(self) -> dict:
        return {RequestCode.CONSUMER_SEND_MSG_BACK: self.send_back}

    async def send_back(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        group = text_field(request, "group")
        problem = group_name_problem(group)
        if problem is not None:
            raise HeaderError(problem)
        physical = int_field(request, "offset")
        delay_level = int_field(request, "delayLevel", 0)
        max_reconsume = int_field(
            request, "maxReconsumeTimes", max_reconsume_times(self._broker, group)
        )
        if self._broker.is_replica:
            return request.response(
                ResponseCode.SERVICE_NOT_AVAILABLE,
                f"{self._broker.store.read_only_reason}; send the message back to the master",
            )
        original = self._look_up(physical)
        if original is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"look message by offset failed, {physical}: no message starts there "
                "(retention may have removed it)",
            )
        if original.topic in prop.INTERNAL_TOPICS:
            return request.response(
                ResponseCode.NO_PERMISSION,
                f"the record at offset {physical} belongs to the broker's {original.topic}",
            )
        plan = redelivery_for(original.reconsume_times, max_reconsume, delay_level)
        copy = self._copy(original, group, plan)
        # Creating the topic writes topics.json: not on the event loop.
        queues = DLQ_QUEUES if plan.dead_letter else RETRY_QUEUES
        await asyncio.to_thread(self._broker.ensure_system_topic, copy.topic, queues)
        if plan.dead_letter:
            result = await self._broker.store.put_messages_async([copy])
        else:
            due = int(time.time() * 1000) + ROCKETMQ_LEVEL_DELAYS_MS[plan.level - 1]
            result = await self._broker.delays.schedule(copy, due)
        if result.status is not PutStatus.PUT_OK:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"could not store the message in {copy.topic}: {result.reason}; "
                "the consumer will send it back again",
            )
        return request.response(ResponseCode.SUCCESS)

    def _look_up(self, physical: int) -> StoredMessage | None:
        store = self._broker.store
        if physical < 0:
            return None
        head = store.commit_log.read(physical, 4)
        if head is None:
            return None
        size = int.from_bytes(head, "big", signed=True)
        if not 0 < size <= store.config.max_message_size + _MAX_RECORD_SLACK:
            return None
        return store.get_message_at(physical, size)

    def _copy(self, original: StoredMessage, group: str, plan: Redelivery) -> Message:
        properties = dict(original.properties)
        properties.setdefault(prop.RETRY_TOPIC, original.topic)
        if not properties.get(prop.ORIGIN_MESSAGE_ID, "").strip():
            properties[prop.ORIGIN_MESSAGE_ID] = offset_message_id(
                encode_host(original.store_host), original.physical_offset
            )
        if plan.dead_letter:
            properties.pop(DELAY_LEVEL, None)
            topic = prop.dlq_topic(group)
        else:
            properties[DELAY_LEVEL] = str(plan.level)
            topic = retry_topic(group)
        return Message(
            topic=topic,
            body=original.body,
            queue_id=0,
            properties=properties,
            flag=original.flag,
            sys_flag=original.sys_flag,
            born_timestamp=original.born_timestamp,
            born_host=original.born_host,
            reconsume_times=original.reconsume_times + 1,
        )
