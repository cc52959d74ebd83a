"""Each group's own number of attempts (its retryMaxTimes + 1) before a dead letter.

Runs on a real MessageStore with a clock the test moves: a group allowed one attempt
gets the message once and then finds it in its DLQ; another group, on the same topic,
keeps the broker's attempts.
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
from skiff_broker.store.results import GetStatus

TOPIC = "payroll"
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
        assert store.put_message(Message(TOPIC, b"salary")).ok
        assert store.wait_dispatched()
        yield store


def test_a_group_with_one_attempt_gets_a_failed_message_once_then_in_its_dlq(
    store: MessageStore, tmp_path: Path
) -> None:
    clock = Clock()
    pop = PopService(
        store,
        ConsumerOffsetTable(str(tmp_path / "consumerOffset.json")),
        str(tmp_path / "popState.json"),
        max_attempts=5,
        ensure_dlq_topic=lambda name: None,
        attempts_of=lambda group: 1 if group == "impatient" else 5,
        clock=clock,
    )
    for group in ("impatient", "patient"):
        [first] = pop.pop(group, TOPIC, [0], 1, INVISIBLE_MS, EVERYTHING, fifo=False)
        assert first.attempt == 1
    clock.now += INVISIBLE_MS
    assert pop.pop("impatient", TOPIC, [0], 1, INVISIBLE_MS, EVERYTHING, fifo=False) == []
    [again] = pop.pop("patient", TOPIC, [0], 1, INVISIBLE_MS, EVERYTHING, fifo=False)
    assert again.attempt == 2

    asyncio.run(pop.move_due_dead_letters())
    assert store.wait_dispatched()
    dead = store.get_messages("%DLQ%impatient", 0, 0, 8)
    assert dead.status is GetStatus.FOUND
    assert [m.body for m in dead.messages] == [b"salary"]
