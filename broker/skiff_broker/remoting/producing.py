"""SEND_MESSAGE, SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE: 4.x producers' messages into the store.

The same rules as the gRPC door (``wire.message_rules``, ``wire.properties``, the topic's
writability, the master-only store) and the same append path (``SendCoalescer``), so a
message is stored the same whichever door took it.

Invariants:
- A message is acknowledged (SUCCESS) only once the store answered PUT_OK; the response
  carries RocketMQ's offset message ID (store host + commit-log offset) in ``msgId``,
  the queue and the first queue offset; a batch's IDs are joined by commas.
- A message that names a property the broker keeps for itself (beyond the ones a 4.x
  producer sets: ``PRODUCER_SET``) is refused whole: it could forge broker state.
- A batch is stored whole or not at all: one bad message refuses the batch.
- Every stored message has a message ID (UNIQ_KEY): one the producer did not set (a
  message without a RocketMQ client's ID, or a Go client v2 batch entry) is made here, as
  RocketMQ's broker does for a single message.
- A send to ``%RETRY%<group>`` is a 4.x consumer's own fallback when its send-back
  failed: RocketMQ's rules for it (its broker's handleRetryAndDLQ) apply. The copy
  goes to ``%DLQ%<group>`` at once when its ``reconsumeTimes`` exceeds the header's
  ``maxReconsumeTimes`` (else the group's), or while an orderly member holds a queue
  lock of the group; otherwise it waits out its delay level like any delayed send.
  The broker's own properties the consumer copied from the delivered message are
  dropped, except the ones that say where it came from (``RETRY_TOPIC``,
  ``ORIGIN_MESSAGE_ID``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import struct
import time
from collections.abc import Awaitable, Callable

from ..client.message_id import new_message_id
from ..delivery.send_coalescing import SendCoalescer
from ..delivery.topic_writes import TopicWriteRefused, WriteRefusal, require_writer, writable_topic
from ..metadata.topic_table import TopicConfig, validate_topic_name
from ..runtime import Broker
from ..store.message import Message
from ..store.results import PutResult, PutStatus
from ..wire import property_names as prop
from ..wire.compressed_body import compressed_body_problem
from ..wire.message_rules import message_problem
from ..wire.properties import decode_properties, properties_problem
from ..wire.record_codec import offset_message_id
from ..wire.record_layout import COMPRESSED, TRANSACTION_MASK, TRANSACTION_PREPARED_TYPE
from ..wire.resource_names import group_name_problem
from .access import ACCESS_KEY
from .codes import RequestCode, ResponseCode
from .connection import RemotingConnection
from .frames import RemotingCommand
from .redelivery import DLQ_QUEUES, RETRY_PREFIX, RETRY_QUEUES, max_reconsume_times
from .service import HeaderError, Refused, int_field, text_field

# SEND_MESSAGE_V2 abbreviates SendMessageRequestHeader's field names to one letter each.
V2_NAMES = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
    "n": "brokerName",
}

# Reserved names a 4.x producer sets itself (MessageConst): stored as RocketMQ stores them.
PRODUCER_SET = frozenset(
    {
        prop.TAGS,
        prop.KEYS,
        prop.UNIQ_KEY,
        "WAIT",
        "DELAY",
        prop.PRODUCER_GROUP,
        "MAX_RECONSUME_TIMES",
        "TRACE_ON",
        "MSG_REGION",
        "INSTANCE_ID",
        "CORRELATION_ID",
        "REPLY_TO_CLIENT",
        "TTL",
        "CLUSTER",
    }
)
# ... and the ones a 4.x transactional producer sets on a half message.
HALF_MESSAGE_SET = frozenset({prop.TRANSACTION_PREPARED, prop.CHECK_IMMUNITY_TIME_IN_SECONDS})
# ... and the ones a retry copy keeps from the message it copies (a 4.x consumer sends the
# delivered message's properties whole; the rest are the broker's, set again as needed).
RETRY_KEPT = PRODUCER_SET | frozenset(
    {prop.RETRY_TOPIC, prop.ORIGIN_MESSAGE_ID, prop.MESSAGE_GROUP, prop.TRACE_CONTEXT}
)
DELAY_LEVEL = "DELAY"
# RocketMQ's default messageDelayLevel, 1s 5s 10s 30s 1m 2m ... 10m 20m 30m 1h 2h.
DELAY_LEVEL_SECONDS = (1, 5, 10, 30, *(60 * m for m in range(1, 11)), 1200, 1800, 3600, 7200)

_PUT_CODES = {
    PutStatus.PUT_OK: ResponseCode.SUCCESS,
    PutStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.DISK_FULL: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
}
_WRITE_REFUSALS = {
    WriteRefusal.REPLICA: ResponseCode.SERVICE_NOT_AVAILABLE,
    WriteRefusal.NO_SUCH_TOPIC: ResponseCode.TOPIC_NOT_EXIST,
    WriteRefusal.NOT_WRITABLE: ResponseCode.NO_PERMISSION,
}
# A batch entry: total size, magic code, body CRC, flag, then the body's length.
_BATCH_ENTRY = struct.Struct(">iiiii")


def send_header(request: RemotingCommand) -> dict[str, str]:
    """The request's SendMessageRequestHeader with full field names, whatever the code."""
    if request.code == RequestCode.SEND_MESSAGE:
        return request.ext_fields
    return {V2_NAMES.get(name, name): value for name, value in request.ext_fields.items()}


