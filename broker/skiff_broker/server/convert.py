"""Between apache.rocketmq.v2 ``Message`` protos and the store's messages."""

from __future__ import annotations

import functools
import hashlib
import ipaddress

from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb

from ..delivery import properties as prop
from ..store.message import StoredMessage, SysFlag, encode_host, offset_message_id


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


def peer_host(peer: str) -> str:
    """A record host from a gRPC peer string (``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``)."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest
    if kind == "ipv6":
        return rest if rest.startswith("[") else f"[{rest}]"
    return "127.0.0.1:0"


def message_type_of(properties: dict[str, str]) -> int:
    if properties.get(prop.TRANSACTION_PREPARED) == "true":
        return pb.MessageType.TRANSACTION
    if prop.MESSAGE_GROUP in properties:
        return pb.MessageType.FIFO
    if prop.DELIVER_AT_MS in properties:
        return pb.MessageType.DELAY
    return pb.MessageType.NORMAL


def to_proto(
    stored: StoredMessage,
    *,
    namespace: str = "",
    receipt_handle: str = "",
    delivery_attempt: int = 0,
    invisible_ms: int = 0,
) -> pb.Message:
    """The message as a consumer receives it; the body is passed through unchanged."""
    properties = stored.properties
    digest = hashlib.md5(stored.body).hexdigest().upper()
    compressed = stored.sys_flag & SysFlag.COMPRESSED
    system = pb.SystemProperties(
        # Messages written without a client ID get RocketMQ's offset message ID.
        message_id=properties.get(prop.UNIQ_KEY)
        or offset_message_id(encode_host(stored.store_host), stored.physical_offset),
        body_digest=pb.Digest(type=pb.DigestType.MD5, checksum=digest),
        body_encoding=pb.Encoding.GZIP if compressed else pb.Encoding.IDENTITY,
        message_type=message_type_of(properties),
        born_timestamp=timestamp(stored.born_timestamp),
        born_host=properties.get(prop.BORN_HOST_TEXT) or host_text(stored.born_host),
        store_timestamp=timestamp(stored.store_timestamp),
        store_host=stored.store_host,
        queue_id=stored.queue_id,
        queue_offset=stored.queue_offset,
    )
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
    user = {k: v for k, v in properties.items() if k not in prop.RESERVED}
    return pb.Message(
        topic=pb.Resource(name=stored.topic, resource_namespace=namespace),
        user_properties=user,
        system_properties=system,
        body=stored.body,
    )
