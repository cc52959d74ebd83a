"""Looking messages up over the remoting port: by offset message ID, by key, by time.

``VIEW_MESSAGE_BY_ID`` carries the commit-log offset decoded from an offset message ID
(the client dials the store host inside the ID, then asks for the offset);
``QUERY_MESSAGE`` finds messages by key (or, with ``_UNIQUE_KEY_QUERY``, by unique ID)
through the store's index; ``SEARCH_OFFSET_BY_TIMESTAMP`` maps a time to a queue offset.

Invariants:
- Bodies are whole commit-log records exactly as stored (what RocketMQ's
  ``MessageDecoder`` reads), so a message reads back with the ID, properties and offsets
  it was stored with.
- An offset that is not the start of a stored record is answered SYSTEM_ERROR with a
  sentence, never a slice of some other record.
- A key or time query counts every message appended before it (it waits, at most a few seconds,
  for the index to catch up).
- Broker-internal topics (schedules, half messages) are never looked into by key.
"""

from __future__ import annotations

import asyncio

from ..runtime import Broker
from ..store.message import StoredMessage
from ..wire import property_names as prop
from .codes import RequestCode, ResponseCode
from .connection import RemotingConnection
from .frames import RemotingCommand
from .service import Handler, HeaderError, int_field, text_field

# QUERY_MESSAGE answers at most this many records (RocketMQ's defaultQueryMaxNum is 32;
# mqadmin asks for 64).
_MAX_QUERY_MESSAGES = 64
_UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
_DISPATCH_WAIT_S = 5.0


class Lookups:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.VIEW_MESSAGE_BY_ID: self.view_message,
            RequestCode.QUERY_MESSAGE: self.query_message,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset,
        }

    def _record(self, message: StoredMessage) -> bytes:
        return (
            self._broker.store.commit_log.read(message.physical_offset, message.store_size) or b""
        )

    def _message_at(self, physical_offset: int) -> StoredMessage | None:
        store = self._broker.store
        head = store.commit_log.read(physical_offset, 4)
        if head is None:
            return None
        size = int.from_bytes(head, "big", signed=True)
        if size <= 0 or size > store.config.max_message_size + 64 * 1024:
            return None
        return store.get_message_at(physical_offset, size)

    def record_at(self, physical_offset: int) -> bytes | None:
        """The record stored at ``physical_offset`` as RocketMQ encodes it; None if no
        message starts there."""
        message = self._message_at(physical_offset)
        if message is None or message.physical_offset != physical_offset:
            return None
        return self._record(message)

    async def view_message(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        offset = int_field(request, "offset")
        if offset < 0:
            raise HeaderError(f"offset must not be negative, not {offset}")
        message = await asyncio.to_thread(self._message_at, offset)
        if message is None or message.physical_offset != offset:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"no message is stored at commit-log offset {offset}: the message ID is not "
                "one this broker gave, or retention deleted the message",
            )
        response = request.response(ResponseCode.SUCCESS)
        response.body = await asyncio.to_thread(self._record, message)
        return response

    async def query_message(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        topic = text_field(request, "topic")
        key = text_field(request, "key")
        max_num = min(max(int_field(request, "maxNum", 32), 1), _MAX_QUERY_MESSAGES)
        begin = int_field(request, "beginTimestamp", 0)
        end = int_field(request, "endTimestamp", 2**62)
        unique = request.ext_fields.get(_UNIQUE_KEY_QUERY, "false").lower() == "true"
        found: list[StoredMessage] = []
        if topic not in prop.INTERNAL_TOPICS:
            found = await asyncio.to_thread(self._find, topic, key, max_num, begin, end)
        if unique:
            found = [m for m in found if m.unique_id == key][:1]
        if not found:
            return request.response(
                ResponseCode.QUERY_NOT_FOUND,
                f"no message of topic {topic} has the key {key} in the broker's index",
                indexLastUpdateTimestamp="0",
                indexLastUpdatePhyoffset="0",
            )
        records = await asyncio.to_thread(lambda: b"".join(self._record(m) for m in found))
        response = request.response(
            ResponseCode.SUCCESS,
            indexLastUpdateTimestamp=str(max(m.store_timestamp for m in found)),
            indexLastUpdatePhyoffset=str(max(m.physical_offset for m in found)),
        )
        response.body = records
        return response

    def _find(
        self, topic: str, key: str, max_num: int, begin: int, end: int
    ) -> list[StoredMessage]:
        # The index trails appends by the dispatcher's lag: a message sent a moment ago
        # is found once the dispatcher got to it.
        store = self._broker.store
        store.wait_dispatched(_DISPATCH_WAIT_S)
        return store.query_by_key(topic, key, max_num, begin, end)

    def _offset_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        store = self._broker.store
        store.wait_dispatched(_DISPATCH_WAIT_S)
        return store.offset_by_time(topic, queue_id, timestamp)

    async def search_offset(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        topic = text_field(request, "topic")
        queue_id = int_field(request, "queueId")
        timestamp = int_field(request, "timestamp")
        if self._broker.topic_for_use(topic) is None or topic in prop.INTERNAL_TOPICS:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic {topic} does not exist on this broker; list topics with mqadmin topicList",
            )
        offset = await asyncio.to_thread(self._offset_by_time, topic, queue_id, timestamp)
        return request.response(ResponseCode.SUCCESS, offset=str(offset))
