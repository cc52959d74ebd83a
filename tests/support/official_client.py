"""The official RocketMQ Python client (``rocketmq``), started and stopped for a test.

``started_producer`` and ``started_simple_consumer`` are context managers that start the
client and always shut it down; ``receive_all`` receives until a count of messages came
back or its deadline passed, and returns what came (the caller asserts on it).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
    TransactionChecker,
)

RECEIVE_DEADLINE_S = 90.0


@contextlib.contextmanager
def started_producer(
    config: ClientConfiguration, *topics: str, checker: TransactionChecker | None = None
) -> Iterator[Producer]:
    """A started producer, told ``topics`` up front (it fetches their routes at start)."""
    client = Producer(config, topics or None, checker=checker)
    client.startup()
    try:
        yield client
    finally:
        client.shutdown()


@contextlib.contextmanager
def started_simple_consumer(
    config: ClientConfiguration,
    group: str,
    topic: str,
    expression: str | FilterExpression = "*",
    await_s: int = 5,
) -> Iterator[SimpleConsumer]:
    """A started SimpleConsumer of ``group`` on ``topic``, long-polling ``await_s`` seconds.

    ``expression`` is a tag expression, or a FilterExpression of either type."""
    if isinstance(expression, str):
        expression = FilterExpression(expression)
    client = SimpleConsumer(config, group, {topic: expression}, await_s)
    client.startup()
    try:
        yield client
    finally:
        client.shutdown()


def receive_all(
    consumer: SimpleConsumer,
    count: int,
    invisible_s: int = 30,
    *,
    ack: bool = True,
    deadline_s: float = RECEIVE_DEADLINE_S,
) -> list[Message]:
    """Receive until ``count`` messages came back (acking them unless told not to)."""
    received: list[Message] = []
    end = time.monotonic() + deadline_s
    while len(received) < count and time.monotonic() < end:
        for msg in consumer.receive(32, invisible_s):
            received.append(msg)
            if ack:
                consumer.ack(msg)
    return received


def receive_until_quiet(
    endpoint: str, group: str, topic: str, invisible_s: int, deadline_s: float = RECEIVE_DEADLINE_S
) -> list[bytes]:
    """Receive and ack with a SimpleConsumer until a long poll (longer than the invisible
    time, so nothing is still due) brings nothing; the bodies, in the order received."""
    config = ClientConfiguration(endpoint, Credentials())
    client = SimpleConsumer(config, group, {topic: FilterExpression()}, invisible_s + 2)
    client.startup()
    received: list[bytes] = []
    try:
        end = time.monotonic() + deadline_s
        while batch := client.receive(32, invisible_s):
            assert time.monotonic() < end, "messages keep coming"
            for msg in batch:
                received.append(msg.body)
                client.ack(msg)
    finally:
        client.shutdown()
    return received
