"""Apache RocketMQ's delayOffset.json gives the delay service its position where it maps.

Without Skiff's own delayState.json, level 1's offset (schedule queue 0, the
queue Skiff schedules in) is where delivery resumes, and a level-1 message
RocketMQ left pending is delivered; messages left at other levels are not, and
a WARNING counts them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from tests.support.store_settings import small_store

from skiff_broker.delivery.delay import DelayService
from skiff_broker.store.config import StoreConfig
from skiff_broker.store.message import Message
from skiff_broker.store.message_store import MessageStore
from skiff_broker.wire import property_names as prop

TOPIC = "orders"
DEADLINE_S = 30.0


def _message(n: int) -> Message:
    return Message(topic=TOPIC, body=f"scheduled {n}".encode(), queue_id=0)


def test_level_one_offset_is_where_delivery_resumes(tmp_path: Path, caplog) -> None:
    config = StoreConfig(data_dir=str(tmp_path / "store"), **small_store())
    state = Path(config.config_dir) / "delayState.json"
    store = MessageStore(config)
    store.start()
    delays = DelayService(store, str(state))
    delays.start()
    # Due a few seconds on: after this run has stopped, before the test waits for them.
    due = int(time.time() * 1000) + 5_000
    for n in range(3):
        assert asyncio.run(delays.schedule(_message(n), due + n)).ok
    delays.stop()
    store.shutdown()

    # As a directory RocketMQ wrote: its own file (bare integer keys), none of Skiff's.
    state.unlink()
    (Path(config.config_dir) / "delayOffset.json").write_text(
        '{\n\t"dataVersion":{"counter":2,"stateVersion":0,"timestamp":1},\n'
        '\t"offsetTable":{1:2,3:5\n\t}\n}'
    )
    store = MessageStore(config)
    store.start()
    delays = DelayService(store, str(state))
    with caplog.at_level(logging.WARNING):
        delays.start()
    try:
        # Level 3's position names no message still in its queue: nothing is reported.
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
        end = time.monotonic() + DEADLINE_S
        while store.max_offset(TOPIC, 0) == 0:
            assert time.monotonic() < end, "the pending scheduled message was never delivered"
            time.sleep(0.05)
        # Offsets 0 and 1 were delivered before (by RocketMQ); only offset 2 was pending,
        # and it was due last, so nothing else can still come.
        delivered = store.get_messages(TOPIC, 0, 0, 10).messages
        assert [m.body for m in delivered] == [b"scheduled 2"]
    finally:
        delays.stop()
        store.shutdown()


def _left_by_rocketmq(level: int, n: int) -> Message:
    """A message as RocketMQ's ScheduleMessageService holds it: its level, not a time."""
    return Message(
        topic=prop.SCHEDULE_TOPIC,
        body=f"level {level} message {n}".encode(),
        queue_id=level - 1,
        properties={
            prop.REAL_TOPIC: TOPIC,
            prop.REAL_QUEUE_ID: "1",
            "DELAY": str(level),
            prop.UNIQ_KEY: f"0A0B0C{level:04X}{n:022X}",
            prop.KEYS: f"order-{n}",
        },
    )


def test_pending_level_one_messages_are_delivered_and_other_levels_reported(
    tmp_path: Path, caplog
) -> None:
    config = StoreConfig(data_dir=str(tmp_path / "store"), **small_store())
    store = MessageStore(config)
    store.start()
    # Level 1: offset 0 delivered by RocketMQ, offset 1 pending. Level 3: two pending.
    for message in (_left_by_rocketmq(1, 0), _left_by_rocketmq(1, 1)):
        assert store.put_messages([message]).ok
    for n in range(2):
        assert store.put_messages([_left_by_rocketmq(3, n)]).ok
    store.wait_dispatched()
    Path(config.config_dir).mkdir(parents=True, exist_ok=True)
    (Path(config.config_dir) / "delayOffset.json").write_text('{"offsetTable":{1:1,3:0}}')
    delays = DelayService(store, str(Path(config.config_dir) / "delayState.json"))
    try:
        with caplog.at_level(logging.WARNING):
            delays.start()
        end = time.monotonic() + DEADLINE_S
        while store.max_offset(TOPIC, 1) == 0:
            assert time.monotonic() < end, "the pending level-1 message was never delivered"
            time.sleep(0.05)
        delivered = store.get_messages(TOPIC, 1, 0, 10).messages
        assert [m.body for m in delivered] == [b"level 1 message 1"]
        assert "DELAY" not in delivered[0].properties
        assert delivered[0].properties[prop.KEYS] == "order-1"
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any(w.startswith("2 messages") and "levels [3]" in w for w in warnings), warnings
    finally:
        delays.stop()
        store.shutdown()
