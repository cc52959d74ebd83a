"""TRANSACTION messages: half messages, commit or rollback, and asking producers.

A half message is stored in ``RMQ_SYS_TRANS_HALF_TOPIC`` (one queue) with its real
topic and queue in properties, ``TRAN_MSG=true``, its producer group and
``__transactionId__``; consumers cannot see it. The transaction id handed to the
producer encodes the half message's commit-log offset and size, so EndTransaction
reads it back directly; the id, topic and message id must all match.

Ending a transaction appends an op record to ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` whose
body is the half message's queue offset. A commit first writes the real message
(properties restored, ``TRAN_MSG`` kept so consumers see a TRANSACTION message,
sys flag TRANSACTION_COMMIT_TYPE, prepared offset = the half's commit-log offset).
The real message and its op record are one append: the store makes a batch
visible whole or not at all, so after any restart a transaction is either
resolved (its op record is there) or not, and is never committed twice.

A half message without an op record after ``timeout_ms`` (or the longer check immunity
its producer asked for, ``CHECK_IMMUNITY_TIME_IN_SECONDS``) is checked: every
``check_interval_ms`` a producer of its topic is asked (through ``send_check``,
which the server wires to the telemetry streams) and answers with EndTransaction;
after ``check_max`` unanswered checks the transaction is rolled back.

``config/transactionState.json`` holds the half-queue watermark (every half below
it is resolved), where the op queue must be re-read from, and the check counts.
At start the unresolved halves are rebuilt from the op and half queues; the op
records decide, so a state file that lags the log after a crash costs a longer
scan and at most some forgotten check counts, never a wrong resolution.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import re
import threading
import time
from collections.abc import Callable

from ..metadata.state_file import StateFile
from ..store.message import (
    MESSAGE_MAGIC,
    SIZE_MAGIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_MASK,
    Message,
    StoredMessage,
)
from ..store.message_store import MessageStore
from ..store.results import PutResult, PutStatus
from ..store.service_thread import ServiceThread
from ..wire import property_names as prop

log = logging.getLogger(__name__)

# Asks a producer of ``message.topic`` to resolve the transaction; called from the
# checker thread, so it must be thread-safe and must not block. False: nobody to ask.
CheckSender = Callable[[StoredMessage, str], bool]

HALF_QUEUE = 0
OP_QUEUE = 0
# RocketMQ tags op records "d" (removed from the unresolved set).
OP_TAG = "d"
# Op records say how the transaction ended (internal to the op topic).
OP_RESOLUTION = "RESOLUTION"
_COMMIT = "COMMIT"
_ROLLBACK = "ROLLBACK"
# How a transaction ended, if that is no longer known (resolved long ago).
_UNKNOWN = "UNKNOWN"
_TRANSACTION_ID = re.compile(r"^[0-9A-F]{24}$")
# Resolutions remembered after the watermark passed them, to answer a late
# conflicting EndTransaction precisely.
_RECENT_RESOLUTIONS = 4096


def _now_ms() -> int:
    return int(time.time() * 1000)


class TransactionRefused(Exception):
    """An EndTransaction not carried out; ``message`` says why and what to do.
    The server answers each kind with its protocol's status."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UnknownTransaction(TransactionRefused):
    """The id, topic or message id names no half message this broker holds."""


class AlreadyEnded(TransactionRefused):
    """The transaction was already ended the other way."""


