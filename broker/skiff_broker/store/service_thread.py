"""A background service: a daemon thread that runs a step every interval or on wake-up."""

from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)


class ServiceThread:
    """Subclasses implement :meth:`step`; :meth:`on_stop` runs once after the last step."""

    name = "service"

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._wakeup = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def wakeup(self) -> None:
        self._wakeup.set()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def stop(self) -> None:
        self._stopped.set()
        self._wakeup.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while not self._stopped.is_set():
            self._wakeup.wait(self.interval)
            self._wakeup.clear()
            try:
                self.step()
            except Exception:
                # A service must outlive one failed step; the next may succeed.
                log.exception("%s step failed", self.name)
        try:
            self.on_stop()
        except Exception:
            log.exception("%s failed while stopping", self.name)

    def step(self) -> None:
        raise NotImplementedError

    def on_stop(self) -> None:
        """Final work after the service is asked to stop."""
