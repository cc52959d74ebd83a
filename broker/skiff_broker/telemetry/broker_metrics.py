"""RocketMQ 5's broker metrics: messages and bytes in and out, message sizes, and each
consumer group's ready, in-flight and lagging messages.

Counters are added once per request with the request's totals: a 32-message batch
costs what one message does. They are the broker's own running totals per attribute
set (built once per topic, and type or group), two integer additions under one lock,
read by the SDK as observable counters when a scrape or an export collects them: the
SDK's synchronous ``Counter.add`` costs several microseconds per call (measurement
objects, attribute hashing, exemplar filtering), which was half of what telemetry cost
a busy broker at the default sampling. Either kind exports the same cumulative
monotonic sum. Message sizes go into the broker's own cheap histogram
(``latency_histograms``), one bisect per message. The consumer gauges are computed
when read, from the queues' offsets: nothing is kept up to date on the hot path.

Every point carries RocketMQ's ``cluster``, ``node_type`` and ``node_id`` labels.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from ..delivery.backlog import GroupBacklog
from . import conventions as cv
from .latency_histograms import HistogramSet
from .traffic import TrafficObserver


class _RunningTotals:
    """Cumulative (messages, bytes) per attribute set, kept by the broker itself."""

    def __init__(self) -> None:
        # key -> [attributes, messages, bytes]
        self._totals: dict[Hashable, list] = {}
        # Requests are counted on the event loop, collections read on other threads.
        self._lock = threading.Lock()

    def add(
        self, key: Hashable, make_attributes: Callable[[], Mapping[str, str]], count: int, size: int
    ) -> None:
        with self._lock:
            totals = self._totals.get(key)
            if totals is None:
                totals = self._totals[key] = [make_attributes(), 0, 0]
            totals[1] += count
            totals[2] += size

    def observer(self, index: int) -> Callable[[CallbackOptions], Iterable[Observation]]:
        """What reports total ``index`` (1: messages, 2: bytes) to an observable counter."""

        def observe(options: CallbackOptions) -> Iterable[Observation]:
            with self._lock:
                return [Observation(t[index], t[0]) for t in self._totals.values()]

        return observe


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
        self._in = _RunningTotals()
        self._out = _RunningTotals()
        for name, description, totals, index in (
            (cv.MESSAGES_IN, "Messages stored (count)", self._in, 1),
            (cv.THROUGHPUT_IN, "Body bytes of the messages stored (bytes)", self._in, 2),
            (cv.MESSAGES_OUT, "Messages delivered to consumers (count)", self._out, 1),
            (cv.THROUGHPUT_OUT, "Body bytes of the messages delivered (bytes)", self._out, 2),
        ):
            meter.create_observable_counter(
                name, callbacks=[totals.observer(index)], description=description
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

    def received(self, topic: str, message_type: str, sizes: Sequence[int]) -> None:
        key = (topic, message_type)
        attributes = self._in_points.get(key)
        if attributes is None:
            attributes = self._in_points[key] = {
                **self._common,
                cv.LABEL_TOPIC: topic,
                cv.LABEL_MESSAGE_TYPE: message_type,
            }
        self._in.add(key, lambda: attributes, len(sizes), sum(sizes))
        for size in sizes:
            self._message_size.record(size, key, attributes)

    def delivered(self, topic: str, group: str, count: int, size: int) -> None:
        self._out.add((topic, group), lambda: self._group_attributes(topic, group), count, size)

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
