"""How a consumer group reads a topic when the broker assigns its queues: PULL or POP.

``mqadmin setConsumeMode`` (SET_MESSAGE_REQUEST_MODE) sets it; a 5.x remoting consumer
with ``setClientRebalance(false)`` asks for its queues (QUERY_ASSIGNMENT) and reads them
the way this says. Kept in ``config/messageRequestMode.json``, RocketMQ's file:
``messageRequestModeMap`` maps a topic to its groups' entries.

Invariants: an entry is checked when set (mode PULL or POP, a share count from 0) and
written before the change returns; a pair without one reads PULL. A replica holds its
master's entries (``snapshot``/``replace_all``), checked and written to its own file.
"""

from __future__ import annotations

import threading
from typing import Any

from .state_file import StateFile

MODES = ("PULL", "POP")


def mode_problem(entry: dict[str, Any]) -> str | None:
    """Why this SetMessageRequestModeRequestBody cannot be stored; None if it can."""
    for name in ("topic", "consumerGroup"):
        if not isinstance(entry.get(name), str) or not entry[name]:
            return f"{name} must be named"
    if entry.get("mode", "PULL") not in MODES:
        return f"mode must be PULL or POP, not {entry.get('mode')!r}"
    share = entry.get("popShareQueueNum", 0)
    if isinstance(share, bool) or not isinstance(share, int) or share < 0:
        return f"popShareQueueNum must be an integer from 0, not {share!r}"
    return None


class RequestModeTable:
    def __init__(self, path: str) -> None:
        self._file = StateFile(
            path, lost="the consumer groups' request modes (groups would pull, not pop)"
        )
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        # (topic, group) -> its SetMessageRequestModeRequestBody
        self._modes: dict[tuple[str, str], dict[str, Any]] = {}

    def load(self, *, discard_damaged: bool = False) -> None:
        modes = self._file.read(_parse, discard_damaged=discard_damaged)
        with self._lock:
            self._modes = modes or {}

    def put(self, entry: dict[str, Any]) -> None:
        """Store an entry, written before this returns; ValueError says what is wrong."""
        problem = mode_problem(entry)
        if problem is not None:
            raise ValueError(problem)
        kept = {
            "topic": entry["topic"],
            "consumerGroup": entry["consumerGroup"],
            "mode": entry.get("mode", "PULL"),
            "popShareQueueNum": entry.get("popShareQueueNum", 0),
        }
        with self._lock:
            self._modes[(kept["topic"], kept["consumerGroup"])] = kept
        self._write()

    def snapshot(self) -> dict[str, dict[str, dict[str, Any]]]:
        """``messageRequestModeMap`` as the file holds it (what a master sends its replicas)."""
        with self._lock:
            return self._table()

    def replace_all(self, table: dict[str, Any]) -> bool:
        """Take a master's entries in place of this table's; whether anything changed.

        Written before this returns, and only when the entries differ. Entries that do
        not pass the checks ``put`` makes raise TypeError or ValueError and change
        nothing."""
        modes = _parse({"messageRequestModeMap": table})
        with self._lock:
            if modes == self._modes:
                return False
            self._modes = modes
        self._write()
        return True

    def mode(self, topic: str, group: str) -> str:
        with self._lock:
            entry = self._modes.get((topic, group))
        return "PULL" if entry is None else str(entry["mode"])

    def _table(self) -> dict[str, dict[str, dict[str, Any]]]:
        # Called holding _lock; entries are replaced, never changed in place.
        table: dict[str, dict[str, dict[str, Any]]] = {}
        for (topic, group), value in self._modes.items():
            table.setdefault(topic, {})[group] = dict(value)
        return table

    def _write(self) -> None:
        # The table as it is when the write starts: of two changes racing, the later
        # write holds both.
        with self._write_lock:
            with self._lock:
                table = self._table()
            self._file.write({"messageRequestModeMap": table})


def _parse(document: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    table = document.get("messageRequestModeMap", {})
    if not isinstance(table, dict):
        raise TypeError("messageRequestModeMap must be an object")
    modes: dict[tuple[str, str], dict[str, Any]] = {}
    for topic, groups in table.items():
        if not isinstance(groups, dict):
            raise TypeError(f"the entries for topic {topic} must be an object")
        for group, entry in groups.items():
            if not isinstance(entry, dict):
                raise TypeError(f"the entry for {topic}@{group} must be an object")
            problem = mode_problem(entry)
            if problem is not None:
                raise ValueError(f"{topic}@{group}: {problem}")
            modes[(str(topic), str(group))] = dict(entry)
    return modes
