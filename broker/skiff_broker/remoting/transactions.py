"""4.x transactional producers: END_TRANSACTION and the broker's CHECK_TRANSACTION_STATE.

Half messages are stored by SEND_MESSAGE (sys flag TRANSACTION_PREPARED_TYPE, see
``producing``) through the same ``TransactionService`` as the gRPC door, so a transaction
begun over either door is ended, checked and rolled back the same way.

Invariants:
- END_TRANSACTION is oneway, as RocketMQ's producers send it: never answered. It names
  the transaction by the ID the half message's send answered with (or, where that names
  no half message, by the half message's commit-log offset, as RocketMQ finds it) and by
  the message's ID; its topic is the half message's own. A commit or rollback type ends the
  transaction; type 0 (UNKNOW) leaves it to the checker.
- A check goes, as RocketMQ sends it, oneway over the connection of one producer of the
  half message's producer group (``PGROUP``) whose heartbeat is current: with the
  message as its producer sent it in RocketMQ's record encoding and the transaction ID
  it answers with. Where no 4.x producer of that group is connected the check goes to
  the gRPC door's producers instead (``fallback``).
- Producers are known by the connections their heartbeats and half messages came over,
  while those are open; a closed connection takes its producers with it. The table is
  read from the checker's thread, so it is guarded by a lock and copied.
- With authentication on, a check (it carries the message, body and all) goes only over
  a connection whose signed requests came from a user who may, at the moment the check
  is sent, publish to the message's topic: naming a producer group proves nothing, and
  the gRPC door's half messages name their topic as their group.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import itertools
import json
import logging
import random
import threading
from collections.abc import Callable

from ..auth.gate import may
from ..auth.rights import transaction_check_needs
from ..delivery.transactions import (
    CheckSender,
    TransactionRefused,
    decode_transaction_id,
    encode_transaction_id,
)
from ..runtime import Broker
from ..store.message import Message, StoredMessage
from ..store.results import PutResult
from ..wire import property_names as prop
from ..wire.hosts import encode_host
from ..wire.properties import encode_properties
from ..wire.record_codec import encode_record_into, offset_message_id, topic_field
from ..wire.record_layout import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    header_struct,
)
from .access import ACCESS_KEY
from .codes import RequestCode, ResponseCode
from .connection import RemotingConnection
from .frames import ONEWAY_FLAG, RemotingCommand
from .heartbeat_limits import producer_problem
from .service import Handler, HeaderError, int_field, text_field

log = logging.getLogger(__name__)

# TOTALSIZE, MAGICCODE, BODYCRC, QUEUEID, FLAG, QUEUEOFFSET, PHYSICALOFFSET, then SYSFLAG.
_SYSFLAG_AT = 36


# Whether the user of ``access_key``, on a connection from ``peer``, may now be sent the
# checks of ``topic``'s transactions; None (authentication off): anyone may.
CheckAllowed = Callable[[str, str, str], bool]


def check_allowed(broker: Broker) -> CheckAllowed:
    """The rule with authentication on: Pub on the topic, as the gRPC door's checks."""

    def allowed(access_key: str, topic: str, peer: str) -> bool:
        return bool(access_key) and may(
            broker.users, access_key, transaction_check_needs(topic), peer
        )

    return allowed


@dataclasses.dataclass(frozen=True)
class ProducerClient:
    client_id: str
    language: str
    version: int


def producer_heartbeat(body: bytes) -> tuple[str, list[str]]:
    """The ``clientID`` and the producer groups a heartbeat names (no groups if its body
    is not HeartbeatData: the consumers' handler answers what is wrong with it)."""
    try:
        data = json.loads(body or b"{}")
        groups = [str(p["groupName"]) for p in data.get("producerDataSet") or []]
        return str(data.get("clientID", "")), groups
    except (ValueError, TypeError, KeyError, AttributeError):
        return "", []


