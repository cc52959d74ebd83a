"""A budget of request octets shared by connections: what their peers may have the server hold.

Each connection claims from one :class:`ReceiveBudget` (one per process, or one per
connection when none is shared) before it opens a window past what HTTP/2 grants without
asking (65,535 octets per connection), and gives the claim back once the octets it
covered were taken by their handlers or dropped. A claim the budget cannot cover is not
forced: the connection waits, and is told (oldest waiter first) when a release makes room.

Invariants:
- ``used <= capacity`` always: a claim over what is left is refused whole.
- A waiter is told of room by :meth:`Waiter.budget_freed` from inside :meth:`release`,
  never twice at once: releases made while waiters are told are noticed by the same round.
"""

from __future__ import annotations

from typing import Protocol


class Waiter(Protocol):
    def budget_freed(self) -> None:
        """Some of the budget came free: try the claims that were refused."""


class ReceiveBudget:
    """``capacity`` octets, claimed and released by connections."""

    __slots__ = ("_again", "_telling", "_waiters", "capacity", "used")

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError("a receive budget must be positive")
        self.capacity = capacity
        self.used = 0
        # Oldest first; a dict as an ordered set.
        self._waiters: dict[Waiter, None] = {}
        self._telling = False
        self._again = False

    @property
    def available(self) -> int:
        return self.capacity - self.used

    @property
    def waiting(self) -> int:
        """How many connections wait for room."""
        return len(self._waiters)

    def claim(self, octets: int) -> bool:
        """Take ``octets`` if that many are left (True), else nothing (False)."""
        if octets > self.capacity - self.used:
            return False
        self.used += octets
        return True

    def release(self, octets: int) -> None:
        """Give back ``octets`` claimed before; waiters hear of the room."""
        if octets <= 0:
            return
        self.used -= octets
        if self._waiters:
            self._tell_waiters()

    def wait(self, waiter: Waiter) -> None:
        """``waiter`` is told of the next room (until :meth:`stop_waiting`)."""
        self._waiters.setdefault(waiter, None)

    def stop_waiting(self, waiter: Waiter) -> None:
        self._waiters.pop(waiter, None)

    def _tell_waiters(self) -> None:
        if self._telling:
            self._again = True
            return
        self._telling = True
        try:
            while True:
                self._again = False
                for waiter in list(self._waiters):
                    if self.used >= self.capacity:
                        break
                    if waiter in self._waiters:
                        waiter.budget_freed()
                if not self._again or not self._waiters:
                    return
        finally:
            self._telling = False
