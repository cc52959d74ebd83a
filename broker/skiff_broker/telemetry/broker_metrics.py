"""RocketMQ 5's broker metrics: messages and bytes in and out, message sizes, and each
consumer group's ready, in-flight and lagging messages.

Counters are added once per request with the request's totals, through attribute sets
built once per topic (and type or group): a 32-message batch costs what one message
does. Message sizes go into the broker's own cheap histogram (``latency_histograms``),
one bisect per message. The consumer gauges are computed when read (a scrape or an
export), from the queues' offsets: nothing is kept up to date on the hot path.

Every point carries RocketMQ's ``cluster``, ``node_type`` and ``node_id`` labels.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from ..delivery.backlog import GroupBacklog
from . import conventions as cv
from .latency_histograms import HistogramSet
from .traffic import TrafficObserver


class BrokerMetrics(TrafficObserver):
    def __init__(
        self,
        meter: Meter,
        histograms: HistogramSet,
        *,
        cluster: str,
        node_id: str,
        backlog: Callable[[], Iterable[GroupBacklog]],
    ) -> None:
        self._common = {
            cv.LABEL_CLUSTER: cluster,
            cv.LABEL_NODE_TYPE: cv.NODE_TYPE_BROKER,
            cv.LABEL_NODE_ID: node_id,
        }
        self._messages_in = meter.create_counter(
            cv.MESSAGES_IN, description="Messages stored (count)"
        )
        self._throughput_in = meter.create_counter(
            cv.THROUGHPUT_IN, description="Body bytes of the messages stored (bytes)"
        )
        self._messages_out = meter.create_counter(
            cv.MESSAGES_OUT, description="Messages delivered to consumers (count)"
        )
        self._throughput_out = meter.create_counter(
            cv.THROUGHPUT_OUT, description="Body bytes of the messages delivered (bytes)"
        )
        self._message_size = histograms.histogram(
            cv.MESSAGE_SIZE,
            unit="",
            description="Body size of each message stored (bytes)",
            bounds=cv.MESSAGE_SIZE_BUCKETS,
        )
        self._backlog = backlog
        for name, description, value in (
            (cv.CONSUMER_LAG, "Messages a group has not consumed yet", _lag),
            (cv.CONSUMER_INFLIGHT, "Messages handed to a group and not acknowledged", _inflight),
            (cv.CONSUMER_READY, "Messages stored and not yet handed to a group", _ready),
        ):
            meter.create_observable_gauge(
                name, callbacks=[self._observer(value)], description=description
            )
        self._in_points: dict[tuple[str, str], dict[str, str]] = {}
        self._out_points: dict[tuple[str, str], dict[str, str]] = {}

    def received(self, topic: str, message_type: str, sizes: Sequence[int]) -> None:
        key = (topic, message_type)
        attributes = self._in_points.get(key)
        if attributes is None:
            attributes = self._in_points[key] = {
                **self._common,
                cv.LABEL_TOPIC: topic,
                cv.LABEL_MESSAGE_TYPE: message_type,
            }
        self._messages_in.add(len(sizes), attributes)
        self._throughput_in.add(sum(sizes), attributes)
        for size in sizes:
            self._message_size.record(size, key, attributes)

    def delivered(self, topic: str, group: str, count: int, size: int) -> None:
        attributes = self._out_points.get((topic, group))
        if attributes is None:
            attributes = self._out_points[(topic, group)] = self._group_attributes(topic, group)
        self._messages_out.add(count, attributes)
        self._throughput_out.add(size, attributes)

    def _group_attributes(self, topic: str, group: str) -> dict[str, str]:
        return {**self._common, cv.LABEL_TOPIC: topic, cv.LABEL_CONSUMER_GROUP: group}

    def _observer(
        self, value: Callable[[GroupBacklog], int]
    ) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            return [
                Observation(value(b), self._group_attributes(b.topic, b.group))
                for b in self._backlog()
            ]

        return observe


def _lag(backlog: GroupBacklog) -> int:
    return backlog.lag


def _inflight(backlog: GroupBacklog) -> int:
    return backlog.inflight


def _ready(backlog: GroupBacklog) -> int:
    return backlog.ready
