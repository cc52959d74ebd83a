"""Pop keeps a bounded number of deliveries in flight per group and queue.

A consumer that pops and never acks must not make the broker remember ever more
deliveries: past the bound it gets nothing new from that queue, and acks make
room again. Runs on a real MessageStore.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.store_settings import small_store

from skiff_broker.delivery.pop import PopService
from skiff_broker.delivery.tag_filter import TagFilter
from skiff_broker.metadata.consumer_offsets import ConsumerOffsetTable
from skiff_broker.store.config import StoreConfig
from skiff_broker.store.message import Message
from skiff_broker.store.message_store import MessageStore

TOPIC = "pop-bounds"
GROUP = "hoarders"
BOUND = 5
INVISIBLE_MS = 60_000


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    with MessageStore(StoreConfig(data_dir=str(tmp_path / "store"), **small_store())) as store:
        yield store


def pop_service(store: MessageStore, tmp_path: Path) -> PopService:
    offsets = ConsumerOffsetTable(str(tmp_path / "consumerOffset.json"))
    return PopService(
        store,
        offsets,
        str(tmp_path / "popState.json"),
        max_attempts=3,
        ensure_dlq_topic=lambda name: None,
        max_in_flight=BOUND,
    )


def test_a_group_that_never_acks_gets_nothing_new_past_the_bound(
    store: MessageStore, tmp_path: Path
) -> None:
    for i in range(3 * BOUND):
        assert store.put_message(Message(TOPIC, f"m{i}".encode())).ok
    assert store.wait_dispatched()
    pop = pop_service(store, tmp_path)
    everything = TagFilter(None)

    first = pop.pop(GROUP, TOPIC, [0], 3 * BOUND, INVISIBLE_MS, everything, fifo=False)
    assert [d.offset for d in first] == list(range(BOUND))
    assert pop.pop(GROUP, TOPIC, [0], 3 * BOUND, INVISIBLE_MS, everything, fifo=False) == []

    # Acks make room for exactly as many new deliveries.
    for delivery in first[:2]:
        pop.ack(GROUP, TOPIC, 0, delivery.offset, delivery.retrieve_time)
    more = pop.pop(GROUP, TOPIC, [0], 3 * BOUND, INVISIBLE_MS, everything, fifo=False)
    assert [d.offset for d in more] == [BOUND, BOUND + 1]
    # Another group has its own bound.
    other = pop.pop("others", TOPIC, [0], 3 * BOUND, INVISIBLE_MS, everything, fifo=False)
    assert [d.offset for d in other] == list(range(BOUND))


def test_queue_view_counts_deliveries_and_forget_group_drops_them(
    store: MessageStore, tmp_path: Path
) -> None:
    for i in range(4):
        assert store.put_message(Message(TOPIC, f"m{i}".encode())).ok
    assert store.wait_dispatched()
    pop = pop_service(store, tmp_path)
    everything = TagFilter(None)
    [first, _] = pop.pop(GROUP, TOPIC, [0], 2, INVISIBLE_MS, everything, fifo=False)
    view = pop.queue_view(GROUP, TOPIC, 0)
    assert (view.consumer_offset, view.next_offset, view.in_flight, view.invisible) == (0, 2, 2, 2)
    # Past their invisible time they are still in flight, but due again.
    later = pop.queue_view(GROUP, TOPIC, 0, now_ms=first.retrieve_time + INVISIBLE_MS)
    assert (later.in_flight, later.invisible) == (2, 0)
    pop.ack(GROUP, TOPIC, 0, first.offset, first.retrieve_time)
    assert pop.queue_view(GROUP, TOPIC, 0).consumer_offset == 1

    pop.forget_group(GROUP)
    assert pop.queue_view(GROUP, TOPIC, 0).in_flight == 0
    assert pop.persist()
    assert pop.queue_view(GROUP, TOPIC, 0).consumer_offset == -1
