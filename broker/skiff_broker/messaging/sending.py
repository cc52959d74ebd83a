"""SendMessage and EndTransaction: validating producers' messages and storing them.

Also the other direction of a transaction: asking a producer to resolve one.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from ..delivery.send_coalescing import SendCoalescer
from ..delivery.topic_writes import (
    QueueRotation,
    TopicWriteRefused,
    WriteRefusal,
    require_writer,
    writable_topic,
)
from ..delivery.transactions import CheckSender, TransactionRefused
from ..metadata.topic_table import TopicConfig
from ..runtime import Broker
from ..store.hashing import java_string_hash
from ..store.message import Message, StoredMessage
from ..store.results import PutResult
from ..telemetry.traffic import NO_TRAFFIC, TrafficObserver
from ..wire import property_names as prop
from ..wire.compressed_body import compressed_body_problem
from ..wire.message_rules import Refusal, message_group_problem, message_problem
from ..wire.properties import properties_problem
from ..wire.record_layout import COMPRESSED
from .clients import ClientRegistry, ClientSession
from .convert import DELAY, FIFO, GZIP, NORMAL, TRANSACTION, millis, record_host, to_proto
from .routing import accepted_types, require_topic_name
from .status import CODE_OK, OK, Code, RequestError, put_code, status, transaction_refused

log = logging.getLogger(__name__)

# The v2 status code of each kind of property refusal.
_REFUSAL_CODES = {
    Refusal.KEY: Code.ILLEGAL_MESSAGE_KEY,
    Refusal.TAG: Code.ILLEGAL_MESSAGE_TAG,
    Refusal.PROPERTY: Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
    Refusal.TOO_LARGE: Code.MESSAGE_PROPERTIES_TOO_LARGE,
    Refusal.GROUP: Code.ILLEGAL_MESSAGE_GROUP,
}
_TYPE_NAMES = {v: k for k, v in pb.MessageType.items()}
# How late a producer may ask for its transaction to be checked (RocketMQ's proxy: 1 h).
MAX_TRANSACTION_RECOVERY_S = 3600
# Delivery timestamps this large are milliseconds in the seconds field (some clients do that).
_SECONDS_LIMIT = 10**11


_WRITE_REFUSAL_CODES = {
    WriteRefusal.REPLICA: Code.FORBIDDEN,
    WriteRefusal.NO_SUCH_TOPIC: Code.TOPIC_NOT_FOUND,
    WriteRefusal.NOT_WRITABLE: Code.FORBIDDEN,
}


def _write_refused(exc: TopicWriteRefused) -> RequestError:
    return RequestError(_WRITE_REFUSAL_CODES[exc.refusal], exc.message)


def _now_ms() -> int:
    return int(time.time() * 1000)


# RocketMQ's message_type metric label values.
_METRIC_TYPES = {
    pb.MessageType.NORMAL: "normal",
    pb.MessageType.FIFO: "fifo",
    pb.MessageType.DELAY: "delay",
    pb.MessageType.TRANSACTION: "transaction",
}


class Sender:
    def __init__(self, broker: Broker, traffic: TrafficObserver = NO_TRAFFIC) -> None:
        self._broker = broker
        self._traffic = traffic
        self._queues = QueueRotation()
        self._coalescer = SendCoalescer(broker.store)

    # -- SendMessage --------------------------------------------------------

    async def send(self, request: spb.SendMessageRequest, peer: str) -> spb.SendMessageResponse:
        if not request.messages:
            raise RequestError(Code.MESSAGE_CORRUPTED, "a send request needs at least one message")
        topic_name = request.messages[0].topic.name
        if any(m.topic.name != topic_name for m in request.messages):
            raise RequestError(
                Code.MESSAGE_CORRUPTED, "all messages of one send request must share a topic"
            )
        self._require_master()
        topic = self._writable_topic(topic_name)
        # Messages without a group share one queue per request, so a batching
        # producer's request becomes one contiguous append.
        shared_queue = self._queues.next_queue(topic)
        # Entries are filled in place: each is answered once, in the request's order.
        response = spb.SendMessageResponse()
        entries = [response.entries.add() for _ in request.messages]
        plain: list[tuple[int, str, Message]] = []
        # Body sizes of the messages stored, by metric message type: reported once per request.
        stored: dict[str, list[int]] = {}
        plain_types: list[str] = []
        for index, proto in enumerate(request.messages):
            message_id = proto.system_properties.message_id
            try:
                message, message_type, deliver_at = self._to_store_message(
                    proto, topic, peer, shared_queue
                )
                if message_type == TRANSACTION:
                    result, transaction_id = await self._broker.transactions.prepare(
                        message, producer_group=topic.name
                    )
                    self._fill(entries[index], result, 0, message_id, transaction_id)
                    if result.ok:
                        stored.setdefault("transaction", []).append(len(proto.body))
                elif message_type == DELAY and deliver_at > _now_ms():
                    result = await self._broker.delays.schedule(message, deliver_at)
                    self._fill(entries[index], result, 0, message_id, "")
                    if result.ok:
                        stored.setdefault("delay", []).append(len(proto.body))
                else:
                    plain.append((index, message_id, message))
                    plain_types.append(_METRIC_TYPES.get(message_type, "normal"))
            except RequestError as exc:
                entries[index].status.CopyFrom(exc.to_status())
                entries[index].message_id = message_id
        if plain:
            result, first = await self._coalescer.put(topic.name, [m for _, _, m in plain])
            for position, (index, message_id, _) in enumerate(plain, first):
                self._fill(entries[index], result, position, message_id, "")
            if result.ok:
                for (index, _, _), kind in zip(plain, plain_types, strict=True):
                    stored.setdefault(kind, []).append(len(request.messages[index].body))
        for kind, sizes in stored.items():
            self._traffic.received(topic.name, kind, sizes)
        codes = {entry.status.code for entry in entries}
        if codes == {CODE_OK}:
            response.status.CopyFrom(OK)
        elif len(codes) == 1:
            response.status.CopyFrom(entries[0].status)
        else:
            response.status.CopyFrom(status(Code.MULTIPLE_RESULTS))
        return response

    def _require_master(self) -> None:
        try:
            require_writer(self._broker.store.read_only_reason)
        except TopicWriteRefused as exc:
            raise _write_refused(exc) from None

    def _writable_topic(self, name: str) -> TopicConfig:
        # The broker's own topics (delays, transactions) are system topics: refused here.
        require_topic_name(name)
        try:
            return writable_topic(self._broker, name)
        except TopicWriteRefused as exc:
            raise _write_refused(exc) from None

    @staticmethod
    def _fill(
        entry: spb.SendResultEntry,
        result: PutResult,
        position: int,
        message_id: str,
        transaction_id: str,
    ) -> None:
        code = put_code(result.status)
        if code == CODE_OK and not result.reason:
            entry.status.CopyFrom(OK)
        else:
            entry.status.CopyFrom(status(code, result.reason or "OK"))
        entry.message_id = message_id
        entry.transaction_id = transaction_id
        if result.append is not None:
            entry.offset = result.append.queue_offsets[position]

    @staticmethod
    def _group_queue(topic: TopicConfig, group: str) -> int:
        # A message group always lands in the same queue: its order is kept there.
        return abs(java_string_hash(group)) % topic.write_queue_nums

    def _to_store_message(
        self, proto: pb.Message, topic: TopicConfig, peer: str, shared_queue: int
    ) -> tuple[Message, int, int]:
        system = proto.system_properties
        config = self._broker.config
        if not system.message_id.strip():
            raise RequestError(Code.ILLEGAL_MESSAGE_ID, "message_id must not be blank")
        if not proto.body:
            raise RequestError(
                Code.MESSAGE_BODY_EMPTY, "message body cannot be empty; send at least one byte"
            )
        limit = config.store.max_message_size
        if len(proto.body) > limit:
            raise RequestError(
                Code.MESSAGE_BODY_TOO_LARGE,
                f"message body cannot exceed the max {limit} (this one is {len(proto.body)} "
                "bytes); send a smaller body, or start the broker with a larger "
                "--max-message-size",
            )
        tag = system.tag if system.HasField("tag") else None
        problem = message_problem(proto.user_properties, tag, system.keys)
        if problem is not None:
            raise RequestError(_REFUSAL_CODES[problem.refusal], problem.text)
        properties = dict(proto.user_properties)
        if tag is not None:
            properties[prop.TAGS] = tag
        if system.keys:
            properties[prop.KEYS] = " ".join(system.keys)
        properties[prop.UNIQ_KEY] = system.message_id
        message_type = system.message_type or self._implied_type(system)
        group = ""
        if system.message_group:
            # Checked on any message that names one, as RocketMQ does.
            problem = message_group_problem(system.message_group)
            if problem is not None:
                raise RequestError(Code.ILLEGAL_MESSAGE_GROUP, problem.text)
        if message_type == FIFO:
            group = system.message_group
            if not group:
                raise RequestError(
                    Code.ILLEGAL_MESSAGE_GROUP, "a FIFO message needs a message group"
                )
            properties[prop.MESSAGE_GROUP] = group
        if message_type == TRANSACTION and system.HasField(
            "orphaned_transaction_recovery_duration"
        ):
            # RocketMQ's proxy: maxTransactionRecoverySecond, in whole seconds.
            recovery_s = system.orphaned_transaction_recovery_duration.seconds
            if recovery_s > MAX_TRANSACTION_RECOVERY_S:
                raise RequestError(
                    Code.BAD_REQUEST,
                    "the max transaction recovery time of message is too large, max is "
                    f"{MAX_TRANSACTION_RECOVERY_S} (seconds); ask for a check within an hour",
                )
            properties[prop.CHECK_IMMUNITY_TIME_IN_SECONDS] = str(max(recovery_s, 0))
        deliver_at = 0
        if message_type == DELAY:
            if not system.HasField("delivery_timestamp"):
                raise RequestError(
                    Code.ILLEGAL_DELIVERY_TIME, "a DELAY message needs a delivery timestamp"
                )
            ts = system.delivery_timestamp
            deliver_at = ts.seconds if ts.seconds > _SECONDS_LIMIT else millis(ts)
            max_delay_ms = config.max_delay_ms
            if deliver_at - _now_ms() > max_delay_ms:
                raise RequestError(
                    Code.ILLEGAL_DELIVERY_TIME,
                    f"the max delay time of message is too large, max is {max_delay_ms} "
                    f"(milliseconds); deliver it at most {max_delay_ms / 3_600_000:g} h ahead",
                )
            properties[prop.DELIVER_AT_MS] = str(deliver_at)
        # After the message's own rules, as RocketMQ's proxy checks the topic's type last.
        if message_type not in accepted_types(topic):
            raise RequestError(
                Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                f"topic {topic.name!r} accepts {topic.message_type} messages; this one is "
                f"{_TYPE_NAMES.get(message_type, message_type)}",
            )
        if system.trace_context:
            properties[prop.TRACE_CONTEXT] = system.trace_context
        fallback = peer
        born_host = record_host(system.born_host, fallback) if system.born_host else fallback
        if system.born_host and born_host == fallback:
            properties[prop.BORN_HOST_TEXT] = system.born_host
        # What is built here must make a record wire's validator accepts: one bad
        # message is refused alone instead of failing the whole batch's append.
        property_problem = properties_problem(properties)
        if property_problem is not None:
            raise RequestError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, property_problem)
        sys_flag = 0
        if system.body_encoding == GZIP:
            body_problem = compressed_body_problem(proto.body, limit)
            if body_problem is not None:
                raise RequestError(
                    Code.MESSAGE_CORRUPTED,
                    f"message {system.message_id}: {body_problem}; send the body uncompressed "
                    "(body_encoding IDENTITY) or as valid gzip",
                )
            sys_flag = COMPRESSED
        message = Message(
            topic=topic.name,
            body=proto.body,
            queue_id=self._group_queue(topic, group) if group else shared_queue,
            properties=properties,
            sys_flag=sys_flag,
            born_timestamp=millis(system.born_timestamp)
            if system.HasField("born_timestamp")
            else 0,
            born_host=born_host,
        )
        return message, message_type, deliver_at

    @staticmethod
    def _implied_type(system: pb.SystemProperties) -> int:
        if system.message_group:
            return FIFO
        if system.HasField("delivery_timestamp"):
            return DELAY
        return NORMAL

    # -- EndTransaction -----------------------------------------------------

    async def end_transaction(
        self, request: spb.EndTransactionRequest
    ) -> spb.EndTransactionResponse:
        if not request.transaction_id:
            raise RequestError(Code.INVALID_TRANSACTION_ID, "transaction_id must not be blank")
        if request.resolution not in (
            pb.TransactionResolution.COMMIT,
            pb.TransactionResolution.ROLLBACK,
        ):
            # An unresolved answer from a check: ask again later.
            return spb.EndTransactionResponse(status=OK)
        self._require_master()
        try:
            await self._broker.transactions.end(
                topic=request.topic.name,
                message_id=request.message_id,
                transaction_id=request.transaction_id,
                commit=request.resolution == pb.TransactionResolution.COMMIT,
                from_check=request.source == pb.TransactionSource.SOURCE_SERVER_CHECK,
            )
        except TransactionRefused as exc:
            raise transaction_refused(exc) from None
        return spb.EndTransactionResponse(status=OK)


# -- transaction checks -----------------------------------------------------


# Whether a session may, now, be told about a topic's transactions; None: anyone may.
CheckAllowed = Callable[[ClientSession, str], bool]


def transaction_check_sender(
    clients: ClientRegistry,
    loop: asyncio.AbstractEventLoop,
    *,
    may_be_asked: CheckAllowed | None = None,
) -> CheckSender:
    """Sends RecoverOrphanedTransactionCommand to one producer of the message's topic.

    Only to a session whose Settings named the topic and, where ``may_be_asked`` is
    given (authentication on), that may publish to it at the moment the check is sent:
    the command carries the message, body and all.

    The transaction checker calls it from its own thread; the telemetry streams
    belong to ``loop``, so the command is handed over there.
    """

    def offer(message: StoredMessage, transaction_id: str) -> None:
        producers = [
            session
            for session in clients.producers_of(message.topic)
            if may_be_asked is None or may_be_asked(session, message.topic)
        ]
        if not producers:
            log.info(
                "no producer of %s that may publish to it is connected to resolve "
                "transaction %s; asking again later",
                message.topic,
                transaction_id,
            )
            return
        outbound = random.choice(producers).outbound
        if outbound is not None:
            outbound.put_nowait(
                spb.TelemetryCommand(
                    recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
                        message=to_proto(message), transaction_id=transaction_id
                    )
                )
            )

    def send(message: StoredMessage, transaction_id: str) -> bool:
        try:
            loop.call_soon_threadsafe(offer, message, transaction_id)
        except RuntimeError:  # the loop is closed: the broker is stopping
            return False
        return True

    return send
