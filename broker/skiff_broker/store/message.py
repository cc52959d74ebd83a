"""The store's message types: what a producer hands the store, what a read returns.

The record layout, its encoder, decoder and validator belong to ``wire``; the
names re-exported below keep the modules that still import them from here
working (the dispatcher among them) until they import ``wire`` themselves.
"""

from __future__ import annotations

import dataclasses

from ..wire.body_crc import body_crc
from ..wire.hosts import decode_host, encode_host, host_flags
from ..wire.properties import (
    ID_ONLY_PREFIX,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    Property,
    decode_properties,
    encode_properties,
    id_only_properties,
)
from ..wire.record_codec import (
    CorruptRecordError,
    StoredMessage,
    decode_record,
    offset_message_id,
)
from ..wire.record_layout import (
    BLANK_MAGIC,
    BORNHOST_V6,
    END_FILE_MIN_BLANK_LENGTH,
    MAX_PROPERTIES_LENGTH,
    MAX_TOPIC_LENGTH,
    MESSAGE_MAGIC,
    SIZE_MAGIC,
    STORE_TIMESTAMP_OFFSET,
    STORE_TIMESTAMP_OFFSET_V6,
    STOREHOST_V6,
    SYSFLAG_OFFSET,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_MASK,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    UNQUEUED_TRANSACTION_TYPES,
    SysFlag,
    header_struct,
    record_length,
)

__all__ = [
    "BLANK_MAGIC",
    "BORNHOST_V6",
    "END_FILE_MIN_BLANK_LENGTH",
    "ID_ONLY_PREFIX",
    "MAX_PROPERTIES_LENGTH",
    "MAX_TOPIC_LENGTH",
    "MESSAGE_MAGIC",
    "NAME_VALUE_SEPARATOR",
    "PROPERTY_SEPARATOR",
    "SIZE_MAGIC",
    "STOREHOST_V6",
    "STORE_TIMESTAMP_OFFSET",
    "STORE_TIMESTAMP_OFFSET_V6",
    "SYSFLAG_OFFSET",
    "TRANSACTION_COMMIT_TYPE",
    "TRANSACTION_MASK",
    "TRANSACTION_NOT_TYPE",
    "TRANSACTION_PREPARED_TYPE",
    "TRANSACTION_ROLLBACK_TYPE",
    "UNQUEUED_TRANSACTION_TYPES",
    "CorruptRecordError",
    "Message",
    "Property",
    "StoredMessage",
    "SysFlag",
    "body_crc",
    "decode_host",
    "decode_properties",
    "decode_record",
    "encode_host",
    "encode_properties",
    "header_struct",
    "host_flags",
    "id_only_properties",
    "offset_message_id",
    "record_length",
]


@dataclasses.dataclass(slots=True)
class Message:
    """A message as a producer hands it to the store."""

    topic: str
    body: bytes
    queue_id: int = 0
    properties: dict[str, str] = dataclasses.field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str = "127.0.0.1:0"
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    @property
    def tags(self) -> str:
        return self.properties.get(Property.TAGS, "")

    @property
    def keys(self) -> list[str]:
        return self.properties.get(Property.KEYS, "").split()
