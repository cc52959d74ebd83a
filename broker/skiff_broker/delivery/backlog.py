"""How far each consumer group is behind on each topic, in messages.

Per queue, with RocketMQ's meanings: *lag* is the queue's max offset minus the
group's consumed position (everything below it acknowledged or committed);
*inflight* is what a pop consumer has been handed but not acknowledged (the next
offset to hand out minus the consumed position); *ready* is the rest of the lag,
stored and not yet handed out. A pull consumer tracks its own position, so the
broker knows only its committed offset: its whole lag counts as ready.

Invariants: ``0 <= inflight <= lag`` and ``ready == lag - inflight`` per group and
topic (each the sum over the topic's queues); a queue whose messages were deleted
under a group (retention) counts from the oldest message kept.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

# (group, topic, queue id)
QueueKey = tuple[str, str, int]


@dataclasses.dataclass(frozen=True, slots=True)
class GroupBacklog:
    topic: str
    group: str
    lag: int
    inflight: int

    @property
    def ready(self) -> int:
        return self.lag - self.inflight


def group_backlogs(
    committed: Mapping[QueueKey, int],
    popped: Mapping[QueueKey, tuple[int, int]],
    min_offset: Callable[[str, int], int],
    max_offset: Callable[[str, int], int],
) -> list[GroupBacklog]:
    """``committed``: each group's committed offset per queue; ``popped``: a pop
    consumer's (consumed position, next offset to hand out) per queue, which is newer
    than what was committed for that queue."""
    totals: dict[tuple[str, str], list[int]] = {}
    for key in committed.keys() | popped.keys():
        group, topic, queue_id = key
        end = max_offset(topic, queue_id)
        start = min_offset(topic, queue_id)
        if key in popped:
            consumed, handed_out = popped[key]
        else:
            consumed = handed_out = committed[key]
        consumed = min(max(consumed, start), end)
        handed_out = min(max(handed_out, consumed), end)
        total = totals.setdefault((group, topic), [0, 0])
        total[0] += end - consumed
        total[1] += handed_out - consumed
    return [
        GroupBacklog(topic, group, lag, inflight)
        for (group, topic), (lag, inflight) in sorted(totals.items())
    ]
