"""An ack or change of invisible time after the delivery's invisible time is refused.

As in RocketMQ, a receipt handle is dead once its retrieve time plus invisible time is
not after now, even while no one has received the message again; the refused delivery
stays in flight and is handed out again. Runs on a real MessageStore, with a clock the
test moves.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.store_settings import small_store

from skiff_broker.delivery.pop import PopService, ReceiptExpired
from skiff_broker.delivery.tag_filter import TagFilter
from skiff_broker.metadata.consumer_offsets import ConsumerOffsetTable
from skiff_broker.store.config import StoreConfig
from skiff_broker.store.message import Message
from skiff_broker.store.message_store import MessageStore

TOPIC = "expiring"
GROUP = "latecomers"
INVISIBLE_MS = 10_000
EVERYTHING = TagFilter(None)


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    with MessageStore(StoreConfig(data_dir=str(tmp_path / "store"), **small_store())) as store:
        assert store.put_message(Message(TOPIC, b"late")).ok
        assert store.wait_dispatched()
        yield store


def pop_service(store: MessageStore, tmp_path: Path, clock: Clock) -> PopService:
    return PopService(
        store,
        ConsumerOffsetTable(str(tmp_path / "consumerOffset.json")),
        str(tmp_path / "popState.json"),
        max_attempts=5,
        ensure_dlq_topic=lambda name: None,
        clock=clock,
    )


def test_an_ack_one_millisecond_before_the_end_holds(store: MessageStore, tmp_path: Path) -> None:
    clock = Clock()
    pop = pop_service(store, tmp_path, clock)
    [delivery] = pop.pop(GROUP, TOPIC, [0], 1, INVISIBLE_MS, EVERYTHING, fifo=False)
    clock.now += INVISIBLE_MS - 1
    pop.ack(GROUP, TOPIC, 0, delivery.offset, delivery.retrieve_time)
    clock.now += INVISIBLE_MS
    assert pop.pop(GROUP, TOPIC, [0], 1, INVISIBLE_MS, EVERYTHING, fifo=False) == []


@pytest.mark.parametrize("late_ms", [0, 1_000])
def test_an_ack_when_the_invisible_time_ran_out_is_refused_and_the_message_comes_again(
    store: MessageStore, tmp_path: Path, late_ms: int
) -> None:
    clock = Clock()
    pop = pop_service(store, tmp_path, clock)
    [delivery] = pop.pop(GROUP, TOPIC, [0], 1, INVISIBLE_MS, EVERYTHING, fifo=False)
    clock.now += INVISIBLE_MS + late_ms
    with pytest.raises(ReceiptExpired, match="delivered again"):
        pop.ack(GROUP, TOPIC, 0, delivery.offset, delivery.retrieve_time)
    [again] = pop.pop(GROUP, TOPIC, [0], 1, INVISIBLE_MS, EVERYTHING, fifo=False)
    assert (again.offset, again.attempt) == (delivery.offset, 2)


def test_a_change_of_invisible_time_after_it_ran_out_is_refused(
    store: MessageStore, tmp_path: Path
) -> None:
    clock = Clock()
    pop = pop_service(store, tmp_path, clock)
    [delivery] = pop.pop(GROUP, TOPIC, [0], 1, INVISIBLE_MS, EVERYTHING, fifo=False)
    clock.now += INVISIBLE_MS
    with pytest.raises(ReceiptExpired, match="delivered again"):
        pop.change_invisible_time(GROUP, TOPIC, 0, delivery.offset, delivery.retrieve_time, 60_000)
    # The refused change did not hide it: it is due now.
    [again] = pop.pop(GROUP, TOPIC, [0], 1, INVISIBLE_MS, EVERYTHING, fifo=False)
    assert (again.offset, again.attempt) == (delivery.offset, 2)
