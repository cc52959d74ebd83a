"""Pop consumption: messages handed out with an invisible time, acked one by one.

Per (group, topic, queue) the broker keeps the next offset never handed out and
the deliveries in flight. A delivery that is not acked before its invisible
time ends is handed out again with its attempt counted; one that has used up
the group's attempts goes to ``%DLQ%<group>`` instead.

FIFO consumption follows Apache RocketMQ's ordered pop: a queue hands out one
batch at a time and nothing while any unacknowledged delivery of that batch is
still invisible. Once every unacknowledged one is due, the next receive reads the
queue again from the batch's first unacknowledged offset, so messages after it
are delivered again even if they were acknowledged, in their order. Each offset
that was in the previous batch comes with its attempt counted up (acknowledged or
not); an offset that was not comes as a first attempt. That is the count RocketMQ's
broker keeps per offset and its cluster-mode proxy reports; its local-mode proxy
reports the batch's least count for every message of the batch instead
(bench/fifo_redelivery_peers.py shows both systems).

Moving a message to ``%DLQ%<group>`` is a store write, which under SYNC_FLUSH or
SYNC replication waits for the disk or the replicas: it is awaited with the
store's async put, never under the pop lock and never blocking the event loop.
A delivery being moved is neither handed out again nor moved twice; if the write
fails it stays in flight and is tried again at its next due time.

State is persisted (``config/popState.json``) so that offsets, attempts and
invisible times survive a restart; after a crash at most what changed since the
last persist is delivered again.

Memory is bounded per (group, topic, queue): at most ``MAX_IN_FLIGHT`` deliveries
(about 100 bytes each) are in flight. A group that pops and never acks reaches
it and then gets only redeliveries from that queue until acks, dead-lettering or
retention bring it down (RocketMQ's popInflightMessageThreshold).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable

from ..filter.subscription import MessageFilter
from ..metadata.consumer_offsets import ConsumerOffsetTable
from ..metadata.state_file import StateFile
from ..store.message import Message, StoredMessage
from ..store.message_store import MessageStore
from ..store.results import GetStatus, PutStatus
from ..wire import property_names as prop

log = logging.getLogger(__name__)

Clock = Callable[[], int]

# Deliveries in flight per (group, topic, queue), as RocketMQ's popInflightMessageThreshold.
MAX_IN_FLIGHT = 10_000


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclasses.dataclass(slots=True)
class InFlight:
    offset: int
    attempt: int
    retrieve_time: int
    invisible_time: int
    # Its move to the dead-letter topic is under way (not persisted: redone after a restart).
    moving: bool = False

    @property
    def visible_at(self) -> int:
        return self.retrieve_time + self.invisible_time


@dataclasses.dataclass(slots=True)
class QueueState:
    next_offset: int
    in_flight: dict[int, InFlight] = dataclasses.field(default_factory=dict)
    # FIFO only: offset -> attempt of each delivery of the last batch, acknowledged or not.
    fifo_batch: dict[int, int] = dataclasses.field(default_factory=dict)

    @property
    def consumer_offset(self) -> int:
        """Everything below this is acknowledged."""
        return min(self.in_flight, default=self.next_offset)


@dataclasses.dataclass(frozen=True, slots=True)
class QueueView:
    consumer_offset: int  # everything below is acknowledged; -1: no position
    next_offset: int  # the next offset never handed out; -1: no position
    in_flight: int  # deliveries not acknowledged yet
    invisible: int  # of those, the ones not yet due for redelivery


@dataclasses.dataclass(slots=True)
class Delivery:
    message: StoredMessage
    queue_id: int
    offset: int
    attempt: int
    retrieve_time: int
    invisible_time: int


class PopError(Exception):
    """An ack or change of invisible time that does not match a delivery in flight."""


class ReceiptExpired(PopError):
    """An ack or change of invisible time that came after the delivery's invisible time.

    As RocketMQ's proxy has it, a handle is dead once retrieve time + invisible time is
    not after now, whether or not the message has been handed out again: the delivery
    stays in flight and the message comes again.
    """


@dataclasses.dataclass(frozen=True, slots=True)
class _DeadLetter:
    """A delivery that used up its attempts, to be moved to its group's DLQ topic."""

    group: str
    state: QueueState
    entry: InFlight
    message: StoredMessage


