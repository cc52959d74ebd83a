"""Offsets of the Spark data source: resolving options, rate limits, and queue slices.

An offset of the source is ``{topic: {"<group>/<queue ID>": next offset}}``
(:mod:`.queue_keys`): every group of the cluster has queues 0, 1, ..., so a
queue is named by its group and ID. Each value is the first offset *not* read
yet, an exclusive end. This is what the streaming checkpoint holds.

Invariants:

- An offset names every queue it has ever named: a group that drops out of the
  route (no broker answers) keeps its offset, so it is read on from there, not
  from its start, when it comes back.
- A queue that appears later (a new group, more queues) is read from its oldest
  offset.
- Offsets checkpointed with bare queue IDs (before groups were part of the key)
  name the queues of the group whose broker answered, which is what was read then.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence

from ..client.pull_consumer import GroupQueues
from .options import EARLIEST, LATEST, OffsetSpec, OptionError
from .queue_keys import is_plain_queue_id, queue_key, split_queue_key
from .routes import GroupUnreachable, Routes

# topic -> "<group>/<queue ID>" -> next offset
Offsets = dict[str, dict[str, int]]
# topic -> its readable queues on every group, from one route answer each
Groups = Mapping[str, Sequence[GroupQueues]]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class QueueSlice:
    """The messages ``start <= offset < end`` of one queue: one Spark partition."""

    topic: str
    group: str
    queue_id: int
    start: int
    end: int


def groups_of(routes: Routes, topics: Iterable[str]) -> dict[str, list[GroupQueues]]:
    return {topic: routes.groups(topic) for topic in topics}


def named_queues(topic: str, given: Mapping[str, int], groups: Sequence[GroupQueues]) -> dict:
    """``given`` (option values by queue key or bare ID) keyed by ``"<group>/<queue>"``.

    A bare queue ID is accepted while the topic is on exactly one group.
    """
    keys = [queue_key(g.group, q) for g in groups for q in g.queue_ids]
    named: dict[str, int] = {}
    for key, value in given.items():
        if is_plain_queue_id(key):
            if len(groups) > 1:
                raise OptionError(
                    f"topic {topic!r} is on groups {[g.group for g in groups]}: name queue "
                    f'{key} with its group, e.g. "{queue_key(groups[0].group, int(key))}"'
                )
            key = queue_key(groups[0].group, int(key)) if groups else key
        named[key] = value
    unknown = set(named) - set(keys)
    if unknown:
        raise OptionError(
            f"topic {topic!r} has no readable queue {sorted(unknown)}; its queues are {keys}"
        )
    return named


def resolve(routes: Routes, groups: Groups, spec: OffsetSpec) -> Offsets:
    """Concrete offsets for every readable queue of ``groups``' topics."""
    resolved: Offsets = {}
    for topic, on_groups in groups.items():
        named = named_queues(topic, spec.per_queue.get(topic, {}), on_groups)
        resolved[topic] = {}
        for group in on_groups:
            consumer = routes.consumer(group.endpoint)
            for queue_id in group.queue_ids:
                key = queue_key(group.group, queue_id)
                value = named.get(key)
                if spec.by_timestamp and spec.timestamp is not None:
                    value = spec.timestamp
                if value is None:
                    value = spec.default
                elif spec.by_timestamp:
                    resolved[topic][key] = consumer.offset_for_time(topic, queue_id, value)
                    continue
                if value == EARLIEST:
                    value = consumer.min_offset(topic, queue_id)
                elif value == LATEST:
                    value = consumer.max_offset(topic, queue_id)
                resolved[topic][key] = value
    return resolved


def latest(routes: Routes, groups: Groups) -> Offsets:
    return {
        topic: {
            queue_key(g.group, q): routes.consumer(g.endpoint).max_offset(topic, q)
            for g in on_groups
            for q in g.queue_ids
        }
        for topic, on_groups in groups.items()
    }


def with_group_keys(offsets: Mapping[str, Mapping[str, int]], own_group: Mapping[str, str]):
    """``offsets`` with bare queue IDs named as queues of ``own_group[topic]``."""
    return {
        topic: {
            queue_key(own_group[topic], int(key)) if is_plain_queue_id(key) else key: offset
            for key, offset in queues.items()
        }
        for topic, queues in offsets.items()
    }


