"""Topic configurations, persisted as ``config/topics.json`` in RocketMQ's shape.

The file is RocketMQ's ``topicConfigTable`` (plus its ``dataVersion``); a
topics.json written by Apache RocketMQ 5 reads as it is. Fields Skiff does not
use (``topicFilterType``, ``topicSysFlag``, other attributes) are not kept.

A change is durable before it returns, and costs the same at any table size: it is
appended to ``topics.json.journal`` (a ``StateJournal``) and synced, and topics.json
is rewritten (with its ``.bak``) only once the journal holds an eighth of the table
(at least ``MIN_COMPACTION``), at ``compact()`` and at ``close()``. ``load`` reads the
snapshot and replays the journal over it. After a clean stop topics.json alone holds
every topic, as RocketMQ's tools expect; after a crash the journal's topics are in
topics.json once the broker has started again.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import threading
import time
from typing import Any

from ..wire.resource_names import topic_name_problem
from .state_file import StateFile
from .state_journal import StateJournal

log = logging.getLogger(__name__)

# Types an Apache RocketMQ 5 topics.json may hold that Skiff has no equivalent for.
_ROCKETMQ_ONLY_TYPES = frozenset({"MIXED", "UNSPECIFIED"})

# Journal records that trigger a rewrite of topics.json: an eighth of the table, at least this.
MIN_COMPACTION = 64


class Permission(enum.IntFlag):
    INHERIT = 1
    WRITE = 2
    READ = 4
    READ_WRITE = 6


class MessageType(enum.StrEnum):
    NORMAL = "NORMAL"
    FIFO = "FIFO"
    DELAY = "DELAY"
    TRANSACTION = "TRANSACTION"


def validate_topic_name(name: str) -> None:
    """Raise ValueError saying what a valid name looks like (system topics are valid)."""
    problem = topic_name_problem(name)
    if problem is not None:
        raise ValueError(problem)


@dataclasses.dataclass(slots=True)
class TopicConfig:
    name: str
    read_queue_nums: int = 8
    write_queue_nums: int = 8
    perm: Permission = Permission.READ_WRITE
    message_type: MessageType = MessageType.NORMAL

    def validate(self) -> None:
        validate_topic_name(self.name)
        for label, count in (("read", self.read_queue_nums), ("write", self.write_queue_nums)):
            if not 1 <= count <= 1024:
                raise ValueError(f"{label} queue count must be between 1 and 1024, got {count}")

    @property
    def readable(self) -> bool:
        return bool(self.perm & Permission.READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & Permission.WRITE)

    def to_json(self) -> dict[str, Any]:
        return {
            "topicName": self.name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": int(self.perm),
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0,
            "order": self.message_type is MessageType.FIFO,
            "attributes": {"message.type": str(self.message_type)},
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> TopicConfig:
        attributes = doc.get("attributes") or {}
        name = doc["topicName"]
        kind = attributes.get("message.type", "NORMAL")
        if kind in _ROCKETMQ_ONLY_TYPES:
            log.warning(
                "topic %s is of RocketMQ's message type %s, which Skiff does not have; it is "
                "served as NORMAL (change it with `skiff topic update` if it takes other types)",
                name,
                kind,
            )
            kind = MessageType.NORMAL
        return cls(
            name=name,
            read_queue_nums=int(doc["readQueueNums"]),
            write_queue_nums=int(doc["writeQueueNums"]),
            perm=Permission(int(doc.get("perm", 6))),
            message_type=MessageType(kind),
        )


class TopicTable:
    """Every topic the broker serves; each change is persisted before it returns."""

    def __init__(self, path: str) -> None:
        self._file = StateFile(path, lost="any topic (messages stay in the log)")
        self._journal = StateJournal(f"{path}.journal")
        self.path = path
        self._lock = threading.RLock()
        self._topics: dict[str, TopicConfig] = {}
        self.data_version = {"timestamp": 0, "counter": 0}

    def load(self, *, discard_damaged: bool = False) -> None:
        """The snapshot, with the journal's changes replayed over it (nothing is written)."""
        with self._lock:
            loaded = self._file.read(_parse_topics, discard_damaged=discard_damaged)
            if loaded is not None:
                self._topics, self.data_version = loaded
            topics = dict(self._topics)
            counter = self.data_version["counter"]
            for record in self._journal.read():
                try:
                    if record["op"] == "put":
                        topic = TopicConfig.from_json(record["topic"])
                        topics[topic.name] = topic
                    elif record["op"] == "delete":
                        topics.pop(record["name"], None)
                    counter = max(counter, int(record["counter"]))
                except (KeyError, TypeError, ValueError) as exc:
                    log.warning(
                        "%s: skipped a change of the wrong shape (%s)", self._journal.path, exc
                    )
            self._topics = topics
            self.data_version = {**self.data_version, "counter": counter}

    def compact(self) -> None:
        """Rewrite topics.json with every topic and empty the journal, if it holds any."""
        with self._lock:
            if len(self._journal):
                self._write_snapshot()

    def close(self) -> None:
        """Leave topics.json whole (a clean stop); the table may still be read."""
        with self._lock:
            self.compact()
            self._journal.close()

    def get(self, name: str) -> TopicConfig | None:
        return self._topics.get(name)

    def all(self) -> list[TopicConfig]:
        return sorted(self._topics.values(), key=lambda t: t.name)

    def put(self, topic: TopicConfig) -> None:
        topic.validate()
        with self._lock:
            # Readers take the dict without the lock: each change is a new dict.
            self._topics = {**self._topics, topic.name: topic}
            self._record({"op": "put", "topic": topic.to_json()})

    def delete(self, name: str) -> bool:
        with self._lock:
            if name not in self._topics:
                return False
            self._topics = {k: v for k, v in self._topics.items() if k != name}
            self._record({"op": "delete", "name": name})
            return True

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """Every topic as topics.json holds it (what a master sends its replicas)."""
        return {t.name: t.to_json() for t in self._topics.values()}

    def replace_all(self, documents: dict[str, dict[str, Any]]) -> None:
        """Take a master's topics in place of this table's; persisted if they differ."""
        topics = {name: TopicConfig.from_json(doc) for name, doc in documents.items()}
        with self._lock:
            if topics == self._topics:
                return
            self._topics = topics
            self._next_version()
            self._write_snapshot()

    def _next_version(self) -> None:
        self.data_version = {
            "timestamp": int(time.time() * 1000),
            "counter": self.data_version["counter"] + 1,
        }

    def _record(self, change: dict[str, Any]) -> None:
        """Make one change durable: a journal record, and now and then a new snapshot."""
        self._next_version()
        self._journal.append({**change, "counter": self.data_version["counter"]})
        if len(self._journal) >= max(MIN_COMPACTION, len(self._topics) // 8):
            self._write_snapshot()

    def _write_snapshot(self) -> None:
        # Written before the journal is emptied: a crash between the two replays the
        # journal over a snapshot that already holds it, which changes nothing.
        self._file.write(
            {
                "topicConfigTable": {t.name: t.to_json() for t in self._topics.values()},
                "dataVersion": self.data_version,
            }
        )
        self._journal.clear()


def _parse_topics(document: dict[str, Any]) -> tuple[dict[str, TopicConfig], dict[str, int]]:
    table = document.get("topicConfigTable", {})
    topics = {name: TopicConfig.from_json(doc) for name, doc in table.items()}
    version = document.get("dataVersion") or {}
    data_version = {
        "timestamp": int(version.get("timestamp", 0)),
        "counter": int(version.get("counter", 0)),
    }
    return topics, data_version
