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

import ast
import dataclasses

from skiff_broker.client.admin import AdminClient, Permission, Topic
from skiff_broker.client.errors import InvalidArgument, NotFound

from .admin_access import AdminAccess

# No official client accepts a space in a group name, so no group of this name exists:
# asking for its lag gets the NOT_FOUND reply that names the groups that do.
_PROBE_GROUP = "skiff operator drain probe"
_KNOWN_GROUPS_MARK = "(groups that have: "


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
    groups = consumer_groups(admin, topic.name)
    if not groups:
        return sum(q.max_offset - q.min_offset for q in admin.queue_offsets(topic.name))
    behind: dict[int, int] = {}
    for group in groups:
        try:
            lag = admin.consumer_lag(group, topic.name)
        except NotFound:
            continue  # the group's offsets went with a topic deleted meanwhile
        for queue in lag.queues:
            behind[queue.queue_id] = max(behind.get(queue.queue_id, 0), queue.lag)
    return sum(behind.values())


def consumer_groups(admin: AdminClient, topic: str) -> list[str]:
    """The consumer groups that have consumed ``topic`` on this broker.

    The admin API names them only in its NOT_FOUND answer for a group that has not
    consumed the topic (as a Python list of quoted names). Should that answer change
    shape, no group is found and every held message counts as unconsumed: the drain
    then waits longer, it never lets a group go early.
    """
    try:
        admin.consumer_lag(_PROBE_GROUP, topic)
    except NotFound as exc:
        return groups_named_in_reply(exc.message)
    return []


def groups_named_in_reply(message: str) -> list[str]:
    """The groups a NOT_FOUND reply of ``consumer_lag`` lists; none for any other reply."""
    start = message.find(_KNOWN_GROUPS_MARK)
    end = message.rfind(")")
    if start < 0 or end < start:
        return []
    listed = message[start + len(_KNOWN_GROUPS_MARK) : end].strip()
    if listed == "none":
        return []
    try:
        names = ast.literal_eval(f"[{listed}]")
    except (ValueError, SyntaxError):
        return []
    return [n for n in names if isinstance(n, str)]
