"""Send one message with the official rocketmq-python-client and receive it back.

``python official_client_roundtrip.py ENDPOINT TOPIC GROUP BODY tls|plaintext`` prints the
received body and exits 0, or exits 1 saying what went wrong. It runs as its own process so
that gRPC reads GRPC_DEFAULT_SSL_ROOTS_FILE_PATH (the broker's self-signed certificate, which
the client's TLS verifies against) before anything else in the interpreter uses TLS.
"""

from __future__ import annotations

import sys
import time

from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)

DEADLINE_S = 60.0


def main() -> int:
    endpoint, topic, group, body, mode = sys.argv[1:6]
    tls = mode == "tls"
    config = ClientConfiguration(endpoint, Credentials())
    producer = Producer(config, (topic,), tls_enable=tls)
    producer.startup()
    try:
        message = Message()
        message.topic = topic
        message.body = body.encode()
        producer.send(message)
    finally:
        producer.shutdown()
    consumer = SimpleConsumer(config, group, {topic: FilterExpression()}, 2, tls_enable=tls)
    consumer.startup()
    try:
        end = time.monotonic() + DEADLINE_S
        while time.monotonic() < end:
            for received in consumer.receive(16, 30) or []:
                consumer.ack(received)
                print(received.body.decode())
                return 0
    finally:
        consumer.shutdown()
    print("no message came back", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
