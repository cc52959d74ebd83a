"""How a consumer group reads a topic when the broker assigns its queues: PULL or POP.

``mqadmin setConsumeMode`` (SET_MESSAGE_REQUEST_MODE) sets it; a 5.x remoting consumer
with ``setClientRebalance(false)`` asks for its queues (QUERY_ASSIGNMENT) and reads them
the way this says. Kept in ``config/messageRequestMode.json``, RocketMQ's file:
``messageRequestModeMap`` maps a topic to its groups' entries.

Invariants: an entry is checked when set (mode PULL or POP, a share count from 0) and
written before the change returns; a pair without one reads PULL.
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
        with self._write_lock:
            with self._lock:
                table: dict[str, dict[str, Any]] = {}
                for (topic, group), value in self._modes.items():
                    table.setdefault(topic, {})[group] = value
            self._file.write({"messageRequestModeMap": table})

    def mode(self, topic: str, group: str) -> str:
        with self._lock:
            entry = self._modes.get((topic, group))
        return "PULL" if entry is None else str(entry["mode"])


def _parse(document: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    table = document.get("messageRequestModeMap", {})
    modes: dict[tuple[str, str], dict[str, Any]] = {}
    for topic, groups in table.items():
        for group, entry in groups.items():
            problem = mode_problem(entry)
            if problem is not None:
                raise ValueError(f"{topic}@{group}: {problem}")
            modes[(str(topic), str(group))] = dict(entry)
    return modes
