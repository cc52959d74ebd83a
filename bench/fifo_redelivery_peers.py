"""FIFO redelivery of a partly acknowledged batch: Skiff beside Apache RocketMQ 5.3.3.

Starts each system on loopback (peer_brokers: RocketMQ as name server + proxy in local
mode, the consumer group configured to consume in order) and, with the official Python
client, runs two scenarios on one-queue FIFO topics of one message group:

- batch: send 3, receive 3 invisible for 10 s, ack the second and third, receive again;
- longer: send 3, receive 2 invisible for 10 s, ack the second, receive 3 again.

Prints what came back the second time, as (body, delivery attempt), per system.

    python bench/fifo_redelivery_peers.py [--systems skiff,rocketmq] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import tempfile
import time

import peer_brokers

MESSAGE_GROUP = "orders"
# RocketMQ's proxy and Skiff refuse receives invisible for less.
FIRST_INVISIBLE_S = 10
RECEIVE_DEADLINE_S = 60.0
# RocketMQ's proxy answers a receive before it has the client's settings with an error.
SETTINGS_SYNC_S = 5.0
SCENARIOS = (
    # (name, topic, first batch size, indexes of the first batch to ack)
    ("batch", peer_brokers.FIFO_TOPICS[0], 3, (1, 2)),
    ("longer", peer_brokers.FIFO_TOPICS[1], 2, (1,)),
)


def receive_some(consumer, count: int, invisible_s: int) -> list:
    end = time.monotonic() + RECEIVE_DEADLINE_S
    while time.monotonic() < end:
        got = consumer.receive(count, invisible_s)
        if got:
            return got
    raise RuntimeError("nothing came within the deadline")


def run(endpoint: str) -> dict[str, list[tuple[str, int]]]:
    from rocketmq import (
        ClientConfiguration,
        Credentials,
        FilterExpression,
        Message,
        Producer,
        SimpleConsumer,
    )

    config = ClientConfiguration(endpoint, Credentials())
    producer = Producer(config, peer_brokers.FIFO_TOPICS)
    producer.startup()
    try:
        for topic in peer_brokers.FIFO_TOPICS:
            for i in range(3):
                message = Message()
                message.topic = topic
                message.body = f"m{i}".encode()
                message.message_group = MESSAGE_GROUP
                producer.send(message)
    finally:
        producer.shutdown()
    results = {}
    for name, topic, first_count, acked in SCENARIOS:
        group = peer_brokers.ORDERLY_GROUPS[0]
        consumer = SimpleConsumer(config, group, {topic: FilterExpression()}, 20)
        consumer.startup()
        try:
            time.sleep(SETTINGS_SYNC_S)
            first = receive_some(consumer, first_count, FIRST_INVISIBLE_S)
            for index in acked:
                consumer.ack(first[index])
            again = receive_some(consumer, 3, 30)
            for message in again:
                consumer.ack(message)
        finally:
            consumer.shutdown()
        results[name] = [(m.body.decode(), m.delivery_attempt) for m in again]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", default="skiff,rocketmq")
    parser.add_argument("--data-dir", default=tempfile.gettempdir())
    args = parser.parse_args()
    classes = {"skiff": peer_brokers.SkiffBroker, "rocketmq": peer_brokers.RocketMQBroker}
    for system in args.systems.split(","):
        broker = classes[system](args.data_dir, peer_brokers.ASYNC)
        try:
            broker.start()
            for name, again in run(broker.endpoint).items():
                print(f"{system} {broker.version} {name}: again {again}", flush=True)
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
