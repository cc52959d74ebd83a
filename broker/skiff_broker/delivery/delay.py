"""DELAY messages: held back in ``SCHEDULE_TOPIC_XXXX`` until their delivery time.

A scheduled message is stored once in the schedule topic's single queue with its
real topic and queue in properties (``REAL_TOPIC``, ``REAL_QID``) and its
delivery time in ``TIMER_DELIVER_MS``. A worker thread keeps a heap of what is
pending, sleeps until the earliest delivery time and then writes the message to
its real queue: same body, properties (``UNIQ_KEY``, tags, keys, the delivery
time), flags, born timestamp and born host.

What has been delivered is kept as a low watermark (every schedule-queue offset
below it is done) plus the delivered offsets above it, written atomically to
``config/delayState.json``. At start the heap is rebuilt by scanning the schedule
queue from the watermark, so a restart loses nothing. After a clean stop the
file is exact and nothing is delivered twice. After a crash the file may lag the
log by one persist interval; a message due before the crash is looked up by its
``UNIQ_KEY`` in its real topic's index and not delivered again if it is there
(without an index, it is delivered again: at least once).

A data directory written by Apache RocketMQ has ``config/delayOffset.json``
instead: ``offsetTable`` maps each delay level to the next offset of schedule
queue ``level - 1`` still to deliver. Where there is no ``delayState.json``,
level 1's offset (queue 0, the queue Skiff schedules in) becomes the watermark,
and a level-1 message RocketMQ left pending (it carries its level in ``DELAY``,
not a delivery time) is due one second after it was stored, as RocketMQ's
default level table says. What does not map: the other levels' queues (1 to
17), which Skiff does not deliver from; a WARNING at start counts the messages
left there. RocketMQ's timer wheel (``rmq_sys_wheel_timer``, ``timerlog``,
``timerwheel``), which holds messages sent with a delivery time, is not read.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import os
import threading
import time

from ..metadata.state_file import StateFile
from ..store.message import Message, StoredMessage
from ..store.message_store import MessageStore
from ..store.results import PutResult, PutStatus
from ..store.service_thread import ConditionServiceThread
from ..wire import property_names as prop

log = logging.getLogger(__name__)

SCHEDULE_QUEUE = 0
# Apache RocketMQ's per-level delay positions, read when Skiff's own state is absent.
ROCKETMQ_DELAY_OFFSETS = "delayOffset.json"
# RocketMQ's delay level of a message in its schedule topic (level 1 is queue 0).
ROCKETMQ_DELAY_LEVEL = "DELAY"
# RocketMQ's default messageDelayLevel, "1s 5s 10s 30s 1m ... 2h": the delays of its
# delay levels 1 to 18, which are also the redelivery delays after failed consumption.
ROCKETMQ_LEVEL_DELAYS_S = (
    1,
    5,
    10,
    30,
    60,
    120,
    180,
    240,
    300,
    360,
    420,
    480,
    540,
    600,
    1200,
    1800,
    3600,
    7200,
)
ROCKETMQ_LEVEL_DELAYS_MS = tuple(seconds * 1000 for seconds in ROCKETMQ_LEVEL_DELAYS_S)
# A delivery batch is one append; it must fit a commit-log segment with room to spare.
_BATCH_MESSAGES = 32
_BATCH_BYTES = 1024 * 1024
# After the store refused a delivery (disk full, not running), try again this much later.
_RETRY_MS = 1_000
# Appends that can never succeed, whatever the retry.
_PERMANENT_FAILURES = (PutStatus.MESSAGE_ILLEGAL, PutStatus.PROPERTIES_SIZE_EXCEEDED)


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclasses.dataclass(order=True, slots=True)
class Pending:
    """A scheduled message still to deliver; heap order is (due time, queue offset)."""

    deliver_at: int
    offset: int
    physical: int = dataclasses.field(compare=False)
    size: int = dataclasses.field(compare=False)


class DelayService(ConditionServiceThread):
    """Each step delivers a batch of what is due; it sleeps until the earliest due time."""

    name = "delay-delivery"

    def __init__(self, store: MessageStore, state_path: str) -> None:
        super().__init__()
        self._store = store
        self._file = StateFile(
            state_path,
            indent=None,
            lost="the record of which scheduled messages were delivered (messages scheduled "
            "in the log are delivered again, at least once)",
        )
        self._loaded = False
        # Positions from RocketMQ's delayOffset.json (level -> next offset), when read.
        self._rocketmq_levels: dict[int, int] = {}
        self._persisting = threading.Lock()
        self._heap: list[Pending] = []
        # Every schedule-queue offset below the watermark is delivered (or unreadable).
        self._watermark = 0
        self._delivered: set[int] = set()
        self._dirty = False

    # -- lifecycle ----------------------------------------------------------

    def start(self) -> None:
        """Rebuild the pending heap from the schedule queue and start delivering."""
        if not self._loaded:
            self.load()
        self._report_other_levels()
        self._rebuild()
        # A later start (after a stop) reads what that stop saved.
        self._loaded = False
        super().start()

    def stop(self) -> None:
        """Finish the delivery in progress, stop, and write the state."""
        super().stop()
        self.persist()

    # -- scheduling ---------------------------------------------------------

    async def schedule(self, message: Message, deliver_at_ms: int) -> PutResult:
        """Store ``message`` to be written to its topic and queue at ``deliver_at_ms``."""
        properties = dict(message.properties)
        properties[prop.REAL_TOPIC] = message.topic
        properties[prop.REAL_QUEUE_ID] = str(message.queue_id)
        properties[prop.DELIVER_AT_MS] = str(deliver_at_ms)
        held = Message(
            topic=prop.SCHEDULE_TOPIC,
            body=message.body,
            queue_id=SCHEDULE_QUEUE,
            properties=properties,
            flag=message.flag,
            sys_flag=message.sys_flag,
            born_timestamp=message.born_timestamp,
            born_host=message.born_host,
            reconsume_times=message.reconsume_times,
        )
        result = await self._store.put_messages_async([held])
        # A flush timeout still wrote the message: it must be delivered all the same.
        if result.append is not None:
            self._add(
                Pending(
                    deliver_at_ms,
                    result.append.queue_offsets[0],
                    result.append.physical_offsets[0],
                    result.append.sizes[0],
                )
            )
        return result

    def _add(self, pending: Pending) -> None:
        with self._work:
            heapq.heappush(self._heap, pending)
            if self._heap[0] is pending:
                self._work.notify_all()  # due earlier than what the worker sleeps for

    @property
    def pending_count(self) -> int:
        with self._work:
            return len(self._heap)

    # -- delivering ---------------------------------------------------------

    def work_due_in(self) -> float | None:
        # The earliest due time, not a polling tick: delivery stays punctual.
        if not self._heap:
            return None
        return (self._heap[0].deliver_at - _now_ms()) / 1000

    def step(self) -> None:
        due = self._take_due()
        try:
            self._deliver(due)
        except Exception:
            self._retry_later(due)
            raise  # logged by the service, which goes on

    def _take_due(self) -> list[Pending]:
        """A batch of what is due now, earliest first."""
        with self._work:
            now = _now_ms()
            batch: list[Pending] = []
            size = 0
            while (
                self._heap
                and self._heap[0].deliver_at <= now
                and len(batch) < _BATCH_MESSAGES
                and (not batch or size + self._heap[0].size <= _BATCH_BYTES)
            ):
                pending = heapq.heappop(self._heap)
                batch.append(pending)
                size += pending.size
            return batch

    def _deliver(self, due: list[Pending]) -> None:
        ready: list[tuple[Pending, Message]] = []
        for pending in due:
            held = self._store.get_message_at(pending.physical, pending.size)
            real = _real_message(held) if held is not None else None
            if real is None:
                log.error(
                    "scheduled message at schedule offset %d is no longer readable; skipping it",
                    pending.offset,
                )
                self._mark_delivered([pending.offset])
                continue
            ready.append((pending, real))
        if not ready:
            return
        result = self._store.put_messages([real for _, real in ready])
        if result.append is not None:
            self._mark_delivered([pending.offset for pending, _ in ready])
        elif result.status in _PERMANENT_FAILURES:
            # One bad message must not hold back the rest of the batch.
            for pending, real in ready:
                single = self._store.put_messages([real])
                if single.append is None and single.status not in _PERMANENT_FAILURES:
                    self._retry_later([pending])
                    continue
                if single.append is None:
                    log.error(
                        "dropping scheduled message %s: %s",
                        real.properties.get(prop.UNIQ_KEY, pending.offset),
                        single.reason,
                    )
                self._mark_delivered([pending.offset])
        else:
            log.warning("could not deliver scheduled messages: %s; retrying", result.reason)
            self._retry_later([pending for pending, _ in ready])

    def _retry_later(self, due: list[Pending]) -> None:
        later = _now_ms() + _RETRY_MS
        with self._work:
            for pending in due:
                if pending.offset < self._watermark or pending.offset in self._delivered:
                    continue  # delivered before the failure
                heapq.heappush(
                    self._heap, Pending(later, pending.offset, pending.physical, pending.size)
                )
            self._work.notify_all()

    def _mark_delivered(self, offsets: list[int]) -> None:
        with self._work:
            self._delivered.update(offsets)
            while self._watermark in self._delivered:
                self._delivered.remove(self._watermark)
                self._watermark += 1
            self._dirty = True

    # -- persistence and rebuild --------------------------------------------

    def persist(self) -> bool:
        """Write the watermark and delivered offsets if they changed."""
        # One writer at a time, or an older snapshot could land after a newer one.
        with self._persisting:
            with self._work:
                if not self._dirty:
                    return False
                document = {
                    "version": 1,
                    "watermark": self._watermark,
                    "delivered": sorted(self._delivered),
                }
                self._dirty = False
            try:
                self._file.write(document)
            except OSError:
                with self._work:
                    self._dirty = True  # written next time
                raise
        return True

    def load(self, *, discard_damaged: bool = False) -> None:
        """Read the saved state; a damaged file fails here, before the store starts."""
        self._rocketmq_levels = {}
        saved = self._file.read(_parse_saved_state, discard_damaged=discard_damaged)
        if saved is None:
            saved = self._rocketmq_state(discard_damaged)
        self._watermark, self._delivered = saved
        self._loaded = True

    def _rocketmq_state(self, discard_damaged: bool) -> tuple[int, set[int]]:
        """The watermark from Apache RocketMQ's delayOffset.json, if there is one."""
        rocketmq = StateFile(
            os.path.join(os.path.dirname(self._file.path), ROCKETMQ_DELAY_OFFSETS),
            lost="the delay levels' positions (scheduled messages are delivered again)",
        )
        levels = rocketmq.read(_parse_rocketmq_levels, discard_damaged=discard_damaged)
        self._rocketmq_levels = levels or {}
        return self._rocketmq_levels.get(1, 0), set()

    def _report_other_levels(self) -> None:
        """Count what RocketMQ left pending in the schedule queues Skiff does not deliver from."""
        if not self._rocketmq_levels:
            return
        store = self._store
        stranded: dict[int, int] = {}
        for level in range(2, len(ROCKETMQ_LEVEL_DELAYS_MS) + 1):
            queue = level - 1
            start = max(
                self._rocketmq_levels.get(level, 0), store.min_offset(prop.SCHEDULE_TOPIC, queue)
            )
            pending = store.max_offset(prop.SCHEDULE_TOPIC, queue) - start
            if pending > 0:
                stranded[level] = pending
        if stranded:
            log.warning(
                "%d messages Apache RocketMQ scheduled at delay levels %s are not delivered: "
                "Skiff delivers only from schedule queue 0 (level 1); they stay readable in "
                "%s queues %s",
                sum(stranded.values()),
                sorted(stranded),
                prop.SCHEDULE_TOPIC,
                [level - 1 for level in sorted(stranded)],
            )

    def _rebuild(self) -> None:
        store = self._store
        # Retention may have deleted the oldest scheduled messages: nothing to do for them.
        start = max(self._watermark, store.min_offset(prop.SCHEDULE_TOPIC, SCHEDULE_QUEUE))
        after_crash = not store.clean_start
        now = _now_ms()
        heap: list[Pending] = []
        skipped: list[int] = []
        for offset, held in store.scan_queue(prop.SCHEDULE_TOPIC, SCHEDULE_QUEUE, start):
            if offset in self._delivered:
                continue
            deliver_at = _deliver_at(held) if held is not None else None
            if held is None or deliver_at is None or _real_message(held) is None:
                log.warning("schedule offset %d holds no readable scheduled message", offset)
                skipped.append(offset)
            elif after_crash and deliver_at <= now and self._delivered_before(held):
                skipped.append(offset)
            else:
                heap.append(Pending(deliver_at, offset, held.physical_offset, held.store_size))
        heapq.heapify(heap)
        with self._work:
            self._heap = heap
            self._watermark = start
            self._delivered = {o for o in self._delivered if o >= start}
            self._dirty = True
        self._mark_delivered(skipped)
        log.info(
            "delay service: %d scheduled messages pending from schedule offset %d",
            len(heap),
            start,
        )

    def _delivered_before(self, held: StoredMessage) -> bool:
        """Whether a crash came after this message's delivery but before the state was saved."""
        unique_id = held.unique_id
        if not unique_id:
            return False
        real_topic = held.properties[prop.REAL_TOPIC]
        deliver_at = held.properties.get(prop.DELIVER_AT_MS)  # None: one RocketMQ left
        return any(
            found.properties.get(prop.DELIVER_AT_MS) == deliver_at
            and found.queue_id == int(held.properties[prop.REAL_QUEUE_ID])
            for found in self._store.query_by_key(real_topic, unique_id)
        )


