"""Consumers that come and go, on the wire as the official clients do it.

Each ``Visitor`` opens a connection of its own, a Telemetry stream that sends its
subscription Settings, heartbeats, receives once (a short long poll) and leaves in one
of the ways clients leave:

- ``"terminate"``: NotifyClientTermination, then the connection closes (a clean
  shutdown of an official client);
- ``"disconnect"``: the connection closes without a word (a client process that died,
  or a network cut): the broker sees its Telemetry stream end and nothing more.

``visit`` runs many at once. Used by tests/integration/test_session_release.py and
bench/session_churn_bench.py; it uses plain gRPC, so hundreds of visitors cost a test
process little.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Literal

import grpc
from google.protobuf.duration_pb2 import Duration
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub

Leaving = Literal["terminate", "disconnect"]
CALL_TIMEOUT_S = 30.0


def subscription_settings(group: str, topic: str) -> spb.TelemetryCommand:
    return spb.TelemetryCommand(
        settings=pb.Settings(
            client_type=pb.ClientType.SIMPLE_CONSUMER,
            subscription=pb.Subscription(
                group=pb.Resource(name=group),
                subscriptions=[pb.SubscriptionEntry(topic=pb.Resource(name=topic))],
            ),
        )
    )


class Visitor:
    """One consumer session: ``arrive`` opens it, ``leave`` ends it."""

    def __init__(self, endpoint: str, client_id: str, group: str, topic: str) -> None:
        self.client_id = client_id
        self._group = group
        self._topic = topic
        self._metadata = (("x-mq-client-id", client_id),)
        self._channel = grpc.aio.insecure_channel(endpoint)
        self._stub = MessagingServiceStub(self._channel)
        self._closing = asyncio.Event()
        self._telemetry: grpc.aio.StreamStreamCall | None = None

    async def _commands(self) -> AsyncIterator[spb.TelemetryCommand]:
        yield subscription_settings(self._group, self._topic)
        await self._closing.wait()

    async def arrive(self) -> None:
        """Telemetry with Settings (answered), a heartbeat and one receive."""
        self._telemetry = self._stub.Telemetry(self._commands(), metadata=self._metadata)
        reply = await self._telemetry.read()
        assert reply.HasField("settings"), reply
        beat = await self._stub.Heartbeat(
            spb.HeartbeatRequest(
                client_type=pb.ClientType.SIMPLE_CONSUMER, group=pb.Resource(name=self._group)
            ),
            metadata=self._metadata,
            timeout=CALL_TIMEOUT_S,
        )
        assert beat.status.code == pb.Code.OK, beat.status
        receive = self._stub.ReceiveMessage(
            spb.ReceiveMessageRequest(
                group=pb.Resource(name=self._group),
                message_queue=pb.MessageQueue(topic=pb.Resource(name=self._topic)),
                filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"),
                batch_size=1,
                invisible_duration=Duration(seconds=30),
                long_polling_timeout=Duration(nanos=100_000_000),
            ),
            metadata=self._metadata,
            timeout=CALL_TIMEOUT_S,
        )
        async for _ in receive:
            pass

    async def leave(self, how: Leaving) -> None:
        if how == "terminate":
            answer = await self._stub.NotifyClientTermination(
                spb.NotifyClientTerminationRequest(group=pb.Resource(name=self._group)),
                metadata=self._metadata,
                timeout=CALL_TIMEOUT_S,
            )
            assert answer.status.code == pb.Code.OK, answer.status
            self._closing.set()
        # Closing the channel closes the connection and cancels the stream.
        await self._channel.close()


async def visit(
    endpoint: str,
    count: int,
    *,
    group: str,
    topic: str,
    how: Leaving,
    prefix: str,
    while_present: Callable[[], Awaitable[object]] | None = None,
    at_once: int = 50,
) -> None:
    """``count`` visitors arrive (``at_once`` at a time), then all leave ``how``.

    ``while_present()``, if given, is awaited while every visitor is there (the caller
    looks at the broker meanwhile)."""
    visitors = [Visitor(endpoint, f"{prefix}-{n}", group, topic) for n in range(count)]
    room = asyncio.Semaphore(at_once)

    async def arrive(visitor: Visitor) -> None:
        async with room:
            await visitor.arrive()

    await asyncio.gather(*(arrive(v) for v in visitors))
    if while_present is not None:
        await while_present()
    await asyncio.gather(*(v.leave(how) for v in visitors))
