"""SQL92 reads of a real store: records passed over from their properties alone.

``get_messages`` with an SQL92 subscription's ``properties_check`` looks at each record's
raw PROPERTIES field first; what it serves must be exactly what the full decode of every
record would serve, and every message it serves is still checked whole.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import pytest

from skiff_broker.filter.subscription import sql92_filter
from skiff_broker.store.config import FlushType, StoreConfig
from skiff_broker.store.message import Message
from skiff_broker.store.message_store import MessageStore

EXPRESSIONS = (
    "a = 0",
    "a > 5 AND b = 'x'",
    "b IS NULL",
    "a BETWEEN 2 AND 4 OR TAGS = 'Tag1'",
    "c = 7",  # c reads as text in some messages: a type mismatch there
    "NOT (a IN ('1', '2'))",
    "TRUE",
)


@pytest.fixture
def store(store_config: Callable[..., StoreConfig]) -> Iterator[MessageStore]:
    config = store_config(flush_type=FlushType.SYNC_FLUSH, clean_resource_interval=3600)
    with MessageStore(config) as s:
        yield s


def message(i: int) -> Message:
    properties = {"UNIQ_KEY": f"ID{i:05d}", "TAGS": f"Tag{i % 3}", "a": str(i % 10)}
    if i % 4:
        properties["b"] = "x" if i % 2 else "y"
    properties["c"] = "7" if i % 5 == 0 else "seven"
    # Names that contain or end with a read name must not be taken for it.
    properties["ba"] = "0"
    properties["aa"] = "x"
    # IPv6 hosts make a longer header: the properties start elsewhere.
    host = "[::1]:10911" if i % 3 == 0 else "10.0.0.7:0"
    return Message("T", b"body %d " % i * 8, 0, properties=properties, born_host=host)


def offsets(store: MessageStore, expression: str, *, with_check: bool) -> list[int]:
    subscription = sql92_filter(expression)
    check = subscription.properties_check if with_check else None
    served, offset = [], 0
    while True:
        got = store.get_messages(
            "T", 0, offset, 8, properties_check=check, accept=subscription.accept
        )
        served += [m.queue_offset for m in got.messages]
        if got.next_offset == offset:  # the queue's end
            return served
        offset = got.next_offset


def test_a_read_with_the_properties_check_serves_what_the_full_decode_serves(store):
    result = store.put_messages([message(i) for i in range(60)])
    assert result.ok, result.reason
    assert store.wait_dispatched()
    for expression in EXPRESSIONS:
        expected = offsets(store, expression, with_check=False)
        assert expected, expression  # each expression matches something
        assert offsets(store, expression, with_check=True) == expected, expression
    assert offsets(store, "a = 0", with_check=True) == [0, 10, 20, 30, 40, 50]


def test_a_matching_record_damaged_on_disk_is_still_not_served(store, caplog):
    result = store.put_messages([message(i) for i in range(20)])
    assert result.ok and result.append is not None
    assert store.wait_dispatched()
    physical = result.append.physical_offsets
    segment = store.commit_log.queue.files[0].mapping
    # A body byte of record 10 (a = 0) flipped: its properties still say it matches.
    segment[physical[10] + 100] ^= 0xFF
    with caplog.at_level(logging.ERROR):
        assert offsets(store, "a = 0", with_check=True) == [0]
    assert any("skipping corrupt record" in r.getMessage() for r in caplog.records)


def test_a_unit_that_points_at_another_record_is_mended_not_trusted(store):
    result = store.put_messages([message(i) for i in range(20)])
    assert result.ok and result.append is not None
    assert store.wait_dispatched()
    cq = store.consume_queues.get("T", 0)
    assert cq is not None
    # Unit 10 (a = 0) made to point at record 11 (a = 1): the check must not pass record
    # 10 over because record 11 does not match.
    units = cq.read_units(11, 1)
    cq.rewrite_unit(10, *units[0])
    assert offsets(store, "a = 0", with_check=True) == [0, 10]
