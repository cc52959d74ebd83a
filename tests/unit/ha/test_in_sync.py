"""In-sync tracking and SYNC waiters: a write is released once enough in-sync replicas hold it."""

from __future__ import annotations

import asyncio
import threading

import pytest

from skiff_broker.ha.in_sync import InSyncTracker, NameInUse


class Log:
    def __init__(self) -> None:
        self.end = 0


def tracker(required: int = 1, max_gap: int = 1000) -> tuple[InSyncTracker, Log]:
    log = Log()
    return InSyncTracker(required=required, max_gap=max_gap, master_offset=lambda: log.end), log


def test_a_waiter_is_released_by_the_ack_that_covers_it() -> None:
    sync, log = tracker()
    replica = sync.connected("r-1", "10.0.0.2:5000", 0)
    log.end = 300

    async def scenario() -> tuple[bool, bool]:
        first = asyncio.create_task(sync.wait_async(200, timeout=5))
        second = asyncio.create_task(sync.wait_async(300, timeout=5))
        await asyncio.sleep(0.01)
        sync.acked(replica, 200)
        first_done = await first
        assert not second.done(), "an ack short of the write must not release it"
        sync.acked(replica, 300)
        return first_done, await second

    assert asyncio.run(scenario()) == (True, True)


def test_a_write_times_out_when_no_replica_confirms() -> None:
    sync, log = tracker()
    sync.connected("r-1", "a", 0)
    log.end = 100
    assert asyncio.run(sync.wait_async(100, timeout=0.05)) is False
    assert sync.wait(100, timeout=0.05) is False


def test_two_required_replicas_wait_for_the_slower_one() -> None:
    sync, log = tracker(required=2)
    fast = sync.connected("fast", "a", 0)
    slow = sync.connected("slow", "b", 0)
    log.end = 500
    sync.acked(fast, 500)
    assert sync.replicated_offset() == 0
    assert sync.wait(500, timeout=0.05) is False
    sync.acked(slow, 400)
    assert sync.replicated_offset() == 400
    sync.acked(slow, 500)
    assert sync.wait(500, timeout=0.05) is True


def test_a_replica_beyond_the_gap_is_out_of_sync_and_does_not_count() -> None:
    sync, log = tracker(max_gap=1000)
    replica = sync.connected("r-1", "a", 0)
    log.end = 5000
    sync.acked(replica, 3000)
    (status,) = sync.statuses()
    assert (status.in_sync, status.lag_bytes, status.acked_offset) == (False, 2000, 3000)
    # It holds offset 3000, but out of sync it is no guarantee.
    assert sync.wait(3000, timeout=0.05) is False
    sync.acked(replica, 4500)
    (status,) = sync.statuses()
    assert status.in_sync and status.lag_bytes == 500
    assert sync.wait(4500, timeout=0.05) is True


def test_a_disconnected_replica_is_out_of_sync_until_it_reconnects() -> None:
    sync, log = tracker()
    old = sync.connected("r-1", "a", 0)
    sync.disconnected(old)
    (status,) = sync.statuses()
    assert not status.connected and not status.in_sync
    assert sync.replicated_offset() == -1
    new = sync.connected("r-1", "a:2", 0)
    sync.disconnected(old)  # the old connection's late cleanup must not touch the new one
    (status,) = sync.statuses()
    assert status.connected and status.address == "a:2"
    log.end = 10
    sync.acked(new, 10)
    assert sync.wait(10, timeout=1) is True


def test_a_blocked_thread_is_released_by_an_ack() -> None:
    sync, log = tracker()
    replica = sync.connected("r-1", "a", 0)
    log.end = 64
    results: list[bool] = []
    waiter = threading.Thread(target=lambda: results.append(sync.wait(64, timeout=5)))
    waiter.start()
    sync.acked(replica, 64)
    waiter.join()
    assert results == [True]


def test_a_live_replicas_name_cannot_be_taken_over() -> None:
    sync, _ = tracker()
    sync.connected("r-1", "10.0.0.2:5000", 0)
    with pytest.raises(NameInUse, match=r"already connected from 10\.0\.0\.2:5000"):
        sync.connected("r-1", "10.0.0.66:6000", 0)
    (status,) = sync.statuses()
    assert (status.address, status.connected) == ("10.0.0.2:5000", True)


def test_a_replica_reconnects_once_its_old_connection_closed() -> None:
    sync, _ = tracker()
    old = sync.connected("r-1", "10.0.0.2:5000", 0)
    sync.disconnected(old)
    sync.connected("r-1", "10.0.0.2:5001", 0)
    (status,) = sync.statuses()
    assert (status.address, status.connected) == ("10.0.0.2:5001", True)


def test_a_replica_silent_past_the_heartbeat_timeout_can_be_replaced() -> None:
    log = Log()
    sync = InSyncTracker(
        required=1, max_gap=1000, master_offset=lambda: log.end, heartbeat_timeout=20
    )
    old = sync.connected("r-1", "10.0.0.2:5000", 0)
    # Its connection is not closed yet, but nothing was heard for longer than the timeout.
    old.last_heard -= 21
    sync.connected("r-1", "10.0.0.2:5001", 0)
    (status,) = sync.statuses()
    assert status.address == "10.0.0.2:5001"
