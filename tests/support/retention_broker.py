"""A broker that deletes old commit-log segments as soon as it can, for data-loss tests.

Segments are 64 KiB and expire at once, and every hour is a delete hour, so the
retention service (every 10 s) deletes each segment the writer has left behind,
as it would delete 72-hour-old ones at 04:00 on a production broker.
"""

from __future__ import annotations

import time

from skiff_broker.client.pull_consumer import PullConsumer

RETENTION_ARGS = (
    "--commit-log-file-size",
    "64k",
    "--max-message-size",
    "16k",
    "--file-reserved-hours",
    "0",
    "--delete-when",
    ";".join(f"{hour:02d}" for hour in range(24)),
)
# Retention runs every 10 s; give it a few rounds on a busy machine.
RETENTION_DEADLINE_S = 60.0


def wait_for_deletion(endpoint: str, topic: str, queue_id: int, past: int) -> int:
    """Wait until the queue's oldest stored offset is above ``past``; returns it."""
    end = time.monotonic() + RETENTION_DEADLINE_S
    with PullConsumer(endpoint) as consumer:
        while time.monotonic() < end:
            oldest = consumer.min_offset(topic, queue_id)
            if oldest > past:
                return oldest
            time.sleep(0.5)
    raise AssertionError(f"retention did not delete {topic}/{queue_id} offset {past} in time")
