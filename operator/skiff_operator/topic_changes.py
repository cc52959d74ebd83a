"""The order in which a topic's queue counts change on a broker, so no message is stranded.

Reads grow before writes (producers never write to a queue consumers do not visit);
writes shrink before reads, and the reads shrink only once the queues no longer
written are drained (the broker refuses it earlier, and says which queues still hold
unconsumed messages).
"""

from __future__ import annotations

import dataclasses

from skiff_broker.client.admin import Topic


def plan_topic_change(current: Topic | None, desired: Topic) -> list[Topic]:
    """The topic states to apply one after the other to go from ``current`` to ``desired``.

    Every intermediate state has no more write queues than read queues.
    """
    if current is None:
        return [desired]
    if current == desired:
        return []
    steps: list[Topic] = []
    state = dataclasses.replace(current, perm=desired.perm, message_type=desired.message_type)
    if desired.read_queues > state.read_queues:
        state = dataclasses.replace(state, read_queues=desired.read_queues)
    if state != current:
        steps.append(state)
    if desired.write_queues != state.write_queues:
        state = dataclasses.replace(state, write_queues=desired.write_queues)
        steps.append(state)
    if desired.read_queues < state.read_queues:
        state = dataclasses.replace(state, read_queues=desired.read_queues)
        steps.append(state)
    return steps
