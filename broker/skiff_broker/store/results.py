"""What the message store answers: the outcome of a put, a read, and a stats sample.

Invariants: a ``PutResult`` carries an ``AppendResult`` exactly when the records are
in the commit log (PUT_OK, and the timeouts that report a written but unconfirmed
batch); a refused write (DISK_FULL, MESSAGE_ILLEGAL, ...) has none. A read's
``next_offset`` is always where the next read of the same queue should start.
"""

from __future__ import annotations

import dataclasses
import enum

from .commit_log import AppendResult
from .message import StoredMessage


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    DISK_FULL = "DISK_FULL"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    # SYNC replication: too few in-sync replicas confirmed the write in time.
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"


@dataclasses.dataclass(slots=True)
class PutResult:
    status: PutStatus
    reason: str = ""
    append: AppendResult | None = None

    @property
    def ok(self) -> bool:
        return self.status is PutStatus.PUT_OK


class GetStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"


# A read that found nothing because nothing was written there yet: worth waiting for.
NOT_WRITTEN_YET = frozenset({GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.NO_MESSAGE_IN_QUEUE})


@dataclasses.dataclass(slots=True)
class GetResult:
    status: GetStatus
    messages: list[StoredMessage]
    next_offset: int
    min_offset: int
    max_offset: int


@dataclasses.dataclass(slots=True)
class RecordsResult:
    status: GetStatus
    data: bytes  # whole records, back to back
    count: int
    next_offset: int
    min_offset: int
    max_offset: int


@dataclasses.dataclass(slots=True)
class StoreStats:
    commit_log_min_offset: int
    commit_log_max_offset: int
    wrote_offset: int
    committed_offset: int
    flushed_offset: int
    dispatched_offset: int
    fsync_count: int
    disk_use_ratio: float
    writable: bool
    refusal: str
