"""Between apache.rocketmq.v2 ``Message`` protos and the store's messages.

A consumer always gets a message it can read: a body flagged compressed goes
out as GZIP only if it inflates within the broker's maximum message size (the
official clients inflate GZIP bodies without a limit, and fail on bad data).
Otherwise, a body stored before the write doors checked it or copied in by
replication, it goes out as its stored bytes with IDENTITY encoding and a
property saying why, so nothing is lost and the consumer can acknowledge it.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import logging

from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb

from ..store.message import StoredMessage, SysFlag, encode_host, offset_message_id
from ..wire import property_names as prop
from ..wire.compressed_body import BodyVerdicts
from ..wire.message_size import ROCKETMQ_MAX_MESSAGE_SIZE

log = logging.getLogger(__name__)

# The store's default; callers that know the broker's own limit pass it.
DEFAULT_MAX_BODY_SIZE = ROCKETMQ_MAX_MESSAGE_SIZE
# Verdicts on compressed bodies are kept for this many records (about 100 bytes each).
_REMEMBERED_VERDICTS = 65536
_verdicts = BodyVerdicts(_REMEMBERED_VERDICTS)


def millis(ts: Timestamp) -> int:
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def timestamp(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


@functools.lru_cache(maxsize=4096)
def record_host(host: str, fallback: str) -> str:
    """``"ip:0"`` for a client-reported IP; ``fallback`` when it is not an IP literal."""
    try:
        address = ipaddress.ip_address(host.strip())
    except ValueError:
        return fallback
    return f"[{address}]:0" if address.version == 6 else f"{address}:0"


def host_text(host: str) -> str:
    """The address part of a record host, as clients report it."""
    address = host.rpartition(":")[0]
    return address.strip("[]")


# Protobuf enum look-ups go through a Python ``__getattr__``; these are read per message.
# The message types and GZIP are the send path's too (``sending.py``).
TRANSACTION = pb.MessageType.TRANSACTION
FIFO = pb.MessageType.FIFO
DELAY = pb.MessageType.DELAY
NORMAL = pb.MessageType.NORMAL
_MD5 = pb.DigestType.MD5
GZIP = pb.Encoding.GZIP
_IDENTITY = pb.Encoding.IDENTITY
_COMPRESSED = int(SysFlag.COMPRESSED)


def message_type_of(properties: dict[str, str]) -> int:
    if properties.get(prop.TRANSACTION_PREPARED) == "true":
        return TRANSACTION
    if prop.MESSAGE_GROUP in properties:
        return FIFO
    if prop.DELIVER_AT_MS in properties:
        return DELAY
    return NORMAL


def body_problem(stored: StoredMessage, max_body_size: int) -> str | None:
    """Why a body flagged compressed cannot go out as GZIP; None if it can (or is plain).

    A bad body is logged as a WARNING each time it is read: it needs an
    operator's look, and its consumers get its stored bytes.
    """
    if not stored.sys_flag & _COMPRESSED:
        return None
    problem = _verdicts.problem(
        stored.body, max_body_size, position=stored.physical_offset, body_crc=stored.body_crc
    )
    if problem is not None:
        log.warning(
            "message %s at %s queue %d offset %d (commit-log offset %d): %s; consumers get "
            "its stored bytes uncompressed",
            stored.properties.get(prop.UNIQ_KEY, "without ID"),
            stored.topic,
            stored.queue_id,
            stored.queue_offset,
            stored.physical_offset,
            problem,
        )
    return problem


def to_proto(
    stored: StoredMessage,
    *,
    namespace: str = "",
    receipt_handle: str = "",
    delivery_attempt: int = 0,
    invisible_ms: int = 0,
    max_body_size: int = DEFAULT_MAX_BODY_SIZE,
) -> pb.Message:
    """The message as a consumer receives it (see ``fill_message``)."""
    message = pb.Message()
    fill_message(
        message,
        stored,
        namespace=namespace,
        receipt_handle=receipt_handle,
        delivery_attempt=delivery_attempt,
        invisible_ms=invisible_ms,
        max_body_size=max_body_size,
    )
    return message


def fill_message(
    message: pb.Message,
    stored: StoredMessage,
    *,
    namespace: str = "",
    receipt_handle: str = "",
    delivery_attempt: int = 0,
    invisible_ms: int = 0,
    max_body_size: int = DEFAULT_MAX_BODY_SIZE,
) -> None:
    """Write the message as a consumer receives it into an empty ``message``, in place (a
    response's own field, so nothing is copied into the response afterwards); the body is
    passed through unchanged.

    A compressed body that does not inflate within ``max_body_size`` goes out
    as IDENTITY, with the reason in the ``UNINFLATABLE_BODY`` property.
    """
    properties = stored.properties
    problem = body_problem(stored, max_body_size)
    message.topic.name = stored.topic
    if namespace:
        message.topic.resource_namespace = namespace
    system = message.system_properties
    # Messages written without a client ID get RocketMQ's offset message ID.
    system.message_id = properties.get(prop.UNIQ_KEY) or offset_message_id(
        encode_host(stored.store_host), stored.physical_offset
    )
    digest = system.body_digest
    digest.type = _MD5
    digest.checksum = hashlib.md5(stored.body).hexdigest().upper()
    system.body_encoding = GZIP if stored.sys_flag & _COMPRESSED and problem is None else _IDENTITY
    system.message_type = message_type_of(properties)
    born_ms = stored.born_timestamp
    system.born_timestamp.seconds = born_ms // 1000
    system.born_timestamp.nanos = (born_ms % 1000) * 1_000_000
    system.born_host = properties.get(prop.BORN_HOST_TEXT) or host_text(stored.born_host)
    store_ms = stored.store_timestamp
    system.store_timestamp.seconds = store_ms // 1000
    system.store_timestamp.nanos = (store_ms % 1000) * 1_000_000
    system.store_host = stored.store_host
    system.queue_id = stored.queue_id
    system.queue_offset = stored.queue_offset
    if tags := properties.get(prop.TAGS):
        system.tag = tags
    if keys := properties.get(prop.KEYS):
        system.keys.extend(keys.split(" "))
    if group := properties.get(prop.MESSAGE_GROUP):
        system.message_group = group
    if deliver_at := properties.get(prop.DELIVER_AT_MS):
        system.delivery_timestamp.CopyFrom(timestamp(int(deliver_at)))
    if trace := properties.get(prop.TRACE_CONTEXT):
        system.trace_context = trace
    if receipt_handle:
        system.receipt_handle = receipt_handle
    if delivery_attempt:
        system.delivery_attempt = delivery_attempt
    if invisible_ms:
        system.invisible_duration.seconds = invisible_ms // 1000
        system.invisible_duration.nanos = (invisible_ms % 1000) * 1_000_000
    if origin := properties.get(prop.DLQ_ORIGIN_TOPIC):
        system.dead_letter_queue.topic = origin
        system.dead_letter_queue.message_id = properties.get(prop.DLQ_ORIGIN_MESSAGE_ID, "")
    user = message.user_properties
    reserved = prop.RESERVED
    for key, value in properties.items():
        if key not in reserved:
            user[key] = value
    if problem is not None:
        user[prop.UNINFLATABLE_BODY] = problem
    message.body = stored.body
