"""Reads check each consume-queue unit against its record and mend the ones that fail."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import pytest

from skiff_broker.client.records import decode_records
from skiff_broker.store.config import FlushType, StoreConfig
from skiff_broker.store.consume_queue import BLANK_UNIT_SIZE
from skiff_broker.store.message import Message
from skiff_broker.store.message_store import MessageStore
from skiff_broker.store.results import GetStatus


@pytest.fixture
def store(store_config: Callable[..., StoreConfig]) -> Iterator[MessageStore]:
    config = store_config(flush_type=FlushType.SYNC_FLUSH, clean_resource_interval=3600)
    with MessageStore(config) as s:
        for queue_id in (0, 1):
            result = s.put_messages(
                [Message("T", b"q%d body %03d" % (queue_id, i), queue_id) for i in range(40)]
            )
            assert result.ok
        assert s.wait_dispatched()
        yield s


def set_physical(store: MessageStore, queue_id: int, queue_offset: int, physical: int) -> None:
    cq = store.consume_queues.get("T", queue_id)
    assert cq is not None
    _, size, tag_code = cq.raw_unit(queue_offset)
    cq.rewrite_unit(queue_offset, physical, size, tag_code)


def unit_of(store: MessageStore, queue_id: int, queue_offset: int) -> tuple[int, int, int]:
    cq = store.consume_queues.get("T", queue_id)
    assert cq is not None
    return cq.raw_unit(queue_offset)


@pytest.mark.parametrize("read", ["get_messages", "get_records"])
@pytest.mark.parametrize("damage", ["flipped", "another record of the queue", "past the end"])
def test_a_bad_unit_is_rebuilt_and_every_message_reads_back(
    store: MessageStore, caplog: pytest.LogCaptureFixture, read: str, damage: str
) -> None:
    good = unit_of(store, 0, 7)
    physical = {
        "flipped": ~good[0],
        "another record of the queue": unit_of(store, 0, 8)[0],
        "past the end": store.commit_log.max_offset + 4096,
    }[damage]
    set_physical(store, 0, 7, physical)
    with caplog.at_level(logging.WARNING):
        if read == "get_messages":
            got = store.get_messages("T", 0, 0, 100)
            bodies = [m.body for m in got.messages]
        else:
            got = store.get_records("T", 0, 0, 100)
            bodies = [m.body for m in decode_records(got.data)]
        again = store.get_messages("T", 0, 0, 100)
    assert got.status is GetStatus.FOUND
    assert bodies == [b"q0 body %03d" % i for i in range(40)]
    assert [m.body for m in again.messages] == bodies
    assert unit_of(store, 0, 7) == good, "the unit was rebuilt from the log"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "T/0" in warnings[0] and "unit 7" in warnings[0], warnings
    assert not any("retention" in r.getMessage() for r in caplog.records)
    history = store.damage_history()
    assert [(e["topic"], e["queue_id"]) for e in history if e.get("found_by") == "read"] == [
        ("T", 0)
    ]


def test_a_unit_whose_record_is_nowhere_is_stepped_over(store: MessageStore) -> None:
    # The record of unit 7 no longer says it is queue 0's offset 7: nothing to rebuild from.
    cq = store.consume_queues.get("T", 0)
    assert cq is not None
    segment = store.commit_log.queue.files[0].mapping
    at = unit_of(store, 0, 7)[0]
    segment[at + 20 : at + 28] = (999).to_bytes(8, "big")  # QUEUEOFFSET
    set_physical(store, 0, 7, -5)
    got = store.get_records("T", 0, 0, 100)
    assert got.status is GetStatus.FOUND
    assert [m.queue_offset for m in decode_records(got.data)] == [*range(7), *range(8, 40)]
    assert unit_of(store, 0, 7)[1] == BLANK_UNIT_SIZE
    again = store.get_messages("T", 0, 0, 100)
    assert [m.queue_offset for m in again.messages] == [*range(7), *range(8, 40)]


def test_a_unit_pointing_into_retention_is_not_called_deleted(store: MessageStore) -> None:
    # A small offset, below its neighbours' records: a damaged unit, not a deleted record.
    set_physical(store, 1, 0, 0)  # queue 1's first unit now points at queue 0's record
    got = store.get_messages("T", 1, 0, 100)
    assert got.status is GetStatus.FOUND
    assert [m.body for m in got.messages] == [b"q1 body %03d" % i for i in range(40)]
