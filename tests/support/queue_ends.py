"""Waiting for a broker to index what it acknowledged.

A send is acknowledged once the commit log holds it; the dispatcher indexes it
into its consume queue a moment later, and only then can it be pulled.
"""

from __future__ import annotations

import time

from skiff_broker.client.admin import AdminClient
from skiff_broker.client.pull_consumer import PullConsumer

DISPATCH_DEADLINE_S = 30.0


def wait_for_messages(endpoint: str, topic: str, total: int) -> dict[int, int]:
    """Wait until the topic's queues hold ``total`` messages; returns each queue's end."""
    end = time.monotonic() + DISPATCH_DEADLINE_S
    with PullConsumer(endpoint) as consumer:
        while True:
            ends = {q.queue_id: q.max_offset for q in consumer.queue_ranges(topic)}
            if sum(ends.values()) >= total:
                return ends
            if time.monotonic() > end:
                raise AssertionError(f"{topic} holds {sum(ends.values())} of {total} messages")
            time.sleep(0.05)


def wait_until_dispatched(endpoint: str) -> None:
    """Wait until everything the broker acknowledged before this call can be pulled.

    The dispatcher indexes the commit log in order, so once it has passed the log's
    end as it stands now, every message acknowledged so far is in its queue.
    """
    end = time.monotonic() + DISPATCH_DEADLINE_S
    with AdminClient(endpoint) as admin:
        written = admin.broker_info().commit_log_max_offset
        while (dispatched := admin.broker_info().dispatched_offset) < written:
            if time.monotonic() > end:
                raise AssertionError(f"dispatched {dispatched} of {written} commit log bytes")
            time.sleep(0.05)
