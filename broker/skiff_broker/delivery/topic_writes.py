"""The rules for writing to a topic, shared by both write doors.

SendMessage (``messaging/sending.py``) and Append (``records/service.py``) refuse the
same writes for the same reasons and spread a topic's batches over its write
queues the same way; each door answers a refusal in its own protocol's status.
Invariants: a replica takes no client writes; a topic that does not exist (and
is not auto-created) or is not writable takes none; successive batches of a
topic go to successive write queues, wrapping around.
"""

from __future__ import annotations

import enum
from typing import Protocol

from ..metadata.topic_table import TopicConfig


class WriteRefusal(enum.Enum):
    REPLICA = "replica"
    NO_SUCH_TOPIC = "no such topic"
    NOT_WRITABLE = "not writable"


class TopicWriteRefused(Exception):
    """A write the broker does not take; ``message`` says why and what to do."""

    def __init__(self, refusal: WriteRefusal, message: str) -> None:
        super().__init__(message)
        self.refusal = refusal
        self.message = message


class TopicSource(Protocol):
    """Where the rules look topics up (``runtime.Broker``)."""

    def topic_for_use(self, name: str) -> TopicConfig | None: ...


def require_writer(read_only_reason: str) -> None:
    """Refuse while the store is read-only (this broker follows a master): clients
    write to the master. ``read_only_reason`` is the store's, empty on a master."""
    if read_only_reason:
        raise TopicWriteRefused(WriteRefusal.REPLICA, read_only_reason)


def writable_topic(broker: TopicSource, name: str) -> TopicConfig:
    """``name``'s config (auto-created where allowed), if it takes writes."""
    topic = broker.topic_for_use(name)
    if topic is None:
        raise TopicWriteRefused(
            WriteRefusal.NO_SUCH_TOPIC,
            f"topic {name!r} does not exist; create it first (skiff topic create {name})",
        )
    if not topic.writable:
        raise TopicWriteRefused(WriteRefusal.NOT_WRITABLE, f"topic {name!r} is not writable")
    return topic


class QueueRotation:
    """Round-robin choice of a topic's write queue, one step per batch."""

    def __init__(self) -> None:
        self._next: dict[str, int] = {}

    def next_queue(self, topic: TopicConfig) -> int:
        index = self._next.get(topic.name, 0)
        self._next[topic.name] = (index + 1) % topic.write_queue_nums
        return index % topic.write_queue_nums
