"""A real broker started with SKIFF_SEND_TIMELINE writes one record of stage stamps per
SendMessage call it answered, each stage at or after the one before, and the CPU of its
store append (bench/send_timeline.py
reads them)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.support.broker_process import create_topics, data_dir_of, running_broker
from tests.support.span_files import send_traced

from skiff_broker import send_timeline
from skiff_broker.metadata.topic_table import TopicConfig

TOPIC = "TimelineTopic"
# Whole batches: a batch not yet full when the broker stops is not written.
SENDS = 3 * send_timeline.BATCH


def test_each_answered_send_leaves_one_ordered_record(tmp_path: Path) -> None:
    create_topics(data_dir_of(tmp_path), TopicConfig(TOPIC, 4, 4))
    timeline = tmp_path / "timeline.bin"
    with running_broker(tmp_path, env={send_timeline.ENV: str(timeline)}) as broker:
        # Concurrent clients: calls share loop turns, so some are coalesced into one append.
        asyncio.run(send_traced(broker.endpoint, TOPIC, SENDS, sampled=None, concurrency=8))
    records = send_timeline.read(str(timeline))
    assert len(records) == SENDS
    stages = len(send_timeline.STAGES)
    for record in records:
        assert all(stamp > 0 for stamp in record), record
        assert list(record[:stages]) == sorted(record[:stages]), record
        # The append's CPU on the loop's thread: no more than its wall time.
        cpu = record[send_timeline.APPEND_CPU_END] - record[send_timeline.APPEND_CPU_BEGIN]
        assert 0 <= cpu <= record[send_timeline.STORED] - record[send_timeline.APPENDING]
