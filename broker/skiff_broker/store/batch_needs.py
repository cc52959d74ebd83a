"""What a batch will take in consume queues and index once it is dispatched.

Counted before the append so that the space can be allocated first: a write is
acknowledged only if its units and index keys will have room. The counts follow
the dispatcher's rules exactly: prepared and rolled-back transaction records get
no consume-queue unit, rolled-back ones no index keys; the key count is an upper
bound (a key repeated in one record is indexed once).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from .message import (
    TRANSACTION_MASK,
    TRANSACTION_ROLLBACK_TYPE,
    UNQUEUED_TRANSACTION_TYPES,
    Message,
    Property,
)
from .prepared_records import PreparedRecords


@dataclasses.dataclass(slots=True)
class LogicsNeeds:
    """What a batch will take in consume queues and index once dispatched."""

    # Units per (topic, queue id).
    units: dict[tuple[str, int], int]
    # Index keys (an upper bound: duplicates are indexed once).
    keys: int
    # Position in the batch of the last record whose keys are indexed.
    last_keyed: int


class _NeedsCounter:
    """Adds up a batch's needs record by record (this runs for every message)."""

    __slots__ = ("keys", "last_keyed", "position", "units")

    def __init__(self) -> None:
        self.units: dict[tuple[str, int], int] = {}
        self.keys = 0
        self.last_keyed = -1
        self.position = 0

    def add(self, topic: str, queue_id: int, sys_flag: int, key_count: int) -> None:
        transaction = sys_flag & TRANSACTION_MASK
        if transaction not in UNQUEUED_TRANSACTION_TYPES:
            units = self.units
            units[(topic, queue_id)] = units.get((topic, queue_id), 0) + 1
        if key_count and transaction != TRANSACTION_ROLLBACK_TYPE:
            self.keys += key_count
            self.last_keyed = self.position
        self.position += 1

    def needs(self) -> LogicsNeeds:
        return LogicsNeeds(self.units, self.keys, self.last_keyed)


def message_needs(messages: Sequence[Message]) -> LogicsNeeds:
    counter = _NeedsCounter()
    for m in messages:
        properties = m.properties
        keys = properties.get(Property.KEYS)
        # As index_keys counts them: the KEYS words, then the unique ID.
        key_count = (len(keys.split()) if keys else 0) + bool(properties.get(Property.UNIQ_KEY))
        counter.add(m.topic, m.queue_id, m.sys_flag, key_count)
    return counter.needs()


def prepared_needs(batch: PreparedRecords) -> LogicsNeeds:
    run = batch.run
    if run is not None:
        # A unit each, and one key each (its message ID).
        count = len(run.sizes)
        return LogicsNeeds({(run.topic, run.queue_id): count}, count, count - 1)
    counter = _NeedsCounter()
    for _, _, _, request in batch.layout:
        counter.add(request.topic, request.queue_id, request.sys_flag, len(request.keys))
    return counter.needs()
