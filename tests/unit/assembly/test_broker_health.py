"""The broker's health states on the broker's gRPC server on 127.0.0.1: NOT_SERVING while
starting, SERVING once started, NOT_SERVING for good once stopping."""

from __future__ import annotations

import asyncio

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tests.support.rpc_serving import serving

from skiff_broker.assembly.health import MESSAGING_SERVICE, BrokerHealth

STATUS = health_pb2.HealthCheckResponse


def test_the_states_of_a_broker_from_start_to_stop() -> None:
    async def scenario() -> list[tuple[int, int]]:
        health = BrokerHealth()
        seen = []
        async with (
            serving(health.add_to_server) as port,
            grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel,
        ):
            stub = health_pb2_grpc.HealthStub(channel)

            async def check() -> tuple[int, int]:
                overall = await stub.Check(health_pb2.HealthCheckRequest(), timeout=5)
                messaging = await stub.Check(
                    health_pb2.HealthCheckRequest(service=MESSAGING_SERVICE), timeout=5
                )
                return overall.status, messaging.status

            await health.starting()
            seen.append(await check())
            await health.serving()
            seen.append(await check())
            await health.stopping()
            seen.append(await check())
            # A broker that began to stop never reports SERVING again.
            await health.serving()
            seen.append(await check())
        return seen

    assert asyncio.run(scenario()) == [
        (STATUS.NOT_SERVING, STATUS.NOT_SERVING),
        (STATUS.SERVING, STATUS.SERVING),
        (STATUS.NOT_SERVING, STATUS.NOT_SERVING),
        (STATUS.NOT_SERVING, STATUS.NOT_SERVING),
    ]
