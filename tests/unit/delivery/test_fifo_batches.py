"""FIFO batches: the attempts of a partly acknowledged batch survive a restart, and a
message that used up its attempts goes to the dead-letter topic instead of coming again.

Runs on a real MessageStore, with a clock the test moves.
"""

from __future__ import annotations

import asyncio
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
from skiff_broker.wire import property_names as prop

TOPIC = "ordered"
GROUP = "in-order"
INVISIBLE_MS = 10_000
MAX_ATTEMPTS = 2
EVERYTHING = TagFilter(None)


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    with MessageStore(StoreConfig(data_dir=str(tmp_path / "store"), **small_store())) as store:
        for i in range(3):
            assert store.put_message(Message(TOPIC, f"m{i}".encode())).ok
        assert store.wait_dispatched()
        yield store


def pop_service(store: MessageStore, tmp_path: Path, clock: Clock) -> PopService:
    return PopService(
        store,
        ConsumerOffsetTable(str(tmp_path / "consumerOffset.json")),
        str(tmp_path / "popState.json"),
        max_attempts=MAX_ATTEMPTS,
        ensure_dlq_topic=lambda name: None,
        clock=clock,
    )


def pop(service: PopService, count: int) -> list[tuple[bytes, int]]:
    deliveries = service.pop(GROUP, TOPIC, [0], count, INVISIBLE_MS, EVERYTHING, fifo=True)
    return [(d.message.body, d.attempt) for d in deliveries]


def test_a_restart_keeps_counting_the_attempts_of_the_last_batch(
    store: MessageStore, tmp_path: Path
) -> None:
    clock = Clock()
    before = pop_service(store, tmp_path, clock)
    first = before.pop(GROUP, TOPIC, [0], 3, INVISIBLE_MS, EVERYTHING, fifo=True)
    before.ack(GROUP, TOPIC, 0, first[1].offset, first[1].retrieve_time)
    assert before.persist()
    after = pop_service(store, tmp_path, clock)
    after.load()
    clock.now += INVISIBLE_MS
    assert pop(after, 3) == [(b"m0", 2), (b"m1", 2), (b"m2", 2)]


def test_a_message_out_of_attempts_goes_to_the_dead_letter_topic_and_the_rest_comes(
    store: MessageStore, tmp_path: Path
) -> None:
    clock = Clock()
    service = pop_service(store, tmp_path, clock)
    assert pop(service, 1) == [(b"m0", 1)]
    clock.now += INVISIBLE_MS
    assert pop(service, 1) == [(b"m0", 2)]
    clock.now += INVISIBLE_MS
    # m0 used its two attempts: it is moved aside, and the queue reads on behind it.
    assert pop(service, 2) == [(b"m1", 1)]
    asyncio.run(service.move_due_dead_letters())
    assert store.wait_dispatched()
    dead = store.get_messages(prop.dlq_topic(GROUP), 0, 0, 10).messages
    assert [m.body for m in dead] == [b"m0"]
    assert dead[0].reconsume_times == MAX_ATTEMPTS
