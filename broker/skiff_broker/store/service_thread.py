"""A background service: a daemon thread that runs a step whenever there is work.

Every background thread of the broker has this one shape: ``start()``, ``wakeup()``,
``stop()``, a ``step()`` run repeatedly and an ``on_stop()`` run once after the last step.

Invariants:

* No step starts after ``stop()`` was called; a step under way finishes first.
* ``on_stop()`` runs exactly once per start, on the service's thread, after the last step;
  ``stop()`` returns after it.
* A step that raises is logged and the service goes on (after ``failure_pause``): one
  failed step (a full disk, an unreachable peer) must not end the service.
* A service may be started again after it stopped.

:class:`ServiceThread` steps every ``interval`` or as soon as it is woken.
:class:`ConditionServiceThread` steps exactly when its own condition says there is work
(``work_due_in``), never on a polling tick: latency-critical services (group commit) and
ones that sleep until a deadline (delayed delivery) use it.
"""

from __future__ import annotations

import contextlib
import logging
import threading

log = logging.getLogger(__name__)


class ServiceThread:
    """Subclasses implement :meth:`step`; :meth:`on_stop` runs once after the last step."""

    name = "service"
    # Seconds to wait after a failed step before the next, so a lasting failure
    # does not spin (0: the next wake-up or interval, as for any step).
    failure_pause = 0.0

    def __init__(self, interval: float | None) -> None:
        """``interval``: seconds between steps when nobody wakes the service (None: never)."""
        self.interval = interval
        # A wake-up signal, not an Event: set means locked means "none pending". Writers wake
        # the dispatcher once per append, so both sides stay single C calls (an Event is a
        # Python-level Condition: a lock allocation and several calls per wake-up).
        self._signal = threading.Lock()
        self._signal.acquire()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stopped.clear()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def wakeup(self) -> None:
        """Run a step now instead of at the end of the interval."""
        if self._signal.locked():
            # Another thread may deliver the same wake-up first.
            with contextlib.suppress(RuntimeError):
                self._signal.release()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def stop(self) -> None:
        """Stop after the step under way and :meth:`on_stop`; returns when both are done."""
        self._stopped.set()
        self.wakeup()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def wait_for_work(self) -> bool:
        """Block until the next step is due; False once the service is stopping."""
        self._signal.acquire(timeout=-1 if self.interval is None else self.interval)
        return not self._stopped.is_set()

    def _run(self) -> None:
        log.debug("%s started", self.name)
        while self.wait_for_work():
            try:
                self.step()
            except Exception:
                # A service must outlive one failed step; the next may succeed.
                log.exception("%s step failed; trying again", self.name)
                if self.failure_pause:
                    self._stopped.wait(self.failure_pause)
        try:
            self.on_stop()
        except Exception:
            log.exception("%s failed while stopping", self.name)
        log.debug("%s stopped", self.name)

    def step(self) -> None:
        raise NotImplementedError

    def on_stop(self) -> None:
        """Final work after the service is asked to stop."""


class ConditionServiceThread(ServiceThread):
    """A service that steps when :meth:`work_due_in` says so, woken through ``self._work``.

    Subclasses guard their state with the condition ``self._work`` (a lock too) and call
    ``self._work.notify_all()`` while holding it when work arrives. ``work_due_in`` is
    called with the condition held.
    """

    def __init__(self) -> None:
        super().__init__(interval=None)
        # A plain lock: appenders take it on the hot path (group commit requests).
        self._work = threading.Condition(threading.Lock())

    def work_due_in(self) -> float | None:
        """Seconds until the next step is due: 0 (or less) for now, None for when notified."""
        raise NotImplementedError

    def wakeup(self) -> None:
        with self._work:
            self._work.notify_all()

    def wait_for_work(self) -> bool:
        with self._work:
            while not self._stopped.is_set():
                due_in = self.work_due_in()
                if due_in is not None and due_in <= 0:
                    return True
                self._work.wait(due_in)
            return False
