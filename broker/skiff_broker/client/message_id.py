"""Message IDs in the official RocketMQ 5 clients' V1 format.

34 upper-case hex digits: "01", the low 6 bytes of the MAC address, the low
2 bytes of the process ID, seconds since 2021-01-01T00:00:00Z (low 4 bytes)
and a per-process sequence number (4 bytes, big-endian).
"""

from __future__ import annotations

import os
import threading
import time
import uuid

import numpy as np

_EPOCH_2021_S = 1_609_459_200
_VERSION_V1 = "01"


class MessageIdGenerator:
    def __init__(self) -> None:
        mac = uuid.getnode() & 0xFFFF_FFFF_FFFF
        pid = os.getpid() & 0xFFFF
        self._prefix = f"{_VERSION_V1}{mac:012X}{pid:04X}"
        self._sequence = 0
        self._lock = threading.Lock()
        # Everything but the sequence number, built once per second.
        self._head = (-1, "")

    def _current_head(self) -> str:
        now = int(time.time())
        second, head = self._head
        if now != second:
            head = f"{self._prefix}{(now - _EPOCH_2021_S) & 0xFFFF_FFFF:08X}"
            self._head = (now, head)
        return head

    def _reserve(self, count: int) -> int:
        """The first of ``count`` sequence numbers no other ID gets."""
        with self._lock:
            first = self._sequence
            self._sequence = first + count
        return first

    def next(self) -> str:
        head = self._current_head()
        return f"{head}{self._reserve(1) & 0xFFFF_FFFF:08X}"

    def take(self, count: int) -> list[str]:
        """``count`` IDs, as ``next()`` called ``count`` times would make them, at once."""
        head = self._current_head()
        first = self._reserve(count)
        if count < _ARRAY_FROM:
            return [
                f"{head}{sequence & 0xFFFF_FFFF:08X}" for sequence in range(first, first + count)
            ]
        return _hex_ids(head, first, count)


# Fewer IDs than this are made one by one: the arrays cost more than they save.
_ARRAY_FROM = 32
_HEX_DIGITS = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)
_NIBBLE_SHIFTS = np.arange(28, -4, -4, dtype=np.uint32)  # the 8 hex digits, first to last


def _hex_ids(head: str, first: int, count: int) -> list[str]:
    """``head`` followed by the 8 hex digits of each sequence number from ``first`` (modulo
    2**32), as a character matrix: one row an ID and a newline, split in C."""
    sequences = np.arange(first, first + count, dtype=np.uint64).astype(np.uint32)
    width = len(head) + 8
    rows = np.empty((count, width + 1), dtype=np.uint8)
    rows[:, : len(head)] = np.frombuffer(head.encode("ascii"), dtype=np.uint8)
    rows[:, len(head) : width] = _HEX_DIGITS[(sequences[:, None] >> _NIBBLE_SHIFTS) & 0xF]
    rows[:, width] = ord("\n")
    ids = rows.tobytes().decode("ascii").split("\n")
    ids.pop()  # after the last newline
    return ids


_generator = MessageIdGenerator()


def new_message_id() -> str:
    return _generator.next()


def new_message_ids(count: int) -> list[str]:
    """``count`` fresh IDs in sequence order: a batch's, for a fraction of the cost each."""
    return _generator.take(count)
