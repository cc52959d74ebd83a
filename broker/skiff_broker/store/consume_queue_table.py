"""Every consume queue of the store, by topic and queue id."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator

from .consume_queue import UNIT_SIZE, ConsumeQueue
from .mapped_file import is_reserved, reserve_file, segment_name


class ConsumeQueueTable:
    def __init__(self, root_dir: str, units_per_file: int) -> None:
        self.root_dir = root_dir
        self.units_per_file = units_per_file
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._lock = threading.Lock()
        # Queues with files reserved but not yet created: the byte end reserved.
        self._reserved_ends: dict[tuple[str, int], int] = {}

    def load(self) -> None:
        os.makedirs(self.root_dir, exist_ok=True)
        for topic in sorted(os.listdir(self.root_dir)):
            topic_dir = os.path.join(self.root_dir, topic)
            if not os.path.isdir(topic_dir):
                continue
            for queue_dir in sorted(os.listdir(topic_dir)):
                if queue_dir.isdigit():
                    cq = ConsumeQueue(topic, int(queue_dir), self.root_dir, self.units_per_file)
                    cq.load()
                    self._queues[(topic, int(queue_dir))] = cq

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._queues.get((topic, queue_id))

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self._queues.get((topic, queue_id))
        if cq is None:
            with self._lock:
                cq = self._queues.get((topic, queue_id))
                if cq is None:
                    cq = ConsumeQueue(topic, queue_id, self.root_dir, self.units_per_file)
                    reserved_end = self._reserved_ends.pop((topic, queue_id), None)
                    if reserved_end is not None:
                        cq.reserved(reserved_end)
                    self._queues = {**self._queues, (topic, queue_id): cq}
        return cq

    def reserve_through(
        self, topic: str, queue_id: int, first_offset: int, last_offset: int
    ) -> None:
        """Make sure the files for units ``first_offset..last_offset`` of a queue have blocks.

        A queue that does not exist yet stays absent (readers see no such queue
        until its first unit is written); the queue created later knows what was
        reserved for it. Raises DiskFullError when there is no room.
        """
        cq = self._queues.get((topic, queue_id))
        if cq is None:
            with self._lock:
                cq = self._queues.get((topic, queue_id))
                if cq is None:
                    self._reserve_for_absent(topic, queue_id, first_offset, last_offset)
                    return
        cq.reserve_through(first_offset, last_offset)

    def _reserve_for_absent(
        self, topic: str, queue_id: int, first_offset: int, last_offset: int
    ) -> None:
        key = (topic, queue_id)
        end = (last_offset + 1) * UNIT_SIZE
        reserved_end = self._reserved_ends.get(key, -1)
        if end <= reserved_end:
            return
        file_size = self.units_per_file * UNIT_SIZE
        start = reserved_end if reserved_end >= 0 else first_offset * UNIT_SIZE
        start -= start % file_size
        directory = os.path.join(self.root_dir, topic, str(queue_id))
        os.makedirs(directory, exist_ok=True)
        for file_start in range(start, end, file_size):
            path = os.path.join(directory, segment_name(file_start))
            if not os.path.exists(path) and not is_reserved(path, file_size):
                reserve_file(path, file_size, f"consume-queue file for {topic}/{queue_id}")
            self._reserved_ends[key] = file_start + file_size

    def __iter__(self) -> Iterator[ConsumeQueue]:
        return iter(list(self._queues.values()))

    def queues_of(self, topic: str) -> list[ConsumeQueue]:
        return [cq for (t, _), cq in self._queues.items() if t == topic]

    def next_offsets(self) -> dict[tuple[str, int], int]:
        """The next queue offset of every queue: the commit log's queue-offset table."""
        return {key: cq.max_offset for key, cq in self._queues.items() if cq.max_offset > 0}

    def delete_topic(self, topic: str) -> None:
        with self._lock:
            doomed = [key for key in self._queues if key[0] == topic]
            queues = dict(self._queues)
            for key in doomed:
                queues.pop(key).queue.destroy()
            self._queues = queues
            for key in [key for key in self._reserved_ends if key[0] == topic]:
                del self._reserved_ends[key]
        shutil.rmtree(os.path.join(self.root_dir, topic), ignore_errors=True)

    def close(self) -> None:
        for cq in self:
            cq.close()
