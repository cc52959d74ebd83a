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
