"""Offsets of the Spark data source: resolving options, rate limits, and queue slices.

An offset of the source is ``{topic: {queue: next offset}}``: the queue IDs are
strings (Spark stores offsets as JSON, whose keys are strings) and each value is
the first offset *not* read yet, an exclusive end. This is what the streaming
checkpoint holds.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable

from ..client.credentials import Credentials
from ..client.errors import BrokerUnavailable
from ..client.pull_consumer import PullConsumer
from .options import EARLIEST, LATEST, OffsetSpec, OptionError

# topic -> queue ID (as a string) -> next offset
Offsets = dict[str, dict[str, int]]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class QueueSlice:
    """The messages ``start <= offset < end`` of one queue: one Spark partition."""

    topic: str
    queue_id: int
    start: int
    end: int


def connect(
    endpoints: Iterable[str], topic: str, credentials: Credentials | None = None
) -> PullConsumer:
    """A consumer of the first endpoint that answers (asked for ``topic``'s queues)."""
    failures = []
    for endpoint in endpoints:
        consumer = PullConsumer(endpoint, credentials=credentials)
        try:
            consumer.queue_ids(topic)
        except BrokerUnavailable as exc:
            consumer.close()
            failures.append(exc.message)
            continue
        except BaseException:
            consumer.close()
            raise
        return consumer
    raise BrokerUnavailable("; ".join(failures) or "no endpoint given")


def resolve(consumer: PullConsumer, topics: Iterable[str], spec: OffsetSpec) -> Offsets:
    """Concrete offsets for every readable queue of ``topics``."""
    resolved: Offsets = {}
    for topic in topics:
        queue_ids = consumer.queue_ids(topic)
        unknown = set(spec.per_queue.get(topic, {})) - set(queue_ids)
        if unknown:
            raise OptionError(
                f"topic {topic!r} has no readable queue {sorted(unknown)}; "
                f"its queues are {queue_ids}"
            )
        resolved[topic] = {}
        for queue_id in queue_ids:
            value = spec.per_queue.get(topic, {}).get(queue_id)
            if spec.by_timestamp and spec.timestamp is not None:
                value = spec.timestamp
            if value is None:
                value = spec.default
            elif spec.by_timestamp:
                resolved[topic][str(queue_id)] = consumer.offset_for_time(topic, queue_id, value)
                continue
            if value == EARLIEST:
                value = consumer.min_offset(topic, queue_id)
            elif value == LATEST:
                value = consumer.max_offset(topic, queue_id)
            resolved[topic][str(queue_id)] = value
    return resolved


def latest(consumer: PullConsumer, topics: Iterable[str]) -> Offsets:
    return {
        topic: {str(q.queue_id): q.max_offset for q in consumer.queue_ranges(topic)}
        for topic in topics
    }


def fill_new_queues(consumer: PullConsumer, start: Offsets, end: Offsets) -> Offsets:
    """``start`` with queues that appeared since (in ``end``) starting at their oldest offset."""
    filled = {topic: dict(queues) for topic, queues in start.items()}
    for topic, queues in end.items():
        for queue, _ in queues.items():
            if queue not in filled.setdefault(topic, {}):
                filled[topic][queue] = consumer.min_offset(topic, int(queue))
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
                    f"{topic}/{queue} now ends at offset {stop}, before offset {begin} that "
                    "was already read: the queue was deleted or truncated"
                )
                if fail_on_data_loss:
                    raise DataLossError(
                        message + '; set failOnDataLoss to "false" to go on from its end'
                    )
                log.warning("%s; skipping to its end", message)
                continue
            if stop > begin:
                result.append(QueueSlice(topic, int(queue), begin, stop))
    return result


class DataLossError(RuntimeError):
    """Messages the query should read are gone, and ``failOnDataLoss`` is true."""
