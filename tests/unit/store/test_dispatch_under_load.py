"""Appends from several threads at once are each made readable once, in order.

The dispatcher takes every handed batch that is readable in one pass, and parses the log
where batches were not handed; appends from several threads across segment rolls give it
both, in whatever interleaving the threads make.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from skiff_broker.store.config import StoreConfig
from skiff_broker.store.message import Message
from skiff_broker.store.message_store import MessageStore

WRITERS = 4
BATCHES = 60  # per writer
PER_BATCH = 5


def _append_from_threads(store: MessageStore) -> None:
    def writer(w: int) -> None:
        for b in range(BATCHES):
            batch = [
                Message("T", f"{w}/{b}/{i}".encode() * 20, w, properties={"KEYS": f"k{w}-{b}"})
                for i in range(PER_BATCH)
            ]
            assert store.put_messages(batch).ok

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_batches_appended_at_once_are_each_readable_once_in_order(
    store_config: Callable[..., StoreConfig],
) -> None:
    store = MessageStore(store_config())
    store.start()
    try:
        arrivals: list[set[tuple[str, int]]] = []
        store.add_arrival_listener(arrivals.append)
        _append_from_threads(store)
        assert store.wait_dispatched(timeout=30)
        for w in range(WRITERS):
            got = store.get_messages("T", w, 0, 10_000, max_bytes=1 << 30)
            expected = [
                f"{w}/{b}/{i}".encode() * 20 for b in range(BATCHES) for i in range(PER_BATCH)
            ]
            assert [m.body for m in got.messages] == expected
            assert [m.queue_offset for m in got.messages] == list(range(len(expected)))
            assert store.max_offset("T", w) == len(expected)
        # Every queue was announced to the listeners.
        assert set().union(*arrivals) == {("T", w) for w in range(WRITERS)}
        # The index took every batch's key.
        assert len(store.query_by_key("T", f"k{WRITERS - 1}-{BATCHES - 1}")) == PER_BATCH
    finally:
        store.shutdown()


class _HeldListener:
    """An arrival listener that holds the dispatcher in each call until the test lets go."""

    def __init__(self) -> None:
        self.entered = threading.Semaphore(0)
        self.go = threading.Semaphore(0)
        self.holding = True

    def __call__(self, touched: set[tuple[str, int]]) -> None:
        if self.holding:
            self.entered.release()
            assert self.go.acquire(timeout=60)

    def wait_held(self) -> None:
        assert self.entered.acquire(timeout=60), "the dispatcher never called the listener"


def test_a_dispatcher_far_behind_skips_no_record_when_the_log_rolls(
    store_config: Callable[..., StoreConfig],
) -> None:
    """More appends than the dispatcher keeps in hand pile up while it is held up; the
    append after them rolls the log. Every message still reaches its queue and the index."""
    segment = 64 * 1024
    store = MessageStore(store_config(commit_log_file_size=segment))
    store.start()
    held = _HeldListener()
    store.add_arrival_listener(held)
    keys: list[tuple[int, str]] = []

    def put(queue_id: int, body: bytes) -> int:
        key = f"m{len(keys)}"
        result = store.put_messages([Message("T", body, queue_id, properties={"KEYS": key})])
        assert result.ok and result.append is not None
        keys.append((result.append.physical_offsets[0], key))
        return result.append.physical_offsets[0] + result.append.sizes[0]

    try:
        put(0, b"first")
        held.wait_held()
        # More single appends than the dispatcher keeps, ending well into a segment.
        end = 0
        for i in range(5000):
            end = put(i % 2, b"x" * 40)
        while end % segment < 16 * 1024:
            end = put(1, b"y" * 40)
        held.go.release()
        # The dispatcher has taken every append it kept and is in the listener again;
        # the ones it did not keep are still ahead of it.
        held.wait_held()
        for _ in range(4):
            put(0, b"z" * 15_000)
        assert any(o % segment == 0 for o, _ in keys[-4:]), "the large appends did not roll"
        held.holding = False
        held.go.release()
        assert store.wait_dispatched(timeout=30)

        for queue_id in (0, 1):
            got = store.get_messages("T", queue_id, 0, 10_000, max_bytes=1 << 30)
            assert [m.queue_offset for m in got.messages] == list(range(len(got.messages)))
            assert len(got.messages) == store.max_offset("T", queue_id)
        assert store.max_offset("T", 0) + store.max_offset("T", 1) == len(keys)
        unfound = [
            key
            for offset, key in keys
            if offset not in [m.physical_offset for m in store.query_by_key("T", key)]
        ]
        assert unfound == []
    finally:
        held.holding = False
        held.go.release()
        store.shutdown()
