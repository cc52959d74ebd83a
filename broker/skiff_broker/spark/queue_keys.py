"""How the source names a queue in offsets and options: ``"<group>/<queue ID>"``.

Every group of a cluster has queues with the same IDs (0, 1, ...), so an ID alone
does not say which queue; the group's name (the Broker group, as routes name it)
does. The key is a string because Spark keeps offsets as JSON, whose keys are
strings. A group name may itself hold ``/``: the key splits at its last one, and
the part after it is always a decimal queue ID.
"""

from __future__ import annotations


def queue_key(group: str, queue_id: int) -> str:
    return f"{group}/{queue_id}"


def split_queue_key(key: str) -> tuple[str, int]:
    """``"orders-a/3"`` -> ``("orders-a", 3)``; ValueError for anything else."""
    group, slash, queue = key.rpartition("/")
    if not slash or not group or not queue.isdigit():
        raise ValueError(f'{key!r} is not <group>/<queue ID>, e.g. "broker-a/0"')
    return group, int(queue)


def is_plain_queue_id(key: str) -> bool:
    """A bare queue ID, as offsets named queues before groups were part of the key."""
    return key.isdigit()
