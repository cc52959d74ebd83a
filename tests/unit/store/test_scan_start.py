"""The checkpoint's scan start keeps up with the log while the store runs.

A real store with its background services: the logics flusher writes the checkpoint
every second. A queue written once (far below the consume-queue flush threshold)
must not hold the scan start at its one unflushed unit until the next thorough
flush; once the log is well past it, the queue is flushed and the start moves on.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.store_settings import small_store
from tests.support.waiting import wait_for

from skiff_broker.store.checkpoint import Checkpoint
from skiff_broker.store.config import StoreConfig
from skiff_broker.store.message import Message
from skiff_broker.store.message_store import MessageStore
from skiff_broker.store.scan_start import MAX_SCAN_LAG_BYTES

TOPIC = "scan-start"


def test_a_queue_written_once_does_not_hold_the_scan_start_back(tmp_path: Path):
    config = StoreConfig(
        data_dir=str(tmp_path),
        **small_store(
            commit_log_file_size=4 * 1024 * 1024,
            consume_queue_units_per_file=300_000,
            # No thorough consume-queue flush during the test: only the lag rule can
            # flush a queue that holds one unit.
            flush_consume_queue_thorough_interval=3600.0,
        ),
    )
    store = MessageStore(config)
    store.start()
    try:
        lonely = store.put_message(Message(TOPIC, b"once", queue_id=1))
        assert lonely.ok and lonely.append is not None
        lonely_at = lonely.append.physical_offsets[0]
        batch = [Message(TOPIC, b"x" * 900, queue_id=0) for _ in range(256)]
        while store.commit_log.max_offset < lonely_at + MAX_SCAN_LAG_BYTES + 4 * 1024 * 1024:
            assert store.put_messages(batch).ok
        store.request_flush()
        wait_for(
            lambda: Checkpoint.load(config.checkpoint_path).scan_start > lonely_at,
            "the checkpoint's scan start to pass the queue written once",
        )
        scan_start = Checkpoint.load(config.checkpoint_path).scan_start
        assert scan_start < store.commit_log.max_offset
        # A record starts there: its own PHYSICALOFFSET names it.
        assert store.commit_log.read(scan_start, 36)[28:36] == scan_start.to_bytes(8, "big")
    finally:
        store.shutdown()
