"""Messages per second put and consumed, for the admin answers (putTps, consumeTps).

Rates come from samples of running totals: each topic's messages stored (the sum of
its queues' max offsets) and each group's messages consumed on each topic (the sum of
its committed offsets, whichever door committed them). A sample is taken every
``SAMPLE_INTERVAL_S`` and whenever a figure is asked for, so a figure covers the
traffic up to the moment it is asked.

Invariants:
- A rate over a window is the sum, over the totals it picks, of each total's growth
  from the oldest sample in the window that has it to the newest sample, divided by
  the seconds between the two; a total in one sample only adds 0.
- A total gone from the newest sample (a topic or group deleted) adds nothing, and a
  total that went down (an offset reset backwards, a topic made again) adds nothing.
  A reset forward does add: it is the group's progress.
- At most ``MAX_WINDOW_S`` of samples are kept.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from collections.abc import Callable

from ..runtime import Broker

log = logging.getLogger(__name__)

SAMPLE_INTERVAL_S = 10.0
# RocketMQ's brokerStatus shows rates over these windows (seconds).
WINDOWS_S = (10, 60, 600)
MAX_WINDOW_S = max(WINDOWS_S)
# Samples closer together than this are one sample (figures asked in a burst).
_MIN_SPACING_S = 0.5

Key = tuple[str, ...]  # ("put", topic) or ("consume", group, topic)
Totals = dict[Key, int]


def broker_totals(broker: Broker) -> Totals:
    """Every topic's stored and every group's consumed messages, as running totals."""
    store = broker.store
    totals: Totals = {}
    for topic in broker.topics.all():
        queues = max(topic.read_queue_nums, topic.write_queue_nums)
        totals[("put", topic.name)] = sum(store.max_offset(topic.name, q) for q in range(queues))
    # Positions live in the pop state until persisted to the offsets table.
    pairs = broker.pop.group_topics()
    pairs.update((g, name) for g, names in broker.offsets.groups().items() for name in names)
    for group, name in pairs:
        consumed = broker.topics.get(name)
        if consumed is None:
            continue
        totals[("consume", group, name)] = sum(
            max(0, broker.pop.consumer_offset(group, name, q))
            for q in range(consumed.read_queue_nums)
        )
    return totals


class TrafficRates:
    def __init__(
        self, totals: Callable[[], Totals], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._totals = totals
        self._clock = clock
        self._lock = threading.Lock()
        self._samples: collections.deque[tuple[float, Totals]] = collections.deque()

    def sample(self) -> None:
        now = self._clock()
        with self._lock:
            if self._samples and now - self._samples[-1][0] < _MIN_SPACING_S:
                return
        totals = self._totals()
        with self._lock:
            self._samples.append((now, totals))
            # Keep one sample older than the longest window, as its base.
            while len(self._samples) > 2 and now - self._samples[1][0] >= MAX_WINDOW_S:
                self._samples.popleft()

    def per_second(self, match: Callable[[Key], bool], window_s: float) -> float:
        """Messages per second over the last ``window_s``, of the totals ``match`` picks."""
        self.sample()
        with self._lock:
            newest_at, newest = self._samples[-1]
            window = [
                (at, totals)
                for at, totals in self._samples
                if newest_at - at <= window_s + SAMPLE_INTERVAL_S / 2
            ]
        # Each total from the oldest sample in the window that has it.
        first_seen: dict[Key, tuple[float, int]] = {}
        for at, totals in window[:-1]:
            for key, total in totals.items():
                if key not in first_seen and key in newest and match(key):
                    first_seen[key] = (at, total)
        return sum(
            max(0, newest[key] - total) / (newest_at - at)
            for key, (at, total) in first_seen.items()
        )

    def topic_put(self, topic: str, window_s: float = 60) -> float:
        return self.per_second(lambda key: key == ("put", topic), window_s)

    def group_consume(self, group: str, topics: list[str], window_s: float = 60) -> float:
        wanted = {("consume", group, topic) for topic in topics}
        return self.per_second(lambda key: key in wanted, window_s)

    def broker_put(self, window_s: float) -> float:
        return self.per_second(lambda key: key[0] == "put", window_s)

    def broker_consume(self, window_s: float) -> float:
        return self.per_second(lambda key: key[0] == "consume", window_s)

    async def run(self) -> None:
        """Sample every ``SAMPLE_INTERVAL_S`` until cancelled (off the event loop)."""
        while True:
            try:
                await asyncio.to_thread(self.sample)
            except Exception:
                log.exception("sampling the traffic rates failed; putTps and consumeTps may lag")
            await asyncio.sleep(SAMPLE_INTERVAL_S)
