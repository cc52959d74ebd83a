"""Consumer groups: list, describe, reset offsets, delete.

A group exists on a broker while it has a committed offset on some topic or a
live consumer (see ``ClientRegistry.live_consumers``). Every answer starts with
``ConsumerProgress.refresh``, so positions popped a moment ago are counted.

Invariants: a reset or delete changes nothing while the group has live
consumers unless forced, and nothing on a replica (offsets reach a replica from
its master); a dry run never changes anything; a reset names every queue it
moves with its old and new offset. Deleting a group keeps its dead-letter topic,
which holds messages.
"""

from __future__ import annotations

import builtins  # GroupAdmin.list hides the built-in in its class's annotations
import dataclasses
import enum
from collections.abc import Sequence
from typing import Protocol

from ..error_text import quoted
from ..metadata.topic_table import TopicConfig
from ..runtime import Broker
from ..wire import property_names as prop
from .consumer_progress import ConsumerProgress
from .errors import FailedPrecondition, InvalidArgument, NotFound


class ConsumerSession(Protocol):
    client_id: str
    client_type: int
    group: str
    topics: set[str]


class LiveConsumers(Protocol):
    def live_consumers(self) -> Sequence[ConsumerSession]: ...


class ResetTarget(enum.Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    OFFSET = "offset"
    TIMESTAMP = "timestamp"


@dataclasses.dataclass(frozen=True, slots=True)
class GroupQueue:
    queue_id: int
    min_offset: int
    max_offset: int
    consumer_offset: int  # -1: never committed here
    next_offset: int
    lag: int
    in_flight: int
    invisible: int
    last_commit_time: int


@dataclasses.dataclass(frozen=True, slots=True)
class GroupTopic:
    topic: str
    queues: tuple[GroupQueue, ...]

    @property
    def total_lag(self) -> int:
        return sum(q.lag for q in self.queues)


@dataclasses.dataclass(frozen=True, slots=True)
class GroupSummary:
    group: str
    topics: tuple[str, ...]
    live_consumers: int
    total_lag: int


@dataclasses.dataclass(frozen=True, slots=True)
class QueueMove:
    queue_id: int
    old_offset: int  # -1: the group had none
    new_offset: int


@dataclasses.dataclass(frozen=True, slots=True)
class DeletedGroup:
    topics: tuple[str, ...]
    kept_dlq_topic: str  # "" when the group has none


def reset_offset_for(
    target: ResetTarget, min_offset: int, max_offset: int, *, offset: int = 0
) -> int:
    """Where a queue holding ``[min_offset, max_offset)`` is reset to (not for TIMESTAMP)."""
    if target is ResetTarget.EARLIEST:
        return min_offset
    if target is ResetTarget.LATEST:
        return max_offset
    if target is ResetTarget.OFFSET:
        if not min_offset <= offset <= max_offset:
            raise InvalidArgument(
                f"offset {offset} is outside the queue's stored range {min_offset} to "
                f"{max_offset}; pick one inside it, or reset to earliest or latest"
            )
        return offset
    raise ValueError(f"{target} needs the store")


class GroupAdmin:
    def __init__(self, broker: Broker, clients: LiveConsumers | None) -> None:
        self._broker = broker
        self._clients = clients
        self._progress = ConsumerProgress(broker)

    # -- reads ----------------------------------------------------------------

    def _live(self, group: str | None = None) -> list[ConsumerSession]:
        sessions = self._clients.live_consumers() if self._clients is not None else []
        return [s for s in sessions if group is None or s.group == group]

    def _live_by_group(self) -> dict[str, list[ConsumerSession]]:
        """Every live consumer, by group: one pass over the sessions."""
        by_group: dict[str, list[ConsumerSession]] = {}
        for session in self._live():
            by_group.setdefault(session.group, []).append(session)
        return by_group

    def _topics_of(
        self, group: str, committed: dict[str, list[str]], live: Sequence[ConsumerSession]
    ) -> list[str]:
        """Existing topics the group has offsets on or its ``live`` consumers subscribe to."""
        names = set(committed.get(group, []))
        for session in live:
            names.update(session.topics)
        return sorted(n for n in names if self._broker.topics.get(n) is not None)

    def list(self, topic: str = "") -> list[GroupSummary]:
        """Every group; its cost grows with groups + sessions, not with their product."""
        self._progress.refresh()
        committed = self._broker.offsets.groups()
        live_by_group = self._live_by_group()
        found = []
        for group in sorted(set(committed) | set(live_by_group)):
            live = live_by_group.get(group, [])
            topics = self._topics_of(group, committed, live)
            if topic and topic not in topics:
                continue
            lag = sum(
                self._topic_state(group, self._broker.topics.get(t)).total_lag for t in topics
            )
            found.append(GroupSummary(group, tuple(topics), len(live), lag))
        return found

    def describe(
        self, group: str, topic: str = ""
    ) -> tuple[builtins.list[GroupTopic], builtins.list[ConsumerSession]]:
        self._progress.refresh()
        live = self._live(group)
        topics = self._topics_of(group, self._broker.offsets.groups(), live)
        if not topics and not live:
            raise NotFound(
                f"consumer group {quoted(group)} has no offsets and no live consumers on this "
                "broker; check the name ('skiff group list' shows the groups)"
            )
        if topic:
            config = self._existing_topic(topic)
            topics = [config.name]
        states = [self._topic_state(group, self._broker.topics.get(t)) for t in topics]
        return states, live

    def _topic_state(self, group: str, topic: TopicConfig | None) -> GroupTopic:
        if topic is None:
            return GroupTopic("", ())
        offsets = self._broker.offsets
        queues = []
        for queue_id in range(topic.read_queue_nums):
            progress = self._progress.queue(group, topic.name, queue_id)
            view = self._broker.pop.queue_view(group, topic.name, queue_id)
            queues.append(
                GroupQueue(
                    queue_id=queue_id,
                    min_offset=progress.min_offset,
                    max_offset=progress.max_offset,
                    consumer_offset=view.consumer_offset,
                    next_offset=view.next_offset,
                    lag=progress.lag,
                    in_flight=view.in_flight,
                    invisible=view.invisible,
                    last_commit_time=offsets.commit_time(group, topic.name, queue_id),
                )
            )
        return GroupTopic(topic.name, tuple(queues))

    def _existing_topic(self, name: str) -> TopicConfig:
        config = self._broker.topics.get(name)
        if config is None:
            raise NotFound(f"topic {quoted(name)} does not exist; check the name")
        return config

    # -- changes --------------------------------------------------------------

    def _refuse_live(self, group: str, doing: str, command: str) -> None:
        live = self._live(group)
        if live:
            ids = ", ".join(sorted(s.client_id for s in live)[:3])
            more = f" and {len(live) - 3} more" if len(live) > 3 else ""
            raise FailedPrecondition(
                f"consumer group {quoted(group)} has {len(live)} live consumer(s) ({ids}{more}); "
                f"stop them before you {doing}, or force it ('skiff group {command} --force'; "
                "they then go on from the new state)"
            )

    def reset(
        self,
        group: str,
        topic: str,
        target: ResetTarget,
        *,
        queue_ids: Sequence[int] = (),
        offset: int = 0,
        timestamp: int = 0,
        dry_run: bool = False,
        force: bool = False,
    ) -> builtins.list[QueueMove]:
        config = self._existing_topic(topic)
        queues = sorted(set(queue_ids)) or list(range(config.read_queue_nums))
        for queue_id in queues:
            if not 0 <= queue_id < config.read_queue_nums:
                raise InvalidArgument(
                    f"queue {queue_id} is out of range: topic {config.name!r} has read queues "
                    f"0 to {config.read_queue_nums - 1}"
                )
        if target is ResetTarget.TIMESTAMP and timestamp < 0:
            raise InvalidArgument("timestamp must be milliseconds since the epoch, ≥ 0")
        if not dry_run and not force:
            self._refuse_live(group, "reset its offsets", "reset")
        self._progress.refresh()
        store, pop = self._broker.store, self._broker.pop
        moves = []
        for queue_id in queues:
            if target is ResetTarget.TIMESTAMP:
                new = store.offset_by_time(config.name, queue_id, timestamp)
            else:
                new = reset_offset_for(
                    target,
                    store.min_offset(config.name, queue_id),
                    store.max_offset(config.name, queue_id),
                    offset=offset,
                )
            moves.append(
                QueueMove(queue_id, pop.consumer_offset(group, config.name, queue_id), new)
            )
        if not dry_run:
            for move in moves:
                pop.reset_offset(group, config.name, move.queue_id, move.new_offset)
            self._broker.persist()
        return moves

    def delete(self, group: str, *, force: bool = False) -> DeletedGroup:
        if not force:
            self._refuse_live(group, "delete it", "delete")
        self._progress.refresh()
        if group not in self._broker.offsets.groups() and not self._live(group):
            raise NotFound(
                f"consumer group {quoted(group)} has no offsets on this broker; nothing to "
                "delete ('skiff group list' shows the groups)"
            )
        # Pop state first: its next persist would otherwise commit the offsets again.
        self._broker.pop.forget_group(group)
        topics = self._broker.offsets.remove_group(group)
        self._broker.persist()
        dlq = prop.dlq_topic(group)
        return DeletedGroup(tuple(topics), dlq if self._broker.topics.get(dlq) else "")
