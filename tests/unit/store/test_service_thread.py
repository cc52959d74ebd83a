"""The one shape of the broker's background threads: steps, failures, stop and restart."""

from __future__ import annotations

import logging
import threading

import pytest

from skiff_broker.store.service_thread import ConditionServiceThread, ServiceThread


class Counting(ServiceThread):
    """Steps only when woken; the first ``failures`` steps raise."""

    name = "counting"

    def __init__(self, failures: int = 0) -> None:
        super().__init__(interval=None)
        self.failures = failures
        self.steps = 0
        self.stops = 0
        self.stepped = threading.Semaphore(0)

    def step(self) -> None:
        self.steps += 1
        self.stepped.release()
        if self.steps <= self.failures:
            raise OSError("disk trouble")

    def on_stop(self) -> None:
        self.stops += 1


def test_a_failed_step_is_logged_and_the_service_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    service = Counting(failures=1)
    service.start()
    try:
        service.wakeup()
        assert service.stepped.acquire(timeout=30)
        service.wakeup()
        assert service.stepped.acquire(timeout=30), "the service ended with its failed step"
    finally:
        service.stop()
    failed = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage() for r in failed] == ["counting step failed; trying again"]
    assert "disk trouble" in (failed[0].exc_text or "")


def test_no_step_after_stop_and_on_stop_runs_once_per_start() -> None:
    service = Counting()
    service.start()
    service.stop()
    # stop() wakes the thread, which must end instead of stepping.
    assert (service.steps, service.stops) == (0, 1)
    service.start()
    service.wakeup()
    assert service.stepped.acquire(timeout=30), "a restarted service does not step"
    service.stop()
    assert (service.steps, service.stops) == (1, 2)


class Queue(ConditionServiceThread):
    """Takes one item per step; steps only while items wait."""

    name = "queue"

    def __init__(self) -> None:
        super().__init__()
        self.items: list[int] = []
        self.taken: list[int] = []
        self.drained_at_stop: list[int] = []
        self.took = threading.Semaphore(0)

    def put(self, item: int) -> None:
        with self._work:
            self.items.append(item)
            self._work.notify()

    def work_due_in(self) -> float | None:
        return 0 if self.items else None

    def step(self) -> None:
        with self._work:
            self.taken.append(self.items.pop(0))
        self.took.release()

    def on_stop(self) -> None:
        with self._work:
            self.drained_at_stop, self.items = self.items, []


def test_a_condition_service_steps_for_each_piece_of_work_and_stops_when_idle() -> None:
    service = Queue()
    service.start()
    try:
        for item in range(3):
            service.put(item)
        for _ in range(3):
            assert service.took.acquire(timeout=30)
        # Every step found work: none ran on a tick with nothing to do.
        assert service.taken == [0, 1, 2]
    finally:
        # Waiting without a timeout, it must still notice the stop.
        service.stop()
    assert service.drained_at_stop == []


def test_work_left_at_stop_goes_to_on_stop() -> None:
    service = Queue()
    service.put(7)
    service.start()
    assert service.took.acquire(timeout=30)
    service.stop()
    service.put(8)
    service.start()
    service.stop()
    # Whether or not the second start stepped once before stopping, 8 is not lost.
    assert sorted(service.taken[1:] + service.drained_at_stop) == [8]
