"""DelayService on a real MessageStore: due-time delivery, restarts and crashes.

A crash is left on disk as SIGKILL leaves it: every write is in the files (the
page cache outlives the process), the ``abort`` file is still there, the
checkpoint names no clean end, and ``config/delayState.json`` is whatever the
last persist wrote before the crash. tests/integration/test_client_delay_transaction.py
kills a real broker process.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.store_settings import small_store
from tests.support.waiting import wait_for

from skiff_broker.delivery.delay import DelayService
from skiff_broker.store.checkpoint import Checkpoint
from skiff_broker.store.config import StoreConfig
from skiff_broker.store.message import Message, StoredMessage
from skiff_broker.store.message_store import MessageStore
from skiff_broker.wire import property_names as prop

TOPIC = "orders"
QUEUE = 2
# Generous: polls end as soon as their condition holds.
DEADLINE_S = 30.0
SMALL_STORE = small_store()


def now_ms() -> int:
    return int(time.time() * 1000)


class Running:
    """A store and a delay service on one data directory, started and stopped together."""

    def __init__(self, data_dir: Path) -> None:
        self.config = StoreConfig(data_dir=str(data_dir), **SMALL_STORE)
        self.state_path = str(data_dir / "config" / "delayState.json")
        self.store = MessageStore(self.config)
        self.store.start()
        self.delays = DelayService(self.store, self.state_path)
        self.delays.start()

    def schedule(self, message: Message, deliver_at: int) -> int:
        result = asyncio.run(self.delays.schedule(message, deliver_at))
        assert result.ok, result.reason
        assert result.append is not None
        return result.append.queue_offsets[0]

    def delivered(self) -> list[StoredMessage]:
        self.store.wait_dispatched()
        return self.store.get_messages(TOPIC, QUEUE, 0, 100).messages

    def stop(self) -> None:
        self.delays.stop()
        self.store.shutdown()

    def crash_to(self, state_snapshot: bytes | None) -> None:
        """Stop and leave the directory as a crash right after ``state_snapshot`` was saved."""
        self.delays.stop()
        self.store.shutdown()
        if state_snapshot is None:
            Path(self.state_path).unlink(missing_ok=True)
        else:
            Path(self.state_path).write_bytes(state_snapshot)
        Path(self.config.abort_path).touch()
        checkpoint = Checkpoint.load(self.config.checkpoint_path)
        checkpoint.clean_shutdown_offset = -1
        checkpoint.flush()


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "store"
    shutil.rmtree(tmp_path / "store", ignore_errors=True)


def make_message(n: int) -> Message:
    return Message(
        topic=TOPIC,
        body=f"payload {n} \x00\xff".encode(),
        queue_id=QUEUE,
        properties={
            prop.UNIQ_KEY: f"01ABCDEF{n:026X}",
            prop.TAGS: f"tag{n}",
            prop.KEYS: f"order-{n} customer-{n}",
            "color": "blue",
        },
        flag=7,
        born_timestamp=1_700_000_000_000 + n,
        born_host="10.1.2.3:4567",
    )


def test_message_is_invisible_until_due_then_delivered_unchanged(data_dir):
    running = Running(data_dir)
    original = make_message(1)
    deliver_at = now_ms() + 1500
    running.schedule(original, deliver_at)

    assert running.delivered() == [], "a scheduled message must not be visible before it is due"
    wait_for(lambda: running.delivered(), "the scheduled message")
    [got] = running.delivered()
    running.stop()

    assert got.store_timestamp >= deliver_at
    assert got.body == original.body
    assert got.queue_id == QUEUE
    assert got.properties == {**original.properties, prop.DELIVER_AT_MS: str(deliver_at)}
    assert got.flag == original.flag
    assert got.born_timestamp == original.born_timestamp
    assert got.born_host == original.born_host


def test_messages_are_delivered_in_due_order_not_schedule_order(data_dir):
    running = Running(data_dir)
    base = now_ms() + 1000
    for n, delay in ((1, 600), (2, 0), (3, 300)):
        running.schedule(make_message(n), base + delay)

    wait_for(lambda: len(running.delivered()) == 3, "three scheduled messages")
    order = [m.properties[prop.TAGS] for m in running.delivered()]
    running.stop()

    assert order == ["tag2", "tag3", "tag1"]


def test_an_earlier_message_is_not_held_behind_a_later_one(data_dir):
    running = Running(data_dir)
    running.schedule(make_message(1), now_ms() + 3_600_000)
    running.schedule(make_message(2), now_ms() + 200)

    wait_for(lambda: running.delivered(), "the earlier message")
    tags = [m.properties[prop.TAGS] for m in running.delivered()]
    assert running.delays.pending_count == 1
    running.stop()

    assert tags == ["tag2"]


def test_clean_restart_delivers_what_is_pending_and_repeats_nothing(data_dir):
    running = Running(data_dir)
    running.schedule(make_message(1), now_ms() + 100)
    wait_for(lambda: running.delivered(), "the first message")
    # Due while the broker is down, and due well after it is back.
    overdue_at = now_ms() + 300
    running.schedule(make_message(2), overdue_at)
    running.schedule(make_message(3), now_ms() + 2500)
    running.stop()
    wait_for(lambda: now_ms() > overdue_at, "the second message's due time")

    running = Running(data_dir)
    wait_for(lambda: len(running.delivered()) >= 3, "the pending messages")
    running.stop()
    running = Running(data_dir)
    assert running.delays.pending_count == 0
    tags = [m.properties[prop.TAGS] for m in running.delivered()]
    running.stop()

    assert tags == ["tag1", "tag2", "tag3"]


def test_crash_before_delivery_loses_nothing(data_dir):
    running = Running(data_dir)
    deliver_at = now_ms() + 1500
    running.schedule(make_message(1), deliver_at)
    # The crash comes before the state file was ever written.
    running.crash_to(None)

    running = Running(data_dir)
    assert not running.store.clean_start
    assert running.delivered() == []
    wait_for(lambda: running.delivered(), "the scheduled message after the crash")
    [got] = running.delivered()
    running.stop()

    assert got.properties[prop.TAGS] == "tag1"
    assert got.store_timestamp >= deliver_at


def test_crash_after_delivery_but_before_saving_does_not_deliver_again(data_dir):
    running = Running(data_dir)
    running.schedule(make_message(1), now_ms() + 100)
    running.schedule(make_message(2), now_ms() + 3_600_000)
    running.delays.persist()
    saved_before_delivery = Path(running.state_path).read_bytes()
    wait_for(lambda: running.delivered(), "the first message")
    running.crash_to(saved_before_delivery)

    running = Running(data_dir)
    # The first one is found in its topic's index; the second is still to come.
    assert running.delays.pending_count == 1
    running.stop()
    running = Running(data_dir)
    tags = [m.properties[prop.TAGS] for m in running.delivered()]
    running.stop()

    assert tags == ["tag1"]


def test_state_file_keeps_only_a_watermark_once_everything_is_delivered(data_dir):
    running = Running(data_dir)
    for n in range(5):
        running.schedule(make_message(n), now_ms() + 50 * n)
    wait_for(lambda: len(running.delivered()) == 5, "five messages")
    running.stop()

    state = json.loads(Path(running.state_path).read_text())
    assert state["watermark"] == 5
    assert state["delivered"] == []


def test_an_unusable_entry_in_the_schedule_topic_does_not_block_the_rest(data_dir):
    running = Running(data_dir)
    # Not written by the delay service: no real topic, no delivery time.
    stray = running.store.put_message(Message(prop.SCHEDULE_TOPIC, b"stray", queue_id=0))
    assert stray.ok
    running.schedule(make_message(1), now_ms() + 2000)
    running.stop()

    running = Running(data_dir)
    assert running.delays.pending_count == 1
    wait_for(lambda: running.delivered(), "the scheduled message")
    running.stop()

    state = json.loads(Path(running.state_path).read_text())
    assert state["watermark"] == 2


def test_a_delivery_that_raises_is_logged_and_tried_again(data_dir, monkeypatch, caplog):
    running = Running(data_dir)
    real_put = running.store.put_messages
    raised: list[int] = []

    def put_failing_once(messages: list[Message]):
        # Stands in for an unexpected error inside the store (none can be caused on demand).
        if not raised:
            raised.append(len(messages))
            raise RuntimeError("store broke")
        return real_put(messages)

    monkeypatch.setattr(running.store, "put_messages", put_failing_once)
    running.schedule(make_message(1), now_ms())

    wait_for(lambda: running.delivered(), "the retried delivery")
    delivered = [m.properties[prop.TAGS] for m in running.delivered()]
    running.stop()

    assert raised == [1]
    assert delivered == ["tag1"]
    assert "delay-delivery step failed; trying again" in caplog.text
