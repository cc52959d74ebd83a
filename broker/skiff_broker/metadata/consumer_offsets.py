"""Committed consumer-group offsets, persisted as ``config/consumerOffset.json``.

Commits change memory only; ``persist()`` (called periodically and at shutdown,
as RocketMQ does every five seconds) writes a whole new file atomically.

The file is RocketMQ's: ``offsetTable`` maps ``topic@group`` to queue id → next
offset to consume. Apache RocketMQ 5 writes the queue ids as bare integers
(fastjson) and adds ``dataVersion`` (and, in some versions, ``pullOffsetTable``
for pull consumers' own positions, which Skiff does not keep); both dialects
read. Skiff writes the queue ids quoted, which RocketMQ reads back as integers.

When each offset last moved is kept in memory only (the file has no place for
it): it is known for commits since this broker started, and 0 otherwise.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from .state_file import StateFile

KEY_SEPARATOR = "@"


class ConsumerOffsetTable:
    def __init__(self, path: str) -> None:
        self._file = StateFile(
            path, lost="every consumer group's committed position (groups would start over)"
        )
        self.path = path
        self._lock = threading.RLock()
        # "topic@group" -> {queue id: next offset to consume}
        self._offsets: dict[str, dict[int, int]] = {}
        # "topic@group" -> {queue id: ms since the epoch the offset last moved}
        self._commit_times: dict[str, dict[int, int]] = {}
        self._dirty = False

    def load(self, *, discard_damaged: bool = False) -> None:
        offsets = self._file.read(_parse_offsets, discard_damaged=discard_damaged)
        if offsets is not None:
            self._offsets = offsets

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = f"{topic}{KEY_SEPARATOR}{group}"
        with self._lock:
            queues = self._offsets.setdefault(key, {})
            if queues.get(queue_id) != offset:
                self._commit_times.setdefault(key, {})[queue_id] = int(time.time() * 1000)
            queues[queue_id] = offset
            self._dirty = True

    def commit_time(self, group: str, topic: str, queue_id: int) -> int:
        """When the offset last moved (ms since the epoch); 0 if not since this broker started."""
        return self._commit_times.get(f"{topic}{KEY_SEPARATOR}{group}", {}).get(queue_id, 0)

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group never committed one for this queue."""
        return self._offsets.get(f"{topic}{KEY_SEPARATOR}{group}", {}).get(queue_id, -1)

    def offsets_of(self, group: str, topic: str) -> dict[int, int]:
        return dict(self._offsets.get(f"{topic}{KEY_SEPARATOR}{group}", {}))

    def positions(self) -> dict[tuple[str, str, int], int]:
        """(group, topic, queue id) -> committed offset, for every queue of every group."""
        with self._lock:
            return {
                (key.partition(KEY_SEPARATOR)[2], key.partition(KEY_SEPARATOR)[0], queue_id): offset
                for key, queues in self._offsets.items()
                for queue_id, offset in queues.items()
            }

    def groups_of(self, topic: str) -> list[str]:
        prefix = f"{topic}{KEY_SEPARATOR}"
        return sorted(key[len(prefix) :] for key in self._offsets if key.startswith(prefix))

    def groups(self) -> dict[str, list[str]]:
        """Every group with an offset -> the topics it has offsets on, both sorted."""
        with self._lock:
            keys = list(self._offsets)
        found: dict[str, set[str]] = {}
        for key in keys:
            # Topic names cannot hold the separator; group names might.
            topic, _, group = key.partition(KEY_SEPARATOR)
            found.setdefault(group, set()).add(topic)
        return {group: sorted(found[group]) for group in sorted(found)}

    def remove_group(self, group: str) -> list[str]:
        """Forget the group's offsets on every topic; the topics it had, sorted."""
        suffix = f"{KEY_SEPARATOR}{group}"
        with self._lock:
            keys = [k for k in self._offsets if k.partition(KEY_SEPARATOR)[2] == group]
            for key in keys:
                del self._offsets[key]
                self._commit_times.pop(key, None)
            if keys:
                self._dirty = True
        return sorted(key[: -len(suffix)] for key in keys)

    def remove_topic(self, topic: str) -> None:
        prefix = f"{topic}{KEY_SEPARATOR}"
        with self._lock:
            for key in [k for k in self._offsets if k.startswith(prefix)]:
                del self._offsets[key]
                self._commit_times.pop(key, None)
            self._dirty = True

    def snapshot(self) -> dict[str, dict[str, int]]:
        """ "topic@group" -> {queue id (as text): offset}, as consumerOffset.json holds them."""
        with self._lock:
            return {
                key: {str(q): o for q, o in sorted(queues.items())}
                for key, queues in self._offsets.items()
            }

    def replace_all(self, snapshot: dict[str, dict[str, int]]) -> None:
        """Take a master's offsets in place of this table's (persisted with the next persist)."""
        offsets = {
            key: {int(queue): int(offset) for queue, offset in queues.items()}
            for key, queues in snapshot.items()
        }
        with self._lock:
            if offsets != self._offsets:
                self._offsets = offsets
                self._dirty = True

    def persist(self, *, force: bool = False) -> bool:
        """Write the table if it changed; returns True if a file was written."""
        with self._lock:
            if not (self._dirty or force):
                return False
            snapshot = {
                key: {str(q): o for q, o in sorted(queues.items())}
                for key, queues in self._offsets.items()
            }
            self._dirty = False
        self._file.write({"offsetTable": snapshot})
        return True


def _parse_offsets(document: dict[str, Any]) -> dict[str, dict[int, int]]:
    offsets: dict[str, dict[int, int]] = {}
    for key, queues in document.get("offsetTable", {}).items():
        if KEY_SEPARATOR not in key:
            raise ValueError(f"offset key {key!r} is not topic{KEY_SEPARATOR}group")
        offsets[key] = {int(queue): int(offset) for queue, offset in queues.items()}
    return offsets