class PopService:
    def __init__(
        self,
        store: MessageStore,
        offsets: ConsumerOffsetTable,
        state_path: str,
        *,
        max_attempts: int,
        ensure_dlq_topic: Callable[[str], object],
        attempts_of: Callable[[str], int] | None = None,
        clock: Clock = _now_ms,
        max_in_flight: int = MAX_IN_FLIGHT,
    ) -> None:
        self._store = store
        self.max_in_flight = max_in_flight
        self._offsets = offsets
        self._file = StateFile(
            state_path,
            indent=None,
            lost="pop consumers' in-flight deliveries and attempt counts (in-flight messages "
            "are delivered again from the committed offsets)",
        )
        self.max_attempts = max_attempts
        # A group's own attempts (its retryMaxTimes + 1), else max_attempts.
        self._attempts_of = attempts_of
        self._ensure_dlq_topic = ensure_dlq_topic
        self._clock = clock
        self._lock = threading.RLock()
        self._queues: dict[tuple[str, str, int], QueueState] = {}
        self._dirty = False
        # Found by pop(), moved by move_due_dead_letters() (outside the lock).
        self._due_dead_letters: list[_DeadLetter] = []

    # -- state --------------------------------------------------------------

    def group_topics(self) -> set[tuple[str, str]]:
        """The (group, topic) pairs with positions here, committed to the offsets or not."""
        with self._lock:
            return {(group, topic) for group, topic, _queue in self._queues}

    def has_deliverable(self, group: str, topic: str, queue_ids: Iterable[int]) -> bool:
        """Whether a pop might hand ``group`` something now: a message past its position
        or a redelivery due. A hint: filters, a FIFO queue's order and the in-flight
        bound may still leave the pop empty."""
        now = self._clock()
        with self._lock:
            for queue_id in queue_ids:
                state = self._queues.get((group, topic, queue_id))
                if state is None:
                    committed = self._offsets.query(group, topic, queue_id)
                    start = committed if committed >= 0 else self._store.min_offset(topic, queue_id)
                elif any(not e.moving and e.visible_at <= now for e in state.in_flight.values()):
                    return True
                else:
                    start = state.next_offset
                if self._store.max_offset(topic, queue_id) > start:
                    return True
        return False

    def attempts_for(self, group: str) -> int:
        """How many deliveries ``group`` gets of a message before it is a dead letter."""
        return self.max_attempts if self._attempts_of is None else self._attempts_of(group)

    def _state(self, group: str, topic: str, queue_id: int) -> QueueState:
        key = (group, topic, queue_id)
        state = self._queues.get(key)
        if state is None:
            committed = self._offsets.query(group, topic, queue_id)
            # A group new to this queue starts at the oldest message still kept.
            start = committed if committed >= 0 else self._store.min_offset(topic, queue_id)
            state = self._queues[key] = QueueState(start)
        return state

    def consumer_offset(self, group: str, topic: str, queue_id: int) -> int:
        with self._lock:
            state = self._queues.get((group, topic, queue_id))
            if state is not None:
                return state.consumer_offset
        return self._offsets.query(group, topic, queue_id)

    def progress(self) -> dict[tuple[str, str, int], tuple[int, int]]:
        """(group, topic, queue id) -> (consumed position, next offset to hand out)."""
        with self._lock:
            return {
                key: (state.consumer_offset, state.next_offset)
                for key, state in self._queues.items()
            }

    def reset_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Move a group's position in a queue (in-flight deliveries are forgotten)."""
        with self._lock:
            self._queues[(group, topic, queue_id)] = QueueState(offset)
            self._offsets.commit(group, topic, queue_id, offset)
            self._dirty = True

    def queue_view(
        self, group: str, topic: str, queue_id: int, now_ms: int | None = None
    ) -> QueueView:
        """The group's position in one queue and its deliveries in flight there."""
        now = self._clock() if now_ms is None else now_ms
        with self._lock:
            state = self._queues.get((group, topic, queue_id))
            if state is None:
                committed = self._offsets.query(group, topic, queue_id)
                return QueueView(committed, committed, 0, 0)
            invisible = sum(1 for e in state.in_flight.values() if e.visible_at > now)
            return QueueView(
                state.consumer_offset, state.next_offset, len(state.in_flight), invisible
            )

    def forget_group(self, group: str) -> None:
        """Drop the group's positions and deliveries in flight on every topic."""
        with self._lock:
            for key in [k for k in self._queues if k[0] == group]:
                del self._queues[key]
            self._dirty = True

    def forget_topic(self, topic: str) -> None:
        """Drop every group's state for a deleted topic."""
        with self._lock:
            for key in [k for k in self._queues if k[1] == topic]:
                del self._queues[key]
            self._dirty = True

    # -- popping ------------------------------------------------------------

    def pop(
        self,
        group: str,
        topic: str,
        queue_ids: Iterable[int],
        max_count: int,
        invisible_ms: int,
        tag_filter: MessageFilter,
        *,
        fifo: bool,
    ) -> list[Delivery]:
        """Up to ``max_count`` deliveries: due redeliveries first, then new messages."""
        now = self._clock()
        deliveries: list[Delivery] = []
        with self._lock:
            for queue_id in queue_ids:
                if len(deliveries) >= max_count:
                    break
                state = self._state(group, topic, queue_id)
                wanted = max_count - len(deliveries)
                if fifo:
                    deliveries.extend(
                        self._pop_fifo(
                            group, topic, queue_id, state, now, wanted, invisible_ms, tag_filter
                        )
                    )
                    continue
                due = self._redeliver(group, topic, queue_id, state, now, wanted, invisible_ms)
                deliveries.extend(due)
                room = self.max_in_flight - len(state.in_flight)
                wanted = min(max_count - len(deliveries), room)
                if wanted > 0:
                    deliveries.extend(
                        self._pop_new(
                            group, topic, queue_id, state, now, wanted, invisible_ms, tag_filter
                        )
                    )
            if deliveries:
                self._dirty = True
        return deliveries

    def _pop_fifo(
        self,
        group: str,
        topic: str,
        queue_id: int,
        state: QueueState,
        now: int,
        wanted: int,
        invisible_ms: int,
        tag_filter: MessageFilter,
    ) -> list[Delivery]:
        """The queue's next batch, or nothing while its last batch holds it."""
        if any(e.moving or e.visible_at > now for e in state.in_flight.values()):
            return []
        # What is in flight counts too: state saved before batches were kept has only that.
        previous = state.fifo_batch | {o: e.attempt for o, e in state.in_flight.items()}
        if state.in_flight:
            # Read again from the first unacknowledged offset, acknowledged ones after it too.
            state.next_offset = min(state.in_flight)
            state.in_flight.clear()
        deliveries = self._pop_new(
            group, topic, queue_id, state, now, wanted, invisible_ms, tag_filter, previous
        )
        if deliveries or not state.in_flight:
            state.fifo_batch = {d.offset: d.attempt for d in deliveries}
        return deliveries

    def _redeliver(
        self,
        group: str,
        topic: str,
        queue_id: int,
        state: QueueState,
        now: int,
        wanted: int,
        invisible_ms: int,
    ) -> list[Delivery]:
        result: list[Delivery] = []
        attempts = self.attempts_for(group)
        for offset in sorted(state.in_flight):
            if len(result) >= wanted:
                break
            entry = state.in_flight[offset]
            if entry.moving:
                continue  # on its way to the dead-letter topic
            if entry.visible_at > now:
                continue
            message = self._read(topic, queue_id, offset)
            if message is None:
                del state.in_flight[offset]  # gone with retention
                continue
            if entry.attempt >= attempts:
                entry.moving = True
                self._due_dead_letters.append(_DeadLetter(group, state, entry, message))
                continue
            entry.attempt += 1
            entry.retrieve_time = now
            entry.invisible_time = invisible_ms
            result.append(Delivery(message, queue_id, offset, entry.attempt, now, invisible_ms))
        return result

    def _pop_new(
        self,
        group: str,
        topic: str,
        queue_id: int,
        state: QueueState,
        now: int,
        wanted: int,
        invisible_ms: int,
        tag_filter: MessageFilter,
        previous_attempts: dict[int, int] | None = None,
    ) -> list[Delivery]:
        """Messages from ``next_offset`` on; an offset in ``previous_attempts`` is counted on."""
        got = self._store.get_messages(
            topic,
            queue_id,
            state.next_offset,
            wanted,
            tag_codes=tag_filter.tag_codes,
            properties_check=tag_filter.properties_check,
            accept=tag_filter.accept,
        )
        if got.status is GetStatus.OFFSET_TOO_SMALL:
            log.warning(
                "%s/%d: offset %d was deleted by retention; continuing at %d",
                topic,
                queue_id,
                state.next_offset,
                got.next_offset,
            )
            state.next_offset = got.next_offset
            return []
        if got.status is not GetStatus.FOUND and got.status is not GetStatus.NO_MATCHED_MESSAGE:
            return []
        result = []
        attempts = self.attempts_for(group)
        for message in got.messages:
            offset = message.queue_offset
            attempt = previous_attempts.get(offset, 0) + 1 if previous_attempts else 1
            entry = InFlight(offset, attempt, now, invisible_ms)
            state.in_flight[offset] = entry
            if attempt > attempts:
                # It used up its attempts in earlier batches: to the DLQ, not to the consumer.
                entry.attempt -= 1
                entry.moving = True
                self._due_dead_letters.append(_DeadLetter(group, state, entry, message))
                continue
            result.append(Delivery(message, queue_id, offset, attempt, now, invisible_ms))
        # Filtered-out messages count as consumed by this group.
        state.next_offset = max(state.next_offset, got.next_offset)
        return result

    def _read(self, topic: str, queue_id: int, offset: int) -> StoredMessage | None:
        got = self._store.get_messages(topic, queue_id, offset, 1)
        if got.messages and got.messages[0].queue_offset == offset:
            return got.messages[0]
        return None

    # -- acknowledging ------------------------------------------------------

    def _entry(
        self, group: str, topic: str, queue_id: int, offset: int, retrieve_time: int
    ) -> tuple[QueueState, InFlight]:
        state = self._queues.get((group, topic, queue_id))
        entry = state.in_flight.get(offset) if state is not None else None
        if state is None or entry is None or entry.retrieve_time != retrieve_time:
            raise PopError(
                f"no delivery of {topic}/{queue_id}/{offset} matches this receipt handle; "
                "it was acked already, or delivered again after its invisible time"
            )
        return state, entry

    def _live_entry(
        self, group: str, topic: str, queue_id: int, offset: int, retrieve_time: int
    ) -> tuple[QueueState, InFlight]:
        """The delivery in flight, if its invisible time has not run out."""
        state, entry = self._entry(group, topic, queue_id, offset, retrieve_time)
        late_ms = self._clock() - entry.visible_at
        if late_ms >= 0:
            raise ReceiptExpired(
                f"receipt handle is expired: the invisible time of {topic}/{queue_id}/{offset} "
                f"ran out {late_ms} ms ago and the message will be delivered again; "
                "ack or change the invisible duration before it runs out, or receive with "
                "a longer invisible duration"
            )
        return state, entry

    def ack(self, group: str, topic: str, queue_id: int, offset: int, retrieve_time: int) -> None:
        with self._lock:
            state, _ = self._live_entry(group, topic, queue_id, offset, retrieve_time)
            del state.in_flight[offset]
            self._dirty = True

    def change_invisible_time(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        retrieve_time: int,
        invisible_ms: int,
    ) -> Delivery:
        """Restart the invisible time from now; the delivery gets a new handle."""
        with self._lock:
            _, entry = self._live_entry(group, topic, queue_id, offset, retrieve_time)
            now = self._clock()
            # A handle must change even within one millisecond.
            entry.retrieve_time = max(now, entry.retrieve_time + 1)
            entry.invisible_time = invisible_ms
            self._dirty = True
            message = self._read(topic, queue_id, offset)
            if message is None:
                raise PopError(f"message {topic}/{queue_id}/{offset} is no longer stored")
            return Delivery(
                message, queue_id, offset, entry.attempt, entry.retrieve_time, invisible_ms
            )

    async def forward_to_dead_letter(
        self, group: str, topic: str, queue_id: int, offset: int, retrieve_time: int
    ) -> None:
        """Move one delivery in flight to the group's DLQ topic now (the client gave up)."""
        with self._lock:
            state, entry = self._entry(group, topic, queue_id, offset, retrieve_time)
            if entry.moving:
                raise PopError(f"{topic}/{queue_id}/{offset} is being moved to the DLQ already")
            message = self._read(topic, queue_id, offset)
            if message is None:
                del state.in_flight[offset]  # gone with retention
                self._dirty = True
                return
            entry.moving = True
        await self._move(_DeadLetter(group, state, entry, message))

    async def move_due_dead_letters(self) -> None:
        """Move the deliveries pop() found out of attempts; a failed move stays in flight."""
        with self._lock:
            due, self._due_dead_letters = self._due_dead_letters, []
        for dead in due:
            try:
                await self._move(dead)
            except PopError as exc:
                log.error("%s; it stays in flight", exc)

    async def _move(self, dead: _DeadLetter) -> None:
        try:
            await self._to_dead_letter(dead.group, dead.message, dead.entry.attempt)
        except BaseException:
            with self._lock:
                dead.entry.moving = False
            raise
        with self._lock:
            offset = dead.entry.offset
            # Unless an ack took it meanwhile (then the DLQ holds a copy of an acked one).
            if dead.state.in_flight.get(offset) is dead.entry:
                del dead.state.in_flight[offset]
            self._dirty = True

    async def _to_dead_letter(self, group: str, message: StoredMessage, attempts: int) -> None:
        topic = prop.dlq_topic(group)
        # Creating it writes topics.json: not on the event loop.
        await asyncio.to_thread(self._ensure_dlq_topic, topic)
        properties = dict(message.properties)
        properties[prop.DLQ_ORIGIN_TOPIC] = message.topic
        properties[prop.DLQ_ORIGIN_MESSAGE_ID] = message.unique_id
        result = await self._store.put_messages_async(
            [
                Message(
                    topic=topic,
                    body=message.body,
                    queue_id=0,
                    properties=properties,
                    flag=message.flag,
                    sys_flag=message.sys_flag,
                    born_timestamp=message.born_timestamp,
                    born_host=message.born_host,
                    reconsume_times=attempts,
                )
            ]
        )
        if result.status is not PutStatus.PUT_OK:
            # Keep it in flight: it is retried at its next due time.
            raise PopError(f"could not move the message to {topic}: {result.reason}")
        log.info("moved %s after %d attempts to %s", message.unique_id, attempts, topic)

    def next_visible_at(self, group: str, topic: str, *, fifo: bool = False) -> int | None:
        """When the earliest in-flight delivery of the topic becomes due again.

        A FIFO queue is free only once all of its batch is due: its latest due time counts.
        """
        pick = max if fifo else min
        with self._lock:
            times = [
                pick(entry.visible_at for entry in state.in_flight.values())
                for (g, t, _), state in self._queues.items()
                if g == group and t == topic and state.in_flight
            ]
        return min(times, default=None)

    # -- persistence --------------------------------------------------------

    def load(self, *, discard_damaged: bool = False) -> None:
        queues = self._file.read(_parse_pop_state, discard_damaged=discard_damaged)
        if queues is not None:
            with self._lock:
                self._queues.update(queues)

    def persist(self) -> bool:
        """Write the state if it changed; also commits each queue's consumer offset."""
        with self._lock:
            if not self._dirty:
                return False
            groups: dict = {}
            for (group, topic, queue_id), state in self._queues.items():
                groups.setdefault(group, {}).setdefault(topic, {})[str(queue_id)] = {
                    "next": state.next_offset,
                    "inFlight": [
                        [e.offset, e.attempt, e.retrieve_time, e.invisible_time]
                        for e in state.in_flight.values()
                    ],
                }
                if state.fifo_batch:
                    groups[group][topic][str(queue_id)]["fifoBatch"] = [
                        [offset, attempt] for offset, attempt in state.fifo_batch.items()
                    ]
                self._offsets.commit(group, topic, queue_id, state.consumer_offset)
            self._dirty = False
        self._file.write({"version": 1, "groups": groups})
        return True


def _parse_pop_state(document: dict) -> dict[tuple[str, str, int], QueueState]:
    queues: dict[tuple[str, str, int], QueueState] = {}
    for group, topics in document.get("groups", {}).items():
        for topic, saved_queues in topics.items():
            for queue_id, saved in saved_queues.items():
                state = QueueState(int(saved["next"]))
                for offset, attempt, retrieve, invisible in saved.get("inFlight", []):
                    state.in_flight[int(offset)] = InFlight(
                        int(offset), int(attempt), int(retrieve), int(invisible)
                    )
                for offset, attempt in saved.get("fifoBatch", []):
                    state.fifo_batch[int(offset)] = int(attempt)
                queues[(group, topic, int(queue_id))] = state
    return queues
