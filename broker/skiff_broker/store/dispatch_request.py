"""What the dispatcher needs of one record to index it."""

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


def index_keys(keys: str, unique_key: str | None) -> list[str]:
    """What a record is indexed under: the keys of its KEYS property, then its message ID."""
    found = keys.split()
    if unique_key:
        found.append(unique_key)
    return found