def _parse_rocketmq_levels(document: dict) -> dict[int, int]:
    return {int(level): int(offset) for level, offset in document.get("offsetTable", {}).items()}


def _parse_saved_state(document: dict) -> tuple[int, set[int]]:
    return (
        int(document.get("watermark", 0)),
        {int(offset) for offset in document.get("delivered", [])},
    )


def _deliver_at(held: StoredMessage) -> int | None:
    try:
        return int(held.properties[prop.DELIVER_AT_MS])
    except (KeyError, ValueError):
        pass
    # Left by Apache RocketMQ: a delay level instead of a time.
    level = held.properties.get(ROCKETMQ_DELAY_LEVEL, "")
    if level.isdecimal() and 1 <= int(level) <= len(ROCKETMQ_LEVEL_DELAYS_MS):
        return held.store_timestamp + ROCKETMQ_LEVEL_DELAYS_MS[int(level) - 1]
    return None


def _real_message(held: StoredMessage) -> Message | None:
    """The message as its producer sent it, bound for its real topic and queue."""
    properties = dict(held.properties)
    topic = properties.pop(prop.REAL_TOPIC, "")
    queue_id = properties.pop(prop.REAL_QUEUE_ID, "")
    # RocketMQ drops the level when it delivers, too.
    properties.pop(ROCKETMQ_DELAY_LEVEL, None)
    if not topic or not queue_id.isdecimal():
        return None
    return Message(
        topic=topic,
        body=held.body,
        queue_id=int(queue_id),
        properties=properties,
        flag=held.flag,
        sys_flag=held.sys_flag,
        born_timestamp=held.born_timestamp,
        born_host=held.born_host,
        reconsume_times=held.reconsume_times,
    )