# Stores a half message of a producer group sent over a connection: (result, transaction id).
# (message, producer group, connection, access key that signed the send) -> stored, id.
HalfMessageStore = Callable[
    [Message, str, RemotingConnection, str], Awaitable[tuple[PutResult, str]]
]


class Producing:
    """``prepare`` stores half messages; without it they go straight to the transactions."""

    def __init__(
        self,
        broker: Broker,
        prepare: HalfMessageStore | None = None,
        group_locked: Callable[[str], bool] = lambda group: False,
    ) -> None:
        self._broker = broker
        self._prepare = prepare
        self._group_locked = group_locked
        self._coalescer = SendCoalescer(broker.store)

    def handlers(self) -> dict:
        return {
            RequestCode.SEND_MESSAGE: self.send,
            RequestCode.SEND_MESSAGE_V2: self.send,
            RequestCode.SEND_BATCH_MESSAGE: self.send,
        }

    async def send(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        header = RemotingCommand(code=0, ext_fields=send_header(request))
        try:
            topic_name = text_field(header, "topic")
            retry = topic_name.startswith(RETRY_PREFIX)
            if retry:
                await self._ensure_retry_topic(request, topic_name)
            topic = self._topic(topic_name)
            queue_id = int_field(header, "queueId", -1)
            if not 0 <= queue_id < topic.write_queue_nums:
                raise Refused(
                    ResponseCode.SYSTEM_ERROR,
                    f"queueId {queue_id} is illegal: topic {topic.name} has "
                    f"{topic.write_queue_nums} write queues; refresh the route",
                )
            sys_flag = int_field(header, "sysFlag", 0)
            # A transactional producer's half message (TransactionMQProducer).
            prepared = sys_flag & TRANSACTION_MASK == TRANSACTION_PREPARED_TYPE
            if sys_flag & TRANSACTION_MASK and not prepared:
                raise Refused(
                    ResponseCode.MESSAGE_ILLEGAL,
                    "a message is sent as a half message (TRANSACTION_PREPARED_TYPE) or "
                    "plain; a transaction is ended with END_TRANSACTION",
                )
            if prepared and retry:
                raise Refused(
                    ResponseCode.MESSAGE_ILLEGAL,
                    f"a retry to {topic_name} cannot be a half message; send it plain",
                )
            if prepared and request.code == RequestCode.SEND_BATCH_MESSAGE:
                raise Refused(
                    ResponseCode.MESSAGE_ILLEGAL,
                    "a batch cannot be transactional (as in RocketMQ); send half messages alone",
                )
            born_timestamp = int_field(header, "bornTimestamp", 0)
            if request.code == RequestCode.SEND_BATCH_MESSAGE:
                entries = self._batch_entries(request.body)
            else:
                properties = decode_properties(header.ext_fields.get("properties", ""))
                entries = [(int_field(header, "flag", 0), request.body, properties)]
            messages = [
                self._message(
                    topic,
                    queue_id,
                    body,
                    properties,
                    flag=flag,
                    sys_flag=sys_flag,
                    born_timestamp=born_timestamp,
                    born_host=connection.address,
                    reconsume_times=int_field(header, "reconsumeTimes", 0),
                    prepared=prepared,
                    retry=retry,
                )
                for flag, body, properties in entries
            ]
            if retry and self._dead_letter(topic_name, header):
                return await self._to_dead_letters(request, topic_name, messages[0])
        except HeaderError as exc:
            return request.response(ResponseCode.MESSAGE_ILLEGAL, str(exc))
        except Refused as exc:
            return request.response(exc.code, exc.remark)
        if len(messages) > 1 and any(m.properties.get(DELAY_LEVEL, "0") != "0" for m in messages):
            return request.response(
                ResponseCode.MESSAGE_ILLEGAL,
                "a batch cannot carry delay levels (as in RocketMQ); send delayed messages alone",
            )
        if prepared:
            if messages[0].properties.get(DELAY_LEVEL, "0") != "0":
                return request.response(
                    ResponseCode.MESSAGE_ILLEGAL,
                    "a transactional message cannot carry a delay level (RocketMQ's producer "
                    "drops it); send it without one",
                )
            group = header.ext_fields.get("producerGroup") or messages[0].properties.get(
                prop.PRODUCER_GROUP, ""
            )
            if self._prepare is not None:
                result, transaction_id = await self._prepare(
                    messages[0], group, connection, request.ext_fields.get(ACCESS_KEY) or ""
                )
            else:
                result, transaction_id = await self._broker.transactions.prepare(messages[0], group)
            response = self._answer(request, result, queue_id, 0, 1)
            if transaction_id:
                response.ext_fields["transactionId"] = transaction_id
            return response
        delay_ms = self._delay_ms(messages)
        if delay_ms:
            result = await self._broker.delays.schedule(messages[0], _now_ms() + delay_ms)
            return self._answer(request, result, queue_id, 0, 1)
        result, first = await self._coalescer.put(topic.name, messages)
        return self._answer(request, result, queue_id, first, len(messages))

    async def _ensure_retry_topic(self, request: RemotingCommand, name: str) -> None:
        """A group's retry topic exists once its consumer's fallback writes to it."""
        if request.code == RequestCode.SEND_BATCH_MESSAGE:
            raise Refused(
                ResponseCode.MESSAGE_ILLEGAL,
                f"batch request does not support retry group {name} (as in RocketMQ); "
                "send retries one at a time",
            )
        problem = group_name_problem(name[len(RETRY_PREFIX) :])
        if problem is not None:
            raise Refused(ResponseCode.MESSAGE_ILLEGAL, problem)
        if self._broker.topics.get(name) is None and not self._broker.is_replica:
            # Creating the topic writes topics.json: not on the event loop.
            await asyncio.to_thread(self._broker.ensure_system_topic, name, RETRY_QUEUES)

    def _dead_letter(self, retry_topic: str, header: RemotingCommand) -> bool:
        """RocketMQ's choice for a consumer's own retry: past its reconsume times, or an
        orderly group's (one holding queue locks), whose retries would break its order."""
        group = retry_topic[len(RETRY_PREFIX) :]
        most = int_field(header, "maxReconsumeTimes", max_reconsume_times(self._broker, group))
        return int_field(header, "reconsumeTimes", 0) > most or self._group_locked(group)

    async def _to_dead_letters(
        self, request: RemotingCommand, retry_topic: str, message: Message
    ) -> RemotingCommand:
        dlq = prop.dlq_topic(retry_topic[len(RETRY_PREFIX) :])
        await asyncio.to_thread(self._broker.ensure_system_topic, dlq, DLQ_QUEUES)
        properties = {k: v for k, v in message.properties.items() if k != DELAY_LEVEL}
        dead = dataclasses.replace(message, topic=dlq, queue_id=0, properties=properties)
        result, first = await self._coalescer.put(dlq, [dead])
        return self._answer(request, result, 0, first, 1)

    def _topic(self, name: str) -> TopicConfig:
        try:
            validate_topic_name(name)
        except ValueError as exc:
            raise Refused(ResponseCode.MESSAGE_ILLEGAL, str(exc)) from None
        if name in prop.INTERNAL_TOPICS:
            raise Refused(ResponseCode.NO_PERMISSION, f"topic {name} is internal to the broker")
        try:
            require_writer(self._broker.store.read_only_reason)
            return writable_topic(self._broker, name)
        except TopicWriteRefused as exc:
            raise Refused(_WRITE_REFUSALS[exc.refusal], exc.message) from None

    def _batch_entries(self, body: bytes) -> list[tuple[int, bytes, dict[str, str]]]:
        """The messages of a batch body (MessageDecoder's batch encoding)."""
        entries = []
        at = 0
        while at < len(body):
            if at + _BATCH_ENTRY.size > len(body):
                raise Refused(ResponseCode.MESSAGE_ILLEGAL, "the batch body ends inside an entry")
            total, _magic, _crc, flag, body_length = _BATCH_ENTRY.unpack_from(body, at)
            end = at + total
            start = at + _BATCH_ENTRY.size
            if total < _BATCH_ENTRY.size + 2 or end > len(body) or body_length < 0:
                raise Refused(
                    ResponseCode.MESSAGE_ILLEGAL, "a batch entry's sizes are inconsistent"
                )
            if start + body_length + 2 > end:
                raise Refused(ResponseCode.MESSAGE_ILLEGAL, "a batch entry's body overruns it")
            message_body = body[start : start + body_length]
            (properties_length,) = struct.unpack_from(">h", body, start + body_length)
            properties_at = start + body_length + 2
            if properties_length < 0 or properties_at + properties_length != end:
                raise Refused(ResponseCode.MESSAGE_ILLEGAL, "a batch entry's properties overrun it")
            properties = decode_properties(body[properties_at:end])
            entries.append((flag, message_body, properties))
            at = end
        if not entries:
            raise Refused(ResponseCode.MESSAGE_ILLEGAL, "a batch needs at least one message")
        return entries

    def _message(
        self,
        topic: TopicConfig,
        queue_id: int,
        body: bytes,
        properties: dict[str, str],
        *,
        flag: int,
        sys_flag: int,
        born_timestamp: int,
        born_host: str,
        reconsume_times: int,
        prepared: bool = False,
        retry: bool = False,
    ) -> Message:
        limit = self._broker.config.store.max_message_size
        if not body:
            raise Refused(ResponseCode.MESSAGE_ILLEGAL, "message body must not be empty")
        if len(body) > limit:
            raise Refused(
                ResponseCode.MESSAGE_ILLEGAL,
                f"message body is {len(body)} bytes; the limit is {limit}",
            )
        if not properties.get(prop.UNIQ_KEY, "").strip():
            # Both doors look messages up by this ID; RocketMQ leaves a batch entry
            # without one, so its consumers show the offset ID there instead.
            properties = {**properties, prop.UNIQ_KEY: new_message_id()}
        if retry:
            properties = {
                k: v for k, v in properties.items() if k in RETRY_KEPT or not prop.is_reserved(k)
            }
        allowed = PRODUCER_SET | HALF_MESSAGE_SET if prepared else PRODUCER_SET
        if retry:
            allowed = RETRY_KEPT
        for name in properties:
            if prop.is_reserved(name) and name not in allowed:
                raise Refused(
                    ResponseCode.MESSAGE_ILLEGAL,
                    f"property {name} is the broker's own; a producer may not set it",
                )
        user = {k: v for k, v in properties.items() if not prop.is_reserved(k)}
        problem = message_problem(
            user, properties.get(prop.TAGS), properties.get(prop.KEYS, "").split()
        )
        text = properties_problem(properties) if problem is None else problem.text
        if text is not None:
            raise Refused(ResponseCode.MESSAGE_ILLEGAL, text)
        if DELAY_LEVEL in properties:
            level = properties[DELAY_LEVEL]
            if not level.isdigit() or int(level) > len(DELAY_LEVEL_SECONDS):
                raise Refused(
                    ResponseCode.MESSAGE_ILLEGAL,
                    f"delay level {level!r} is not one of 1 to {len(DELAY_LEVEL_SECONDS)}",
                )
        if sys_flag & COMPRESSED:
            problem_text = compressed_body_problem(body, limit)
            if problem_text is not None:
                raise Refused(
                    ResponseCode.MESSAGE_ILLEGAL,
                    f"{problem_text}; send the body uncompressed or as valid zlib",
                )
        return Message(
            topic=topic.name,
            body=body,
            queue_id=queue_id,
            properties=properties,
            flag=flag,
            sys_flag=sys_flag & COMPRESSED,
            born_timestamp=born_timestamp,
            born_host=born_host or "127.0.0.1:0",
            reconsume_times=reconsume_times,
        )

    @staticmethod
    def _delay_ms(messages: list[Message]) -> int:
        """The delay a lone message asks for by its level (0: none)."""
        if len(messages) != 1:
            return 0
        level = messages[0].properties.get(DELAY_LEVEL, "0")
        return DELAY_LEVEL_SECONDS[int(level) - 1] * 1000 if int(level) > 0 else 0

    def _answer(
        self, request: RemotingCommand, result: PutResult, queue_id: int, first: int, count: int
    ) -> RemotingCommand:
        code = _PUT_CODES[result.status]
        response = request.response(code, result.reason or None)
        append = result.append
        if append is None:
            return response
        store_host = self._broker.store.commit_log.store_host
        ids = [
            offset_message_id(store_host, append.physical_offsets[position])
            for position in range(first, first + count)
        ]
        response.ext_fields.update(
            msgId=",".join(ids),
            queueId=str(queue_id),
            queueOffset=str(append.queue_offsets[first]),
        )
        return response


def _now_ms() -> int:
    return int(time.time() * 1000)