class EndNotStored(TransactionRefused):
    """Writing the end failed or is not yet as durable as asked; ``status`` says how."""

    def __init__(self, status: PutStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


def encode_transaction_id(physical_offset: int, size: int) -> str:
    return f"{physical_offset:016X}{size:08X}"


def decode_transaction_id(transaction_id: str) -> tuple[int, int] | None:
    """(commit-log offset, size) of the half message, or None if it is not one of ours."""
    if not _TRANSACTION_ID.match(transaction_id):
        return None
    return int(transaction_id[:16], 16), int(transaction_id[16:], 16)


def _word(resolution: str) -> str:
    return {_COMMIT: "committed", _ROLLBACK: "rolled back"}.get(resolution, "resolved")


@dataclasses.dataclass(slots=True)
class HalfEntry:
    """An unresolved half message."""

    physical: int
    size: int
    stored_at: int
    checks: int = 0
    # Not checked before this long after it was stored (its producer asked), nor before
    # the service's timeout.
    immunity_ms: int = 0


def _immunity_ms(properties: dict[str, str]) -> int:
    """The check immunity a half message's producer asked for; 0 if none (or unreadable)."""
    text = properties.get(prop.CHECK_IMMUNITY_TIME_IN_SECONDS, "")
    return int(text) * 1000 if text.isdigit() else 0


@dataclasses.dataclass(frozen=True, slots=True)
class Resolved:
    resolution: str
    # Where its op record is; None for a half queue entry that could not be read.
    op_offset: int | None


@dataclasses.dataclass(frozen=True, slots=True)
class _SavedState:
    watermark: int
    op_scan_from: int
    checks: dict[int, int]


def _parse_saved_state(document: dict) -> _SavedState:
    return _SavedState(
        int(document.get("watermark", 0)),
        int(document.get("opScanFrom", 0)),
        {int(k): int(v) for k, v in document.get("checks", {}).items()},
    )


class TransactionService(ServiceThread):
    # Each step is one check round (check_unresolved), every check interval.
    name = "transaction-checker"

    def __init__(
        self,
        store: MessageStore,
        state_path: str,
        *,
        timeout_ms: int,
        check_interval_ms: int,
        check_max: int,
        send_check: CheckSender | None = None,
    ) -> None:
        if check_interval_ms <= 0 or timeout_ms < 0 or check_max < 0:
            raise ValueError(
                "the transaction check interval must be positive, and the transaction "
                "timeout and maximum number of checks not negative"
            )
        super().__init__(check_interval_ms / 1000)
        self._store = store
        self._file = StateFile(
            state_path,
            indent=None,
            lost="the transaction watermark and check counts (every half message still in "
            "the log is checked with its producer again)",
        )
        # The saved state, read by load() (before the store starts) and used by start().
        self._saved: _SavedState | None = None
        self.timeout_ms = timeout_ms
        self.check_interval_ms = check_interval_ms
        self.check_max = check_max
        # The server sets this once it can reach producers' telemetry streams.
        self.send_check = send_check
        self._lock = threading.Lock()
        self._persisting = threading.Lock()
        self._pending: dict[int, HalfEntry] = {}
        # Resolved half offsets at or above the watermark (the op queue is re-read for them).
        self._resolved: dict[int, Resolved] = {}
        self._recent: collections.OrderedDict[int, str] = collections.OrderedDict()
        # Ends being written, and for each the op-queue offset its op record will follow.
        self._resolving: dict[int, str] = {}
        self._op_floors: dict[int, int] = {}
        self._watermark = 0
        self._dirty = False

    # -- lifecycle ----------------------------------------------------------

    def load(self, *, discard_damaged: bool = False) -> None:
        """Read the saved state; a damaged file fails here, before the store starts."""
        saved = self._file.read(_parse_saved_state, discard_damaged=discard_damaged)
        self._saved = saved if saved is not None else _SavedState(0, 0, {})

    def start(self) -> None:
        if self._saved is None:
            self.load()
        self._rebuild()
        # A later start (after a stop) reads what that stop saved.
        self._saved = None
        super().start()

    def stop(self) -> None:
        """Finish the check round under way, stop, and write the state."""
        super().stop()
        self.persist()

    @property
    def unresolved_count(self) -> int:
        with self._lock:
            return len(self._pending)

    # -- prepare ------------------------------------------------------------

    async def prepare(self, message: Message, producer_group: str) -> tuple[PutResult, str]:
        """Store ``message`` as a half message; returns the put result and transaction id."""
        properties = dict(message.properties)
        properties[prop.REAL_TOPIC] = message.topic
        properties[prop.REAL_QUEUE_ID] = str(message.queue_id)
        properties[prop.TRANSACTION_PREPARED] = "true"
        properties[prop.PRODUCER_GROUP] = producer_group
        properties[prop.TRANSACTION_ID] = properties.get(prop.UNIQ_KEY, "")
        half = Message(
            topic=prop.HALF_TOPIC,
            body=message.body,
            queue_id=HALF_QUEUE,
            properties=properties,
            flag=message.flag,
            # A plain record, so the half topic's queue lists it for the checker.
            sys_flag=message.sys_flag & ~TRANSACTION_MASK,
            born_timestamp=message.born_timestamp,
            born_host=message.born_host,
            reconsume_times=message.reconsume_times,
        )
        result = await self._store.put_messages_async([half])
        if result.append is None:
            return result, ""
        append = result.append
        physical, size = append.physical_offsets[0], append.sizes[0]
        with self._lock:
            self._pending[append.queue_offsets[0]] = HalfEntry(
                physical, size, append.store_timestamp, immunity_ms=_immunity_ms(properties)
            )
        return result, encode_transaction_id(physical, size)

    # -- end ----------------------------------------------------------------

    async def end(
        self, *, topic: str, message_id: str, transaction_id: str, commit: bool, from_check: bool
    ) -> None:
        """Commit or roll back; ending a transaction the same way again changes nothing."""
        half = self._half_for(transaction_id, topic, message_id)
        resolution = _COMMIT if commit else _ROLLBACK
        earlier = self._claim(half.queue_offset, resolution)
        if earlier is not None:
            if earlier in (resolution, _UNKNOWN):
                return
            raise AlreadyEnded(
                f"transaction {transaction_id} was already {_word(earlier)}; "
                f"it cannot be {_word(resolution)} now",
            )
        result: PutResult | None = None
        try:
            result = await self._store.put_messages_async(self._end_records(half, resolution))
        finally:
            self._settle(half.queue_offset, resolution, result)
        if result.append is None:
            raise EndNotStored(
                result.status,
                f"transaction {transaction_id} could not be {_word(resolution)}: "
                f"{result.reason}; try again",
            )
        log.info(
            "transaction %s of %s %s%s",
            transaction_id,
            half.unique_id,
            _word(resolution),
            " (answer to a check)" if from_check else "",
        )
        if not result.ok:
            # Written, so a retry is answered OK; but it may not be on disk yet.
            raise EndNotStored(result.status, result.reason)

    def _half_for(self, transaction_id: str, topic: str, message_id: str) -> StoredMessage:
        location = decode_transaction_id(transaction_id)
        unknown = f"transaction id {transaction_id!r} was not issued by this broker"
        if location is None:
            raise UnknownTransaction(unknown)
        physical, size = location
        commit_log = self._store.commit_log
        if not (
            commit_log.min_offset <= physical
            and 0 < size <= self._store.config.max_message_size + 64 * 1024
            and physical + size <= commit_log.max_offset
        ):
            raise UnknownTransaction(
                f"{unknown}, or its half message was deleted by retention",
            )
        # A record starts there with that size, or the store would log a corrupt read.
        head = commit_log.read(physical, SIZE_MAGIC.size)
        if head is None or SIZE_MAGIC.unpack(head) != (size, MESSAGE_MAGIC):
            raise UnknownTransaction(unknown)
        half = self._store.get_message_at(physical, size)
        if half is None or half.topic != prop.HALF_TOPIC or half.physical_offset != physical:
            raise UnknownTransaction(unknown)
        real_topic = half.properties.get(prop.REAL_TOPIC, "")
        if real_topic != topic:
            raise UnknownTransaction(
                f"transaction {transaction_id} belongs to topic {real_topic!r}, not {topic!r}",
            )
        if message_id and message_id != half.unique_id:
            raise UnknownTransaction(
                f"transaction {transaction_id} belongs to message {half.unique_id}, "
                f"not {message_id}",
            )
        return half

    def _claim(self, half_offset: int, resolution: str) -> str | None:
        """None: the caller ends the transaction now. Else how it ended or is ending."""
        with self._lock:
            done = self._resolved.get(half_offset)
            if done is not None:
                return done.resolution
            if half_offset in self._recent:
                return self._recent[half_offset]
            if half_offset < self._watermark:
                return _UNKNOWN
            if half_offset in self._resolving:
                return self._resolving[half_offset]
            self._resolving[half_offset] = resolution
            # Its op record gets an offset at or above the op queue's current end.
            self._op_floors[half_offset] = self._store.max_offset(prop.OP_HALF_TOPIC, OP_QUEUE)
            return None

    def _settle(self, half_offset: int, resolution: str, result: PutResult | None) -> None:
        with self._lock:
            del self._resolving[half_offset]
            del self._op_floors[half_offset]
            if result is not None and result.append is not None:
                self._pending.pop(half_offset, None)
                self._resolved[half_offset] = Resolved(resolution, result.append.queue_offsets[-1])
                self._advance_watermark()

    def _advance_watermark(self) -> None:
        while self._watermark in self._resolved:
            done = self._resolved.pop(self._watermark)
            self._recent[self._watermark] = done.resolution
            if len(self._recent) > _RECENT_RESOLUTIONS:
                self._recent.popitem(last=False)
            self._watermark += 1
        self._dirty = True

    @staticmethod
    def _end_records(half: StoredMessage, resolution: str) -> list[Message]:
        op = Message(
            topic=prop.OP_HALF_TOPIC,
            body=str(half.queue_offset).encode(),
            queue_id=OP_QUEUE,
            properties={prop.TAGS: OP_TAG, OP_RESOLUTION: resolution},
        )
        if resolution != _COMMIT:
            return [op]
        restored = as_sent(half)
        committed = Message(
            topic=restored.topic,
            body=half.body,
            queue_id=restored.queue_id,
            properties=restored.properties,
            flag=half.flag,
            sys_flag=(half.sys_flag & ~TRANSACTION_MASK) | TRANSACTION_COMMIT_TYPE,
            born_timestamp=half.born_timestamp,
            born_host=half.born_host,
            reconsume_times=half.reconsume_times,
            prepared_transaction_offset=half.physical_offset,
        )
        # Real message first: both land together or neither does.
        return [committed, op]

    # -- checking -----------------------------------------------------------

    def step(self) -> None:
        self.check_unresolved()

    def check_unresolved(self) -> None:
        """One round: ask about each half message older than the timeout, or give it up."""
        now = _now_ms()
        with self._lock:
            due = [
                (offset, entry)
                for offset, entry in self._pending.items()
                if offset not in self._resolving
                and now - entry.stored_at >= max(self.timeout_ms, entry.immunity_ms)
            ]
        for offset, entry in due:
            half = self._store.get_message_at(entry.physical, entry.size)
            if half is None:
                log.error("half message at %d is no longer readable; forgetting it", offset)
                self._forget(offset)
            elif entry.checks >= self.check_max:
                self._give_up(half, entry.checks)
            else:
                self._ask(half, entry)

    def _ask(self, half: StoredMessage, entry: HalfEntry) -> None:
        with self._lock:
            entry.checks += 1
            self._dirty = True
        transaction_id = encode_transaction_id(half.physical_offset, half.store_size)
        message = as_sent(half)
        sender = self.send_check
        asked = False
        if sender is not None:
            try:
                asked = sender(message, transaction_id)
            except Exception:
                log.exception("could not send a transaction check")
        if not asked:
            log.info(
                "no producer of %s to ask about transaction %s (check %d of %d)",
                message.topic,
                transaction_id,
                entry.checks,
                self.check_max,
            )

    def _give_up(self, half: StoredMessage, checks: int) -> None:
        offset = half.queue_offset
        if self._claim(offset, _ROLLBACK) is not None:
            return  # ended meanwhile
        result: PutResult | None = None
        try:
            result = self._store.put_messages(self._end_records(half, _ROLLBACK))
        finally:
            self._settle(offset, _ROLLBACK, result)
        if result.append is None:
            log.warning("could not roll back transaction of %s: %s", half.unique_id, result.reason)
        else:
            log.warning(
                "rolled back transaction of %s on %s: no answer after %d checks",
                half.unique_id,
                half.properties.get(prop.REAL_TOPIC),
                checks,
            )

    def _forget(self, offset: int) -> None:
        with self._lock:
            if self._pending.pop(offset, None) is not None:
                self._resolved[offset] = Resolved(_UNKNOWN, None)
                self._advance_watermark()

    # -- persistence and rebuild --------------------------------------------

    def persist(self) -> bool:
        with self._persisting:
            with self._lock:
                if not self._dirty:
                    return False
                # Op records of halves at or above the watermark must be read again at start.
                floors = [r.op_offset for r in self._resolved.values() if r.op_offset is not None]
                floors.extend(self._op_floors.values())
                floors.append(self._store.max_offset(prop.OP_HALF_TOPIC, OP_QUEUE))
                document = {
                    "version": 1,
                    "watermark": self._watermark,
                    "opScanFrom": min(floors),
                    "checks": {
                        str(offset): entry.checks
                        for offset, entry in self._pending.items()
                        if entry.checks
                    },
                }
                self._dirty = False
            try:
                self._file.write(document)
            except OSError:
                with self._lock:
                    self._dirty = True
                raise
        return True

    def _rebuild(self) -> None:
        saved = self._saved if self._saved is not None else _SavedState(0, 0, {})
        store = self._store
        watermark = max(saved.watermark, store.min_offset(prop.HALF_TOPIC, HALF_QUEUE))
        op_from = max(saved.op_scan_from, store.min_offset(prop.OP_HALF_TOPIC, OP_QUEUE))
        checks = dict(saved.checks)
        resolved: dict[int, Resolved] = {}
        for op_offset, op in store.scan_queue(prop.OP_HALF_TOPIC, OP_QUEUE, op_from):
            if op is None or not op.body.isdigit():
                continue
            half_offset = int(op.body)
            if half_offset >= watermark:
                resolution = op.properties.get(OP_RESOLUTION, _UNKNOWN)
                resolved[half_offset] = Resolved(resolution, op_offset)
        pending: dict[int, HalfEntry] = {}
        for offset, half in store.scan_queue(prop.HALF_TOPIC, HALF_QUEUE, watermark):
            if offset in resolved:
                continue
            if half is None:
                resolved[offset] = Resolved(_UNKNOWN, None)
                continue
            pending[offset] = HalfEntry(
                half.physical_offset,
                half.store_size,
                half.store_timestamp,
                checks.get(offset, 0),
                _immunity_ms(half.properties),
            )
        with self._lock:
            self._watermark = watermark
            self._resolved = resolved
            self._pending = pending
            self._advance_watermark()
        log.info(
            "transaction service: %d unresolved half messages from half offset %d",
            len(pending),
            watermark,
        )


def as_sent(half: StoredMessage) -> StoredMessage:
    """The half message as its producer sent it: real topic and queue, no routing properties."""
    properties = dict(half.properties)
    topic = properties.pop(prop.REAL_TOPIC, half.topic)
    queue_id = properties.pop(prop.REAL_QUEUE_ID, "")
    return dataclasses.replace(
        half,
        topic=topic,
        queue_id=int(queue_id) if queue_id.isdecimal() else half.queue_id,
        properties=properties,
    )
