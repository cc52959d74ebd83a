"""The broker's queue assignment splits queues as RocketMQ's client-side strategies do."""

from __future__ import annotations

from skiff_broker.remoting.assignments import averagely, by_circle

MEMBERS = ["c0", "c1", "c2"]


def test_averagely_gives_each_member_a_contiguous_share_the_first_ones_the_larger() -> None:
    queues = list(range(8))
    assert [averagely(queues, MEMBERS, m) for m in MEMBERS] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    # More members than queues: the last ones get nothing.
    assert [averagely([0, 1], MEMBERS, m) for m in MEMBERS] == [[0], [1], []]


def test_by_circle_deals_the_queues_out_in_turn() -> None:
    queues = list(range(8))
    assert [by_circle(queues, MEMBERS, m) for m in MEMBERS] == [[0, 3, 6], [1, 4, 7], [2, 5]]
