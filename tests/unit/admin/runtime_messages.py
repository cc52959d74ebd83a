"""Putting messages into a real broker runtime and consuming them, for admin tests."""

from __future__ import annotations

from skiff_broker.delivery.pop import Delivery
from skiff_broker.delivery.tag_filter import TagFilter
from skiff_broker.runtime import Broker
from skiff_broker.store.message import Message
from skiff_broker.wire import property_names as prop


def put(broker: Broker, topic: str, queue_id: int, count: int, *, dispatched: bool = True) -> None:
    """Store ``count`` messages straight into one queue (and wait until they are in it)."""
    for i in range(count):
        result = broker.store.put_message(
            Message(
                topic=topic,
                body=f"{topic}-{queue_id}-{i}".encode(),
                queue_id=queue_id,
                properties={prop.UNIQ_KEY: f"ID-{topic}-{queue_id}-{i}"},
            )
        )
        assert result.ok, result.reason
    if dispatched:
        assert broker.store.wait_dispatched()


def receive(broker: Broker, group: str, topic: str, queue_ids: list[int]) -> list[Delivery]:
    """Everything visible in ``queue_ids`` for ``group``, handed out but not acknowledged."""
    return broker.pop.pop(group, topic, queue_ids, 1000, 60_000, TagFilter(None), fifo=False)


def ack(broker: Broker, group: str, deliveries: list[Delivery]) -> None:
    for d in deliveries:
        broker.pop.ack(group, d.message.topic, d.queue_id, d.offset, d.retrieve_time)


def consume(broker: Broker, group: str, topic: str, queue_ids: list[int]) -> int:
    """Receive and acknowledge everything visible; returns how many messages."""
    deliveries = receive(broker, group, topic, queue_ids)
    ack(broker, group, deliveries)
    return len(deliveries)
