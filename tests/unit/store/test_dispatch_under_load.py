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
