"""What the dispatcher needs of one record to index it, or of a run of one queue's records."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(slots=True)
class DispatchRequest:
    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    sys_flag: int
    store_timestamp: int
    tags: str
    keys: list[str]


@dataclasses.dataclass(slots=True)
class QueueRun:
    """Records appended together that take the next offsets of one queue in turn: plain
    messages (SYSFLAG 0: none a transaction's), without tags, each indexed under its
    message ID alone. One field a run, or one list a field, instead of a request a record.

    The commit log fills in ``queue_offset`` (the first record's), ``physical_offsets``
    and ``store_timestamp`` when it appends the run.
    """

    topic: str
    queue_id: int
    message_ids: list[str]  # none empty
    sizes: list[int]
    queue_offset: int = 0
    physical_offsets: list[int] = dataclasses.field(default_factory=list)
    store_timestamp: int = 0

    def requests(self) -> list[DispatchRequest]:
        """The same records as a request each, for the dispatcher's record-by-record rules."""
        return [
            DispatchRequest(
                self.topic,
                self.queue_id,
                self.queue_offset + n,
                physical,
                size,
                0,
                self.store_timestamp,
                "",
                [message_id],
            )
            for n, (physical, size, message_id) in enumerate(
                zip(self.physical_offsets, self.sizes, self.message_ids, strict=True)
            )
        ]


def index_keys(keys: str, unique_key: str | None) -> list[str]:
    """What a record is indexed under: the keys of its KEYS property, then its message ID."""
    found = keys.split()
    if unique_key:
        found.append(unique_key)
    return found