class ProducerTable:
    """Producer group -> the open connections producers of it heartbeat or send half
    messages over, each with the access key that signed them ("" unsigned)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: dict[str, dict[RemotingConnection, str]] = {}
        # What each connection's heartbeat said of its client: for the connection list.
        self._clients: dict[RemotingConnection, ProducerClient] = {}

    def heartbeat(
        self,
        groups: list[str],
        client_id: str,
        connection: RemotingConnection,
        access_key: str = "",
        language: str = "",
        version: int = 0,
    ) -> None:
        """Record an accepted heartbeat's producer groups and what it said of its client."""
        for group in groups:
            self.add(group, connection, access_key)
        if groups:
            with self._lock:
                self._clients[connection] = ProducerClient(client_id, language, version)

    def limit_problem(self, groups: list[str], connection: RemotingConnection) -> str | None:
        """Why recording ``groups`` for ``connection`` would pass its limit, or None."""
        with self._lock:
            registered = {g for g, members in self._groups.items() if connection in members}
        return producer_problem(registered, groups)

    def add(self, group: str, connection: RemotingConnection, access_key: str = "") -> None:
        with self._lock:
            self._groups.setdefault(group, {})[connection] = access_key

    def connection_closed(self, connection: RemotingConnection) -> None:
        with self._lock:
            self._clients.pop(connection, None)
            for group in list(self._groups):
                members = self._groups[group]
                members.pop(connection, None)
                if not members:
                    del self._groups[group]

    def connections_of(self, group: str) -> list[tuple[RemotingConnection, str]]:
        """The open connections of ``group``'s producers, each with its access key."""
        with self._lock:
            members = self._groups.get(group, {})
            return [(c, key) for c, key in members.items() if not c.closed]

    def clients_of(self, group: str) -> list[tuple[RemotingConnection, ProducerClient]]:
        """``group``'s producers on open connections, as their heartbeats described them."""
        with self._lock:
            members = self._groups.get(group, {})
            return [
                (c, self._clients.get(c, ProducerClient("", "", 0)))
                for c in members
                if not c.closed
            ]


