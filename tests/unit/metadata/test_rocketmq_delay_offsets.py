"""Apache RocketMQ's delayOffset.json gives the delay service its position where it maps.

Without Skiff's own delayState.json, level 1's offset (schedule queue 0, the
queue Skiff schedules in) is where delivery resumes; positions of other levels
cannot be used and a WARNING says so.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from tests.store_settings import small_store

from skiff_broker.delivery.delay import DelayService
from skiff_broker.store.config import StoreConfig
from skiff_broker.store.message import Message
from skiff_broker.store.message_store import MessageStore

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
        delays.load()
    delays.start()
    try:
        assert any("delay levels [3]" in r.getMessage() for r in caplog.records)
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