def upgraded(routes: Routes, offsets: Mapping[str, Mapping[str, int]]) -> Offsets:
    """Checkpointed ``offsets`` in today's keys (see the module's invariants)."""
    old = [t for t, queues in offsets.items() if any(is_plain_queue_id(k) for k in queues)]
    own = {topic: groups[0].group for topic in old if (groups := routes.groups(topic))}
    missing = set(old) - set(own)
    if missing:
        raise GroupUnreachable(
            f"the checkpoint names queues of {sorted(missing)} by bare ID, and no route "
            "names the group they were read from: start its broker and run the query again"
        )
    return with_group_keys(offsets, own)


def not_behind(start: Offsets, end: Offsets) -> Offsets:
    """``end`` with every queue of ``start``, and none before its offset in ``start``.

    A queue whose end went back (deleted and created again) waits until it passes
    the offset already read; one that left the route stays where it was.
    """
    merged = {topic: dict(queues) for topic, queues in start.items()}
    for topic, queues in end.items():
        into = merged.setdefault(topic, {})
        for key, offset in queues.items():
            into[key] = max(offset, into.get(key, offset))
    return merged


def fill_new_queues(routes: Routes, start: Offsets, end: Offsets) -> Offsets:
    """``start`` with queues that appeared since (in ``end``) starting at their oldest offset."""
    filled = {topic: dict(queues) for topic, queues in start.items()}
    for topic, queues in end.items():
        have = filled.setdefault(topic, {})
        new = [key for key in queues if key not in have]
        if not new:
            continue
        endpoints = {g.group: g.endpoint for g in routes.groups(topic)}
        for key in new:
            group, queue_id = split_queue_key(key)
            if group not in endpoints:
                endpoints[group] = routes.endpoint_of(topic, group)  # raises, saying what to do
            have[key] = routes.consumer(endpoints[group]).min_offset(topic, queue_id)
    return filled


def rate_limited(start: Offsets, end: Offsets, max_messages: int) -> Offsets:
    """``end`` cut so that at most ``max_messages`` lie between ``start`` and it.

    Each queue gets a share in proportion to what it has waiting (as Spark's Kafka
    source does), and what rounding leaves goes to the queues in order.
    """
    waiting = {
        (topic, queue): max(0, offset - start.get(topic, {}).get(queue, offset))
        for topic, queues in end.items()
        for queue, offset in queues.items()
    }
    total = sum(waiting.values())
    if total <= max_messages:
        return end
    share = {key: count * max_messages // total for key, count in waiting.items()}
    spare = max_messages - sum(share.values())
    for key, count in waiting.items():
        if spare <= 0:
            break
        extra = min(spare, count - share[key])
        share[key] += extra
        spare -= extra
    return {
        topic: {
            queue: start.get(topic, {}).get(queue, offset) + share[(topic, queue)]
            if waiting[(topic, queue)]
            else offset
            for queue, offset in queues.items()
        }
        for topic, queues in end.items()
    }


def capped(end: Offsets, target: Offsets) -> Offsets:
    """``end`` no further than ``target`` in any queue ``target`` knows."""
    return {
        topic: {
            queue: min(offset, target.get(topic, {}).get(queue, offset))
            for queue, offset in queues.items()
        }
        for topic, queues in end.items()
    }


def slices(start: Offsets, end: Offsets, *, fail_on_data_loss: bool) -> list[QueueSlice]:
    """One slice per queue with messages between ``start`` and ``end``."""
    result = []
    for topic, queues in end.items():
        for queue, stop in queues.items():
            begin = start.get(topic, {}).get(queue, stop)
            if stop < begin:
                message = (
                    f"queue {queue} of {topic} now ends at offset {stop}, before offset {begin} "
                    "that was already read: the queue was deleted or truncated"
                )
                if fail_on_data_loss:
                    raise DataLossError(
                        message + '; set failOnDataLoss to "false" to go on from its end'
                    )
                log.warning("%s; skipping to its end", message)
                continue
            if stop > begin:
                result.append(QueueSlice(topic, *split_queue_key(queue), begin, stop))
    return result


class DataLossError(RuntimeError):
    """Messages the query should read are gone, and ``failOnDataLoss`` is true."""