class RemotingTransactions:
    """``heartbeat``: the HEART_BEAT handler this one hands each heartbeat on to, once its
    producers are recorded; ``may_be_asked``: who may be sent a topic's checks (None:
    anyone, authentication off)."""

    def __init__(
        self, broker: Broker, heartbeat: Handler, may_be_asked: CheckAllowed | None = None
    ) -> None:
        self._broker = broker
        self._heartbeat = heartbeat
        self._may_be_asked = may_be_asked
        self.producers = ProducerTable()
        self._opaques = itertools.count(1)

    def handlers(self) -> dict:
        return {
            RequestCode.END_TRANSACTION: self.end,
            RequestCode.HEART_BEAT: self.heartbeat,
        }

    async def heartbeat(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        client_id, groups = producer_heartbeat(request.body)
        problem = self.producers.limit_problem(groups, connection)
        if problem is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, problem)
        answer = self._heartbeat(request, connection)
        answer = await answer if inspect.isawaitable(answer) else answer
        # Recorded only with the rest of the heartbeat: a refused one leaves nothing.
        if answer.code == ResponseCode.SUCCESS:
            self.producers.heartbeat(
                groups,
                client_id,
                connection,
                request.ext_fields.get(ACCESS_KEY) or "",
                request.language,
                request.version,
            )
        return answer

    async def end(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand | None:
        kind = int_field(request, "commitOrRollback")
        if kind not in (TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE):
            return None  # UNKNOW: the checker asks again later
        # RocketMQ's broker finds the half message by its commit-log offset alone, so
        # clients vary in the ID they send: none (its broker answers none), the one the
        # send answered, or (the Go client v2 answering a check) the message's own ID.
        named = request.ext_fields.get("transactionId") or ""
        transaction_id, topic = named, self._half_topic(named) if named else None
        if topic is None:
            transaction_id = self._id_at(int_field(request, "commitLogOffset"))
            topic = self._half_topic(transaction_id)
        message_id = text_field(request, "msgId")
        from_check = request.ext_fields.get("fromTransactionCheck", "false") == "true"
        try:
            if topic is None:
                raise HeaderError(
                    f"neither transaction id {named!r} nor commit-log offset "
                    f"{request.ext_fields.get('commitLogOffset')!r} names a half message here"
                )
            await self._broker.transactions.end(
                topic=topic,
                message_id=message_id,
                transaction_id=transaction_id,
                commit=kind == TRANSACTION_COMMIT_TYPE,
                from_check=from_check,
            )
        except (TransactionRefused, HeaderError) as exc:
            # Oneway: nobody to tell but the log.
            text = exc.message if isinstance(exc, TransactionRefused) else str(exc)
            log.warning("END_TRANSACTION from %s not carried out: %s", connection.peer, text)
        return None

    async def prepare(
        self, message: Message, group: str, connection: RemotingConnection, access_key: str = ""
    ) -> tuple[PutResult, str]:
        """Store a half message of producer ``group`` sent over ``connection`` (signed with
        ``access_key``), which is then one to check it over (its producer's first heartbeat
        may come 30 s after it)."""
        # Past the connection's limit the half message is still stored; it is checked
        # over the connections its group's heartbeats registered.
        if group and self.producers.limit_problem([group], connection) is None:
            self.producers.add(group, connection, access_key)
        return await self._broker.transactions.prepare(message, group)

    def _id_at(self, physical: int) -> str:
        """The transaction ID of the half message at commit-log offset ``physical``."""
        head = self._broker.store.commit_log.read(physical, 4) if physical >= 0 else None
        if head is None:
            return ""
        return encode_transaction_id(physical, int.from_bytes(head, "big", signed=True))

    def _half_topic(self, transaction_id: str) -> str | None:
        location = decode_transaction_id(transaction_id)
        if location is None:
            return None
        half = self._broker.store.get_message_at(*location)
        if half is None or half.topic != prop.HALF_TOPIC:
            return None
        return half.properties.get(prop.REAL_TOPIC)

    # -- checks -------------------------------------------------------------

    def check_sender(
        self, fallback: CheckSender | None, loop: asyncio.AbstractEventLoop
    ) -> CheckSender:
        """The checker's sender: 4.x producers of the half's group first, else ``fallback``."""

        def send(message: StoredMessage, transaction_id: str) -> bool:
            group = message.properties.get(prop.PRODUCER_GROUP, "")
            if group and self._askable(group, message.topic):
                try:
                    loop.call_soon_threadsafe(self._ask, message, transaction_id)
                except RuntimeError:  # the loop is closed: the broker is stopping
                    return False
                return True
            return fallback(message, transaction_id) if fallback is not None else False

        return send

    def _askable(self, group: str, topic: str) -> list[RemotingConnection]:
        """The connections of ``group``'s producers that may be sent ``topic``'s checks."""
        allowed = self._may_be_asked
        return [
            connection
            for connection, access_key in self.producers.connections_of(group)
            if allowed is None or allowed(access_key, topic, connection.peer)
        ]

    def _ask(self, message: StoredMessage, transaction_id: str) -> None:
        connections = self._askable(message.properties[prop.PRODUCER_GROUP], message.topic)
        if not connections:
            return  # gone meanwhile: asked again at the next check
        store_host = encode_host(message.store_host)
        random.choice(connections).send(
            RemotingCommand(
                code=RequestCode.CHECK_TRANSACTION_STATE,
                opaque=next(self._opaques),
                flag=ONEWAY_FLAG,
                ext_fields={
                    "topic": message.topic,
                    "tranStateTableOffset": str(message.queue_offset),
                    "commitLogOffset": str(message.physical_offset),
                    "msgId": message.unique_id,
                    "transactionId": transaction_id,
                    "offsetMsgId": offset_message_id(store_host, message.physical_offset),
                    "brokerName": self._broker.config.broker_name,
                },
                body=check_body(message),
            )
        )


def check_body(message: StoredMessage) -> bytes:
    """``message`` in RocketMQ's record encoding, as a check carries it (MessageDecoder)."""
    sys_flag = message.sys_flag | TRANSACTION_PREPARED_TYPE
    blob = bytearray()
    encode_record_into(
        blob,
        topic_field(message.topic),
        message.body,
        encode_properties(message.properties),
        message.queue_id,
        message.flag,
        sys_flag,
        message.born_timestamp,
        encode_host(message.born_host),
        encode_host(message.store_host),
        message.reconsume_times,
        message.prepared_transaction_offset,
    )
    # The store fills these in for a record it appends; here they are the half message's.
    # (The SYSFLAG field, with the host bits the encoder set, picks the header's layout.)
    header = header_struct(int.from_bytes(blob[_SYSFLAG_AT : _SYSFLAG_AT + 4], "big"))
    fields = list(header.unpack_from(blob))
    fields[5], fields[6], fields[10] = (
        message.queue_offset,
        message.physical_offset,
        message.store_timestamp,
    )
    header.pack_into(blob, 0, *fields)
    return bytes(blob)
