"""RocketMQ 5's broker metrics: messages and bytes in and out, message sizes, and each
consumer group's ready, in-flight and lagging messages; and Skiff's count of the client
sessions it remembers (``skiff_client_sessions``), which falls back when clients leave,
and the CPU each of its threads used (``skiff_thread_cpu_seconds_total``, read from
``/proc`` when collected).

Messages and bytes in are the message size histogram's count and sum (the broker's
own cheap histogram, ``latency_histograms``): a stored message is one size sample, so a
send request pays one list extend, and the counters read the histogram when
collected (a scrape or an export). Messages and bytes out are added once per request
with the request's totals, to plain integers kept per topic and group, which the
counters read when collected: two integer additions, not the SDK's per-call
bookkeeping. Those tallies are written on the event loop's thread only and read whole
from a collecting thread, so a collection never sees a half-made one. The consumer
gauges are computed when read, from the queues' offsets: nothing is kept up to date on
the hot path.

Every point carries RocketMQ's ``cluster``, ``node_type`` and ``node_id`` labels.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np
from opentelemetry.metrics import CallbackOptions, Meter, Observation

from ..delivery.backlog import GroupBacklog
from . import conventions as cv
from .latency_histograms import ExplicitBucketHistogram, HistogramSet
from .thread_cpu import ThreadCpu
from .traffic import TrafficObserver


class _Tally:
    """What one label set has counted so far."""

    __slots__ = ("attributes", "bytes", "messages")

    def __init__(self, attributes: dict[str, str]) -> None:
        self.attributes = attributes
        self.messages = 0
        self.bytes = 0


def _messages(tally: _Tally) -> int:
    return tally.messages


def _bytes(tally: _Tally) -> int:
    return tally.bytes


def _tally_reader(
    tallies: dict[tuple[str, str], _Tally], value: Callable[[_Tally], int]
) -> Callable[[CallbackOptions], Iterable[Observation]]:
    def observe(options: CallbackOptions) -> Iterable[Observation]:
        # One C-level copy: the event loop may add a label set meanwhile.
        return [Observation(value(t), t.attributes) for t in list(tallies.values())]

    return observe


def _count(count: int, total: float) -> int:
    return count


def _total(count: int, total: float) -> int:
    return int(total)  # body sizes are integers; their float sum is exact below 2**53


def _size_reader(
    sizes: ExplicitBucketHistogram, value: Callable[[int, float], int]
) -> Callable[[CallbackOptions], Iterable[Observation]]:
    def observe(options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(value(count, total), a) for a, count, total in sizes.totals()]

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
        sessions: Callable[[], Mapping[str, int]] = dict,
    ) -> None:
        self._common = {
            cv.LABEL_CLUSTER: cluster,
            cv.LABEL_NODE_TYPE: cv.NODE_TYPE_BROKER,
            cv.LABEL_NODE_ID: node_id,
        }
        self._message_size = histograms.histogram(
            cv.MESSAGE_SIZE,
            unit="",
            description="Body size of each message stored (bytes)",
            bounds=cv.MESSAGE_SIZE_BUCKETS,
            labels=(cv.LABEL_TOPIC, cv.LABEL_MESSAGE_TYPE),
            constant=self._common,
        )
        self._out: dict[tuple[str, str], _Tally] = {}
        meter.create_observable_counter(
            cv.MESSAGES_IN,
            callbacks=[_size_reader(self._message_size, _count)],
            description="Messages stored (count)",
        )
        meter.create_observable_counter(
            cv.THROUGHPUT_IN,
            callbacks=[_size_reader(self._message_size, _total)],
            description="Body bytes of the messages stored (bytes)",
        )
        for name, description, value in (
            (cv.MESSAGES_OUT, "Messages delivered to consumers (count)", _messages),
            (
                cv.THROUGHPUT_OUT,
                "Bytes of the messages delivered: bodies, whole records for a record fetch",
                _bytes,
            ),
        ):
            meter.create_observable_counter(
                name, callbacks=[_tally_reader(self._out, value)], description=description
            )
        self._backlog = backlog
        for name, description, backlog_value in (
            (cv.CONSUMER_LAG, "Messages a group has not consumed yet", _lag),
            (cv.CONSUMER_INFLIGHT, "Messages handed to a group and not acknowledged", _inflight),
            (cv.CONSUMER_READY, "Messages stored and not yet handed to a group", _ready),
        ):
            meter.create_observable_gauge(
                name, callbacks=[self._observer(backlog_value)], description=description
            )
        self._sessions = sessions
        meter.create_observable_gauge(
            cv.CLIENT_SESSIONS,
            callbacks=[self._observe_sessions],
            description="Client sessions the broker remembers, by client type; a session is "
            "released when its client terminates or expires (--client-expiry)",
        )

        self._thread_cpu = ThreadCpu()
        if self._thread_cpu.available:
            meter.create_observable_counter(
                cv.THREAD_CPU,
                callbacks=[self._observe_thread_cpu],
                description="CPU used by the broker's threads (seconds): event-loop is the "
                "one thread that runs every request's protocol work and the appends, so its "
                "rate nearing 1 means the broker is at its limit",
            )

    def _observe_thread_cpu(self, options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(seconds, {**self._common, cv.LABEL_THREAD: role})
            for role, seconds in self._thread_cpu.read().items()
        ]

    def _observe_sessions(self, options: CallbackOptions) -> Iterable[Observation]:
        counts = self._sessions()
        # Always a producer and a consumer point, so a scrape shows 0 rather than nothing.
        kinds = {"producer": 0, "simple_consumer": 0, "push_consumer": 0, **counts}
        return [
            Observation(count, {**self._common, cv.LABEL_CLIENT_TYPE: kind})
            for kind, count in kinds.items()
        ]

    def received(self, topic: str, message_type: str, sizes: Sequence[int] | np.ndarray) -> None:
        self._message_size.record_each(sizes, (topic, message_type))

    def delivered(self, topic: str, group: str, count: int, size: int) -> None:
        tally = self._out.get((topic, group))
        if tally is None:
            tally = self._out[(topic, group)] = _Tally(self._group_attributes(topic, group))
        tally.messages += count
        tally.bytes += size

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
