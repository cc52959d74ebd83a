"""RocketMQ's rebalance locks: one client id per queue of a group, for 60 s unless renewed."""

from __future__ import annotations

from skiff_broker.remoting.queue_locks import LOCK_TTL_MS, QueueLocks


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def test_a_queue_held_by_one_client_is_refused_to_another_until_it_expires() -> None:
    clock = Clock()
    locks = QueueLocks(clock)
    assert locks.try_lock("g", "a", [("t", 0), ("t", 1)]) == [("t", 0), ("t", 1)]
    assert locks.try_lock("g", "b", [("t", 1), ("t", 2)]) == [("t", 2)]
    # Another group locks its own copy of the queue.
    assert locks.try_lock("other", "b", [("t", 1)]) == [("t", 1)]
    clock.now += LOCK_TTL_MS
    assert locks.try_lock("g", "b", [("t", 0)]) == []
    clock.now += 1
    assert locks.try_lock("g", "b", [("t", 0)]) == [("t", 0)]
    assert locks.holder("g", ("t", 0)) == "b"


def test_the_holder_renews_its_lock_by_locking_again() -> None:
    clock = Clock()
    locks = QueueLocks(clock)
    locks.try_lock("g", "a", [("t", 0)])
    clock.now += LOCK_TTL_MS - 1
    assert locks.try_lock("g", "a", [("t", 0)]) == [("t", 0)]
    clock.now += LOCK_TTL_MS - 1
    assert locks.try_lock("g", "b", [("t", 0)]) == []
    assert locks.holder("g", ("t", 0)) == "a"


def test_only_the_holder_unlocks() -> None:
    locks = QueueLocks(Clock())
    locks.try_lock("g", "a", [("t", 0)])
    locks.unlock("g", "b", [("t", 0)])
    assert locks.holder("g", ("t", 0)) == "a"
    locks.unlock("g", "a", [("t", 0)])
    assert locks.holder("g", ("t", 0)) is None
    assert locks.try_lock("g", "b", [("t", 0)]) == [("t", 0)]
