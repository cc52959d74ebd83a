"""Creating, changing and deleting topics, refusing changes that strand messages.

Two changes would leave messages nobody reads: more write queues than read
queues (producers fill queues consumers never visit), and fewer read queues
while the dropped queues still hold messages some group has not consumed. The
safe way to shrink a topic is to lower the write queues first, let consumers
drain the queues no longer written, then lower the read queues.
"""

from __future__ import annotations

import builtins  # TopicAdmin.list hides the built-in in its class's annotations
import dataclasses
import logging

from ..metadata.topic_table import MessageType, Permission, TopicConfig
from ..runtime import Broker
from ..wire import property_names as prop
from .consumer_progress import ConsumerProgress
from .errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound

log = logging.getLogger(__name__)

# Topics the broker itself writes and reads; changing them breaks delays and transactions.


@dataclasses.dataclass(frozen=True, slots=True)
class TopicChange:
    """Fields to change; None keeps the current value."""

    read_queue_nums: int | None = None
    write_queue_nums: int | None = None
    perm: Permission | None = None
    message_type: MessageType | None = None


class TopicAdmin:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._progress = ConsumerProgress(broker)

    def get(self, name: str) -> TopicConfig:
        topic = self._broker.topics.get(name)
        if topic is None:
            raise NotFound(f"topic {name!r} does not exist; list topics with 'skiff topic list'")
        return topic

    def list(self) -> list[TopicConfig]:
        return self._broker.topics.all()

    def create(self, topic: TopicConfig) -> TopicConfig:
        self._refuse_broker_topic(topic.name, "create")
        _check_valid(topic)
        if self._broker.topics.get(topic.name) is not None:
            raise AlreadyExists(
                f"topic {topic.name!r} already exists; change it with 'skiff topic update'"
            )
        self._broker.topics.put(topic)
        log.info("created topic %s", _describe(topic))
        return topic

    def update(self, name: str, change: TopicChange) -> TopicConfig:
        self._refuse_broker_topic(name, "change")
        current = self.get(name)
        changed = {
            field.name: getattr(change, field.name)
            for field in dataclasses.fields(change)
            if getattr(change, field.name) is not None
        }
        wanted = dataclasses.replace(current, **changed)
        _check_valid(wanted)
        if wanted.read_queue_nums < current.read_queue_nums:
            self._check_drained(current, wanted.read_queue_nums)
        self._broker.topics.put(wanted)
        log.info("updated topic %s (was %s)", _describe(wanted), _describe(current))
        return wanted

    def delete(self, name: str) -> None:
        """Remove the topic's config, consume queues and consumer offsets.

        Its records stay in the commit log until retention deletes them.
        """
        self._refuse_broker_topic(name, "delete")
        self.get(name)
        self._broker.topics.delete(name)
        self._broker.store.delete_topic(name)
        # A topic created again under this name starts at offset 0, with no
        # group positions left over from this one.
        self._broker.pop.forget_topic(name)
        self._broker.offsets.remove_topic(name)
        log.info("deleted topic %s", name)

    def unconsumed(self, topic: TopicConfig, queue_ids: range) -> builtins.list[str]:
        """One sentence per queue of ``queue_ids`` that holds unconsumed messages."""
        self._progress.refresh()
        groups = self._progress.groups_of(topic.name)
        problems = []
        for queue_id in queue_ids:
            if groups:
                behind = []
                for group in groups:
                    progress = self._progress.queue(group, topic.name, queue_id)
                    if progress.lag:
                        behind.append(f"{progress.lag} for group {group!r}")
                if behind:
                    problems.append(
                        f"queue {queue_id} holds unconsumed messages ({', '.join(behind)})"
                    )
            else:
                store = self._broker.store
                held = store.max_offset(topic.name, queue_id) - store.min_offset(
                    topic.name, queue_id
                )
                if held > 0:
                    noun = "message" if held == 1 else "messages"
                    problems.append(
                        f"queue {queue_id} holds {held} {noun} and no consumer group has "
                        "consumed this topic"
                    )
        return problems

    def _check_drained(self, current: TopicConfig, read_queue_nums: int) -> None:
        problems = self.unconsumed(current, range(read_queue_nums, current.read_queue_nums))
        if problems:
            raise FailedPrecondition(
                f"cannot shrink the read queues of {current.name!r} from "
                f"{current.read_queue_nums} to {read_queue_nums}: {'; '.join(problems)}. "
                "Consumers would never see those messages. Let the consumers drain the queues "
                "(lower the write queues first so nothing new arrives), then retry"
            )

    @staticmethod
    def _refuse_broker_topic(name: str, action: str) -> None:
        if name in prop.INTERNAL_TOPICS:
            raise InvalidArgument(
                f"topic {name!r} belongs to the broker (delayed or transactional messages); "
                f"it cannot be {'changed' if action == 'change' else action + 'd'} by hand"
            )


def _check_valid(topic: TopicConfig) -> None:
    try:
        topic.validate()
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None
    if topic.write_queue_nums > topic.read_queue_nums:
        raise InvalidArgument(
            f"topic {topic.name!r} would have {topic.write_queue_nums} write queues but only "
            f"{topic.read_queue_nums} read queues: messages written to queues "
            f"{_queue_range(topic.read_queue_nums, topic.write_queue_nums)} would never be read. "
            f"Set the read queues to at least {topic.write_queue_nums} (raise them first, or "
            "together) or the write queues to at most "
            f"{topic.read_queue_nums}"
        )


def _queue_range(start: int, end: int) -> str:
    return str(start) if end - start == 1 else f"{start}-{end - 1}"


def _describe(topic: TopicConfig) -> str:
    return (
        f"{topic.name} (read {topic.read_queue_nums}, write {topic.write_queue_nums}, "
        f"perm {int(topic.perm)}, {topic.message_type})"
    )
