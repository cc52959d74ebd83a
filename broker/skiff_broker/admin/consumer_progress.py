"""How far each consumer group has got in a topic's queues.

Answers must count what happened a moment ago. A message is in its consume
queue only once the dispatcher got to it (with the transient store pool, once
it was also committed from its write buffer); pop consumers keep their position
in memory until the broker persists (every few seconds). So :meth:`refresh`
waits for the dispatcher and persists first.
"""

from __future__ import annotations

import dataclasses

from ..runtime import Broker
from .errors import FailedPrecondition

# The dispatcher normally trails appends by milliseconds; the commit service of the
# transient store pool by its commit interval.
DISPATCH_WAIT_S = 5.0


@dataclasses.dataclass(frozen=True, slots=True)
class QueueProgress:
    queue_id: int
    min_offset: int
    max_offset: int
    # Everything below this is consumed (acknowledged) by the group.
    consumer_offset: int

    @property
    def lag(self) -> int:
        return max(0, self.max_offset - self.consumer_offset)


class ConsumerProgress:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def refresh(self) -> None:
        """Bring every message appended so far into its queue and commit pop positions.

        It waits for the dispatcher and writes state files: call it off the event loop
        (the admin handlers that do run in a worker thread). Messages appended meanwhile
        may or may not be counted, as for any look at a broker that is being written to.
        """
        if not self._broker.store.wait_dispatched(DISPATCH_WAIT_S):
            raise FailedPrecondition(
                "the broker has not yet indexed all recent messages, so it cannot tell which "
                "queues still hold some; retry in a moment"
            )
        self._broker.persist()

    def groups_of(self, topic: str) -> list[str]:
        """Groups with an offset on some queue of ``topic`` (after :meth:`refresh`)."""
        return self._broker.offsets.groups_of(topic)

    def queue(self, group: str, topic: str, queue_id: int) -> QueueProgress:
        store = self._broker.store
        min_offset = store.min_offset(topic, queue_id)
        max_offset = store.max_offset(topic, queue_id)
        offset = self._broker.pop.consumer_offset(group, topic, queue_id)
        # Never consumed here (-1), or behind what retention kept: the group's next
        # message is the oldest one still stored.
        offset = max(offset, min_offset)
        return QueueProgress(queue_id, min_offset, max_offset, offset)
