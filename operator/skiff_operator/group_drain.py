"""Draining a broker group before it is removed: writes off, then count what is left.

A group named in ``spec.drainGroups`` takes no more writes: every topic on its master
loses its write permission (reads stay, so consumers go on), and producers' routes
stop naming the group's queues. The group may then be removed once no message on it
is unconsumed. A message is unconsumed while some consumer group that consumes the
topic has not acknowledged it; on a topic no consumer group has consumed yet, every
message it holds counts (nobody has read it). This is the same rule the broker
applies before it lets a topic's read queues shrink.
"""

from __future__ import annotations

import dataclasses

from skiff_broker.client.admin import AdminClient, Permission, Topic
from skiff_broker.client.errors import InvalidArgument, NotFound

from .admin_access import AdminAccess


@dataclasses.dataclass(frozen=True, slots=True)
class DrainProgress:
    unconsumed: int
    # One line per topic that still holds unconsumed messages.
    topics: tuple[str, ...] = ()


# Whatever a topic's permission was: consumers must be able to empty it, producers
# must not add to it.
DRAINING_PERMISSION = Permission.READ


def drain_group(endpoint: str, access: AdminAccess) -> DrainProgress:
    """Turn writes off on every topic of the group's master; what remains to consume."""
    with access.client(endpoint) as admin:
        total = 0
        lines = []
        for topic in admin.list_topics():
            if topic.perm != DRAINING_PERMISSION:
                try:
                    admin.update_topic(topic.name, perm=DRAINING_PERMISSION)
                except InvalidArgument:
                    continue  # one of the broker's own topics; it takes no client writes
            count = unconsumed_messages(admin, topic)
            if count:
                total += count
                lines.append(f"{count} unconsumed message(s) in topic {topic.name!r}")
        return DrainProgress(total, tuple(lines))


def unconsumed_messages(admin: AdminClient, topic: Topic) -> int:
    behind: dict[int, int] = {}
    consumed = False
    for group in consumer_groups(admin, topic.name):
        try:
            lag = admin.consumer_lag(group, topic.name)
        except NotFound:
            # Only live consumers and no offset yet, or the topic was deleted meanwhile.
            continue
        consumed = True
        for queue in lag.queues:
            behind[queue.queue_id] = max(behind.get(queue.queue_id, 0), queue.lag)
    if not consumed:
        return sum(q.max_offset - q.min_offset for q in admin.queue_offsets(topic.name))
    return sum(behind.values())


def consumer_groups(admin: AdminClient, topic: str) -> list[str]:
    """The consumer groups this broker knows for ``topic`` (offsets or live consumers)."""
    return [group.group for group in admin.list_consumer_groups(topic)]
