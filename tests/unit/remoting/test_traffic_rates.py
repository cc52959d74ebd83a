"""Rates from samples of running totals: growth over a window, never bookkeeping."""

from __future__ import annotations

from skiff_broker.remoting.traffic_rates import SAMPLE_INTERVAL_S, Totals, TrafficRates


class Feed:
    """Totals and time the test sets before each sample."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.totals: Totals = {}

    def clock(self) -> float:
        return self.now

    def read(self) -> Totals:
        return dict(self.totals)


def test_a_rate_is_the_growth_between_samples_over_the_seconds_between_them() -> None:
    feed = Feed()
    rates = TrafficRates(feed.read, feed.clock)
    feed.totals = {("put", "orders"): 100, ("consume", "billing", "orders"): 40}
    # One sample: nothing to compare with yet.
    assert rates.topic_put("orders") == 0.0
    feed.now += SAMPLE_INTERVAL_S
    feed.totals = {("put", "orders"): 300, ("consume", "billing", "orders"): 90}
    assert rates.topic_put("orders") == 20.0
    assert rates.group_consume("billing", ["orders"]) == 5.0
    assert rates.broker_put(10) == 20.0 and rates.broker_consume(10) == 5.0


def test_totals_that_appear_vanish_or_fall_add_nothing() -> None:
    feed = Feed()
    rates = TrafficRates(feed.read, feed.clock)
    feed.totals = {("put", "old"): 500, ("put", "reset"): 900, ("put", "steady"): 0}
    rates.sample()
    feed.now += SAMPLE_INTERVAL_S
    # "old" deleted, "new" created with messages, "reset" went backwards.
    feed.totals = {("put", "new"): 700, ("put", "reset"): 100, ("put", "steady"): 50}
    assert rates.broker_put(60) == 5.0


def test_a_window_starts_at_its_oldest_sample_and_old_samples_are_dropped() -> None:
    feed = Feed()
    rates = TrafficRates(feed.read, feed.clock)
    for step in range(100):
        feed.totals = {("put", "orders"): step * 100}
        rates.sample()
        feed.now += SAMPLE_INTERVAL_S
    feed.now -= SAMPLE_INTERVAL_S  # the last sample is "now"
    # 10 messages a second throughout, over any window.
    assert rates.broker_put(10) == 10.0
    assert rates.broker_put(600) == 10.0
    assert len(rates._samples) <= 600 / SAMPLE_INTERVAL_S + 2


def test_a_total_that_appears_within_the_window_counts_from_its_first_sample() -> None:
    feed = Feed()
    rates = TrafficRates(feed.read, feed.clock)
    rates.sample()  # before the group consumed anything
    feed.now += SAMPLE_INTERVAL_S
    feed.totals = {("consume", "billing", "orders"): 10}
    rates.sample()
    feed.now += SAMPLE_INTERVAL_S
    feed.totals = {("consume", "billing", "orders"): 110}
    assert rates.group_consume("billing", ["orders"], window_s=600) == 10.0
